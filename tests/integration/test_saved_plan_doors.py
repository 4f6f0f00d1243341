"""The saved-plan rules live once (issue 40): the same saved plan, applied through the
CLI (``reconcile apply FILE``) and through the GitHub Action (``mode: apply`` with
``plan-file``), gets the same result: the same refusal, or the same changes, with the
messages counted on a real server after each."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer
from test_saved_plan_attacks import RULES, pruning_plan
from test_saved_plans import (
    ORDERS,
    action_step,
    apply_file,
    publish,
    refit,
    repo,
    state,
)

pytestmark = pytest.mark.integration


def both(
    root: Path, server: NatsServer, plan: Path, cli: tuple[str, ...], action: dict[str, str]
) -> list[tuple[int, str]]:
    """The saved plan applied by each front door, the server counted after each:
    ``[(exit status, what it said), ...]``, the CLI's first."""
    done = apply_file(root, server, plan, *cli)
    code, log, _ = action_step(root, server, mode="apply", **{"plan-file": str(plan)} | action)
    return [(done.returncode, done.stdout + done.stderr), (code, log)]


def refused_alike(results: list[tuple[int, str]], why: str) -> None:
    for code, said in results:
        assert code == 1, said
        assert why in said, said
        assert "Traceback" not in said


@pytest.mark.parametrize(
    ("cli", "action", "edit", "why"),
    [
        pytest.param(
            ("--allow-replace",),
            {"allow-replace": "true"},
            None,
            "the saved plan was made with prune and is applied without it",
            id="prune-is-consent",
        ),
        pytest.param(
            ("--prune", "--allow-replace", "--migrate"),
            {"prune": "true", "allow-replace": "true", "migrate": "true"},
            None,
            "given with a saved plan: the plan decides migrate",
            id="the-plan-decides-migrate",
        ),
        pytest.param(
            ("--prune", "--allow-replace", "--policy", "policies/bounded.yaml"),
            {"prune": "true", "allow-replace": "true", "policy": "policies/bounded.yaml"},
            None,
            "the saved plan leaves out the policy file policies/bounded.yaml",
            id="required-policy",
        ),
        pytest.param(
            ("--prune", "--allow-replace"),
            {"prune": "true", "allow-replace": "true"},
            lambda d: d["request"].update(owner="payments"),
            "the saved plan names owner payments, not default",
            id="owner-is-the-appliers",
        ),
        pytest.param(
            ("--prune", "--allow-replace"),
            {"prune": "true", "allow-replace": "true"},
            lambda d: d["request"].update(take_over=True),
            "the saved plan takes over resources another owner manages",
            id="take-over-is-consent",
        ),
    ],
)
def test_both_front_doors_refuse_a_saved_plan_alike(
    clean_server: NatsServer,
    tmp_path: Path,
    cli: tuple[str, ...],
    action: dict[str, str],
    edit: Callable[[dict[str, Any]], None] | None,
    why: str,
) -> None:
    root = repo(tmp_path)
    (root / "policies").mkdir()
    (root / "policies" / "bounded.yaml").write_text(RULES)
    plan = pruning_plan(root, clean_server)  # deletes OLD (4 messages), with --prune
    if edit is not None:
        refit(plan, edit)
    before = state(clean_server)
    assert before["OLD"]["messages"] == 4

    results = both(root, clean_server, plan, cli, action)

    refused_alike(results, why)
    assert state(clean_server) == before


def test_both_front_doors_apply_the_same_saved_plan_alike(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The reviewed plan (prune OLD, 4 messages; describe ORDERS, 10 messages kept)
    applied by the Action, the server put back as it was reviewed, then applied by the
    CLI: the same end state, counted; a stale file refused by both the same way."""
    root = repo(tmp_path)
    old = "kind: Stream\nname: OLD\nsubjects: [old]\n"

    def as_reviewed() -> dict[str, Any]:
        (root / "specs" / "old.yaml").write_text(old)
        (root / "specs" / "orders.yaml").write_text(ORDERS.format(extra=""))
        done = reconcile("apply", "specs", "--server", clean_server.url, "--yes", cwd=root)
        assert done.returncode == 0, done.stderr
        publish(clean_server, "old", 4 - state(clean_server)["OLD"]["messages"])
        publish(clean_server, "ORDERS.new", 10 - state(clean_server)["ORDERS"]["messages"])
        (root / "specs" / "old.yaml").unlink()
        (root / "specs" / "orders.yaml").write_text(ORDERS.format(extra="description: kept"))
        return state(clean_server)

    reviewed = as_reviewed()
    done = reconcile(
        "plan", "specs", "--prune", "--out", "../p.json", "--server", clean_server.url, cwd=root
    )
    assert done.returncode == 0, done.stderr
    plan = tmp_path / "p.json"
    flags = {"prune": "true", "allow-replace": "true"}

    code, log, _ = action_step(root, clean_server, mode="apply", **{"plan-file": str(plan)} | flags)
    assert code == 0, log
    by_action = state(clean_server)
    assert set(by_action) == {"ORDERS"}
    assert by_action["ORDERS"]["messages"] == 10
    assert by_action["ORDERS"]["config"]["description"] == "kept"

    assert as_reviewed() == reviewed
    done = apply_file(root, clean_server, plan, "--prune", "--allow-replace")
    assert done.returncode == 0, done.stderr
    assert state(clean_server) == by_action

    results = both(root, clean_server, plan, ("--prune", "--allow-replace"), flags)
    refused_alike(results, "the plan made now is not the saved one")
    assert state(clean_server) == by_action


def test_the_files_strict_decides_in_both_front_doors(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``strict`` is the saved plan's (the CLI kept it, the Action's was said not to): a
    file that says strict is re-planned strict by both doors, so a spec warning refuses
    it in both, naming its line, and nothing is created."""
    root = repo(tmp_path, extra="max_bytes: 1GB")  # a warning: ambiguous unit
    done = reconcile("plan", "specs", "--out", "../p.json", "--server", clean_server.url, cwd=root)
    assert done.returncode == 0, done.stderr
    plan = tmp_path / "p.json"
    refit(plan, lambda d: d["request"].update(strict=True))

    results = both(root, clean_server, plan, (), {})

    refused_alike(results, "specs/orders.yaml:5")
    assert state(clean_server) == {}
