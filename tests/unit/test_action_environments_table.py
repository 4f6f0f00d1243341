"""The step summary's table of environments (several environments in one step): an
environment whose plan a policy deny rule refuses (exit 3) is never shown with the
green tick of an environment that planned fine."""

from __future__ import annotations

from action.__main__ import Inputs, Outcome, environments_table


def _job(env: str) -> Inputs:
    return Inputs(
        paths=(),
        mode="plan",
        server="",
        creds="",
        context="",
        prune=False,
        allow_replace=False,
        allow_data_loss=False,
        comment=False,
        fail_on_drift=False,
        env=env,
    )


def test_an_environment_a_policy_denies_is_not_ticked() -> None:
    table = environments_table(
        [
            (_job("dev"), Outcome({"summary": "2 to create, 0 unchanged"}, "", 0)),
            (_job("prod"), Outcome({"summary": "2 to create, 0 unchanged"}, "", 3)),
            (_job("stage"), Outcome({"summary": "failed: no server"}, "", 1)),
        ]
    )
    assert "| `env dev` | ✅ | 2 to create" in table
    assert "| `env prod` | ⛔ denied by policy | 2 to create" in table
    assert "| `env stage` | ❌ | failed: no server" in table
