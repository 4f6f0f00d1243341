"""Policy evaluation on a plan (pure: build_plan over a live state made here): what the
variables hold for each action, filters, and evaluation errors as findings."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from reconciler.model.normalize import desired_config
from reconciler.model.state import LiveState, ServerInfo, StreamState
from reconciler.planning.plan import build_plan
from reconciler.planning.policy import evaluate, refusal
from reconciler.planning.steps import Plan
from reconciler.specs.policy import load_policy
from reconciler.specs.spec import Spec
from reconciler.specs.validate import load_specs

SERVER = ServerInfo(version="2.12.4", api_level=2)
SPECS = """\
kind: Stream
name: KEEP
subjects: [keep.>]
max_bytes: 1024
---
kind: Stream
name: NEW
subjects: [new.>]
---
kind: Stream
name: SHRINK
subjects: [shrink.>]
max_msgs: 10
"""


@pytest.fixture
def planned(tmp_path: Path) -> tuple[Plan, list[Spec], LiveState]:
    """KEEP unchanged, NEW created, SHRINK updated from max_msgs 1000 to 10 while holding
    100 messages, OLD (managed, undeclared) deleted with prune."""
    (tmp_path / "specs.yaml").write_text(SPECS, encoding="utf-8")
    specs = load_specs([tmp_path / "specs.yaml"])
    by_name = {s.name: s for s in specs}
    shrink = desired_config(by_name["SHRINK"], SERVER) | {"max_msgs": 1000}
    old = desired_config(by_name["NEW"], SERVER) | {"name": "OLD", "subjects": ["old.>"]}
    live = LiveState(
        server=SERVER,
        streams={"KEEP": desired_config(by_name["KEEP"], SERVER), "SHRINK": shrink, "OLD": old},
        stream_state={
            "SHRINK": StreamState(messages=100, bytes=1000),
            "OLD": StreamState(messages=7, bytes=70),
        },
    )
    return build_plan(specs, live, prune=True), specs, live


def _found(
    tmp_path: Path, planned: tuple[Plan, list[Spec], LiveState], rules: str, **kw: str
) -> dict[str, tuple[str, str]]:
    path = tmp_path / "policy.yaml"
    path.write_text("rules:\n" + rules, encoding="utf-8")
    plan, specs, live = planned
    findings = asyncio.run(evaluate(load_policy([path]), plan, specs, live, **kw))
    return {f.ref.name: (f.action, f.error) for f in findings}


def rule(expr: str, *, level: str = "deny", extra: str = "") -> str:
    return f"  - id: r\n    level: {level}\n    message: m\n{extra}    expr: '{expr}'\n"


def test_each_action_and_its_configs(
    tmp_path: Path, planned: tuple[Plan, list[Spec], LiveState]
) -> None:
    """desired is {} for a delete, live is {} for a create; unchanged has both."""
    assert _found(tmp_path, planned, rule("size(resource.desired) > 0")) == {"OLD": ("delete", "")}
    assert _found(tmp_path, planned, rule("size(resource.live) > 0")) == {"NEW": ("create", "")}
    found = _found(tmp_path, planned, rule('step.action == "unchanged"'))
    assert set(found) == {"NEW", "SHRINK", "OLD"}


def test_loss_messages_counts_what_a_step_deletes(
    tmp_path: Path, planned: tuple[Plan, list[Spec], LiveState]
) -> None:
    found = _found(tmp_path, planned, rule("step.loss_messages <= 5"))
    assert found == {"SHRINK": ("update", ""), "OLD": ("delete", "")}  # 90 and 7


def test_kinds_when_and_environment_filter(
    tmp_path: Path, planned: tuple[Plan, list[Spec], LiveState]
) -> None:
    when = '    when: resource.environment == "prod"\n'
    assert _found(tmp_path, planned, rule("false", extra=when), environment="dev") == {}
    assert len(_found(tmp_path, planned, rule("false", extra=when), environment="prod")) == 4
    kinds = "    kinds: [Consumer]\n"
    assert _found(tmp_path, planned, rule("false", extra=kinds)) == {}


def test_a_key_a_resource_lacks_is_a_finding_has_guards_it(
    tmp_path: Path, planned: tuple[Plan, list[Spec], LiveState]
) -> None:
    """declared.max_bytes: only KEEP's spec writes it. Unguarded: an error finding per
    other resource; with has(): only the false ones; the whole map (`in`) agrees."""
    found = _found(tmp_path, planned, rule("resource.declared.max_bytes > 0"))
    assert set(found) == {"NEW", "SHRINK", "OLD"}
    assert all("max_bytes" in error for _, error in found.values())
    guarded = rule("!has(resource.declared.max_bytes) || resource.declared.max_bytes > 2000")
    assert _found(tmp_path, planned, guarded) == {"KEEP": ("unchanged", "")}
    whole = rule('!("max_bytes" in resource.declared) || resource.declared.max_bytes > 2000')
    assert _found(tmp_path, planned, whole) == {"KEEP": ("unchanged", "")}


def test_a_value_that_is_not_a_bool_is_a_finding(
    tmp_path: Path, planned: tuple[Plan, list[Spec], LiveState]
) -> None:
    found = _found(tmp_path, planned, rule("resource.name"))
    assert found["KEEP"] == ("unchanged", "the expression gave 'KEEP', not a bool")


def test_a_deny_refuses_naming_rule_and_resource(
    tmp_path: Path, planned: tuple[Plan, list[Spec], LiveState]
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "rules:\n"
        + rule("step.loss_messages <= 5")
        + rule("false", level="warn").replace("id: r", "id: w")
    )
    plan, specs, live = planned
    findings = asyncio.run(evaluate(load_policy([path]), plan, specs, live))
    denied = refusal(findings)
    assert denied is not None and denied.exit_code == 3
    assert denied.headline.startswith("refusing to apply: policy rule(s) r deny this plan (2")
    assert "deny r: Stream SHRINK (update): m" in denied.details
    assert refusal([f for f in findings if not f.denies]) is None
