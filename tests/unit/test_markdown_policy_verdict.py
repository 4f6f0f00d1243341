"""The Markdown plan's headline when a policy ``deny`` rule does not hold: apply refuses
the plan whatever the inputs, so the verdict says so and how many rules deny it, never
"✅ ... nothing is destroyed" or "✅ No changes"."""

from __future__ import annotations

from reconciler.identity import ResourceRef
from reconciler.model.state import ServerInfo
from reconciler.planning.findings import PolicyFinding
from reconciler.planning.steps import Create, Plan, Unchanged
from reconciler.render.markdown import render_markdown

SERVER = ServerInfo(version="2.15.1", api_level=4)


def _finding(rule: str, level: str, name: str) -> PolicyFinding:
    return PolicyFinding(
        rule=rule,
        level=level,
        message=f"{rule} failed",
        ref=ResourceRef("Stream", name),
        action="create",
        rule_source="policies/prod.yaml:2",
    )


def _create(name: str) -> Create:
    return Create(ref=ResourceRef("Stream", name), config={"name": name})


def test_a_denied_plan_names_how_many_deny_rules_do_not_hold() -> None:
    findings = (
        _finding("prod-replicas", "deny", "A"),
        _finding("prod-replicas", "deny", "B"),
        _finding("stream-max-bytes", "deny", "A"),
        _finding("upper-case-names", "warn", "A"),
    )
    plan = Plan(server=SERVER, changes=(_create("A"), _create("B")), policy=findings)
    headline = render_markdown(plan).split("\n", 1)[0]
    assert headline == (
        "### ⛔ Denied by policy: 2 deny rules do not hold (3 findings), apply refuses: 2 to create"
    )
    warned = Plan(server=SERVER, changes=(_create("A"),), policy=findings[3:])
    assert render_markdown(warned).startswith("### ✅ 1 to create: nothing is destroyed")


def test_a_denied_plan_without_changes_is_not_a_green_tick() -> None:
    unchanged = (Unchanged(ref=ResourceRef("Stream", "A")),)
    plan = Plan(server=SERVER, unchanged=unchanged, policy=(_finding("r", "deny", "A"),))
    assert render_markdown(plan).startswith(
        "### ⛔ Denied by policy: 1 deny rule does not hold (1 finding), apply refuses: no changes"
    )
