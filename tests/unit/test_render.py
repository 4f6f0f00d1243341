"""One plan, three renderings: Terraform-like text, Markdown for PRs, JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconciler.identity import ResourceRef
from reconciler.locations import Location
from reconciler.model.diff import FieldChange
from reconciler.model.state import ServerInfo
from reconciler.model.values import display
from reconciler.planning.drift import from_plan
from reconciler.planning.steps import Create, Delete, Orphan, Plan, Replace, Unmanaged, Update
from reconciler.render import render_plan
from reconciler.render.drift_markdown import render_drift_markdown
from reconciler.render.drift_text import render_drift_text
from reconciler.render.markdown import cell, render_markdown

SERVER = ServerInfo(version="2.12.8", api_level=3)
HOUR = 3_600_000_000_000


def sample_plan() -> Plan:
    where = Location("specs/orders.yaml", 3)
    return Plan(
        server=SERVER,
        changes=(
            Create(
                ref=ResourceRef("Stream", "NEW"),
                fields=(FieldChange("subjects", None, ["n.>"]),),
                config={"name": "NEW"},
            ),
            Update(
                ref=ResourceRef("Stream", "ORDERS"),
                source=where,
                fields=(
                    FieldChange("max_age", HOUR, 2 * HOUR),
                    FieldChange("max_bytes", -1, 1 << 30),
                    FieldChange("description", "a|b", "c"),
                ),
                config={},
                live={},
            ),
            Replace(
                ref=ResourceRef("Consumer", "worker", "ORDERS"),
                source=where,
                fields=(FieldChange("ack_policy", "none", "explicit"),),
                reasons=("ack_policy cannot be changed",),
                config={},
                live={},
            ),
            Delete(ref=ResourceRef("Stream", "OLD")),
        ),
        unmanaged=(Unmanaged(ref=ResourceRef("KeyValue", "legacy")),),
        orphans=(Orphan(ref=ResourceRef("Stream", "STALE")),),
    )


def bucket_plan() -> Plan:
    return Plan(
        server=SERVER,
        changes=(
            Update(
                ref=ResourceRef("KeyValue", "cfg"),
                fields=(FieldChange("max_msgs_per_subject", 1, 5), FieldChange("max_age", 0, HOUR)),
                config={},
                live={},
            ),
        ),
    )


def test_text_reads_like_terraform_with_human_units() -> None:
    text = render_plan(sample_plan(), "text")
    assert "+ create Stream NEW" in text
    assert '    subjects: ["n.>"]' in text
    assert "~ update Stream ORDERS  (specs/orders.yaml:3)" in text
    assert "    max_age: 1h → 2h" in text
    assert "    max_bytes: unlimited → 1GiB (1073741824)" in text
    assert "-/+ replace Consumer ORDERS/worker" in text
    assert "    # ack_policy cannot be changed" in text
    assert "- delete Stream OLD" in text
    assert "? KeyValue legacy" in text and "! Stream STALE" in text
    assert "Plan: 1 to create, 1 to update, 1 to replace, 1 to delete (0 unchanged)." in text
    assert "\x1b[" not in text


def test_text_says_so_when_nothing_changes() -> None:
    text = render_plan(Plan(server=SERVER), "text")
    assert "No changes. 0 resource(s) unchanged." in text


def test_colour_is_added_only_when_asked() -> None:
    assert "\x1b[32m+ create Stream NEW" in render_plan(sample_plan(), "text", color=True)


@pytest.mark.parametrize(
    ("path", "value", "shown"),
    [
        ("duplicate_window", 120_000_000_000, "2m"),
        ("backoff", [1_000_000_000, 5_000_000_000], "[1s, 5s]"),
        ("consumer_limits.inactive_threshold", 0, "0s"),
        ("max_msg_size", 1024, "1KiB (1024)"),
        ("max_msgs", -1, "unlimited"),
        ("max_age", 0, "0s"),
        ("metadata.owner", "team", '"team"'),
        ("metadata.db_password", "hunter2", '"<redacted>"'),
        ("metadata", {"api_token": "t0k"}, '{"api_token": "<redacted>"}'),
        ("mirror", None, "(absent)"),
        ("sealed", True, "true"),
    ],
)
def test_values_are_shown_in_human_units(path: str, value: Any, shown: str) -> None:
    kind = "Consumer" if path == "backoff" else "Stream"
    assert display(value, path=path, kind=kind) == shown


def test_plan_and_drift_show_and_redact_a_value_the_same_way() -> None:
    secret = "s3cr3t-value"
    change = FieldChange("metadata.db_password", None, secret)
    plan = Plan(
        server=SERVER,
        changes=(Update(ref=ResourceRef("Stream", "S"), fields=(change,), config={}, live={}),),
    )
    outputs = [render_plan(plan, fmt) for fmt in ("text", "markdown", "json")]
    report = from_plan(plan)
    outputs += [render_drift_text(report), render_drift_markdown(report)]
    outputs.append(json.dumps(report.to_json()))
    for output in outputs:
        assert secret not in output
        assert "<redacted>" in output or "&lt;redacted&gt;" in output
    line = 'metadata.db_password: (absent) → "<redacted>"'
    assert line in render_plan(plan, "text")


def test_markdown_is_reviewer_first_verdict_then_destructive_steps_as_diffs() -> None:
    markdown = render_plan(sample_plan(), "markdown")
    first, *_ = markdown.splitlines()
    assert first == (
        "### ⛔ Destroys data, refused as it stands: "
        "1 to create, 1 to update, 1 to replace, 1 to delete"
    )
    assert "> [!WARNING]" in markdown
    # destructive steps (the replace, the delete) before the harmless ones
    order = [markdown.index(text) for text in ("replace Consumer", "delete Stream OLD")]
    assert max(order) < markdown.index("create Stream NEW") < markdown.index("update Stream")
    assert "```diff\n- max_age: 1h\n+ max_age: 2h\n" in markdown
    assert '```diff\n+ subjects: ["n.>"]\n```' in markdown  # a create: values only
    assert "- ack_policy cannot be changed" in markdown
    assert "<details>" not in markdown.split("#### Changes")[1].split("**🔄 update")[0]


def test_markdown_verdict_says_when_nothing_is_destroyed_or_when_it_is_allowed() -> None:
    safe = Plan(server=SERVER, changes=sample_plan().changes[:2])
    assert render_plan(safe, "markdown").startswith(
        "### ✅ 1 to create, 1 to update: nothing is destroyed"
    )
    allowed = render_plan(sample_plan(), "markdown", allowed=("--allow-replace",))
    assert allowed.startswith("### ⚠️ Destroys data (allowed):")
    assert render_plan(Plan(server=SERVER), "markdown").startswith("### ✅ No changes")


def test_markdown_values_in_diff_blocks_stay_code_whatever_they_hold() -> None:
    markdown = render_plan(sample_plan(), "markdown")
    assert '- description: "a|b"' in markdown  # inside the code block: nothing to escape
    assert cell("<script>|x\ny") == "&lt;script&gt;\\|x y"
    fence = "`" * 3
    hostile = Plan(
        server=SERVER,
        changes=(
            Update(
                ref=ResourceRef("Stream", "S"),
                fields=(FieldChange("description", "x", f"{fence}\n<img src=x>"),),
                config={},
                live={},
            ),
        ),
    )
    text = render_plan(hostile, "markdown")
    assert "````diff" in text  # the fence outgrows the value's backticks
    assert '+ description: "```\\n<img src=x>"' in text
    block = text.split("````diff\n")[1].split("\n````")[0]
    assert len(block.splitlines()) == 2  # the value's line break cannot end the block


def test_a_small_change_among_300_other_resources_stays_a_small_comment() -> None:
    """The issue's case: 2 changed fields, 300 unmanaged or other-owner resources."""
    from reconciler.planning.steps import Foreign

    plan = Plan(
        server=SERVER,
        changes=(
            Update(
                ref=ResourceRef("Stream", "ORDERS"),
                fields=(FieldChange("max_age", HOUR, 2 * HOUR), FieldChange("max_msgs", -1, 10)),
                config={},
                live={},
            ),
        ),
        unmanaged=tuple(Unmanaged(ref=ResourceRef("Stream", f"TEAM{i:03d}")) for i in range(200)),
        foreign=tuple(
            Foreign(ref=ResourceRef("Stream", f"OTHER{i:03d}"), owner="billing") for i in range(100)
        ),
    )
    markdown = render_plan(plan, "markdown")
    visible = markdown.split("<details>")[0]
    assert "- max_age: 1h\n+ max_age: 2h" in visible and "TEAM000" not in visible
    assert "<summary>200 unmanaged (never touched)</summary>" in markdown
    assert "<summary>100 managed by other owners (never touched)</summary>" in markdown
    assert "… and 100 more" in markdown  # 200 names: the first 100 listed
    assert "also on the server: 200 unmanaged, 100 of other owners" in visible
    assert len(markdown) < 5_000


def test_markdown_stays_under_its_budget_and_points_at_the_full_plan() -> None:
    steps = tuple(
        Update(
            ref=ResourceRef("Stream", f"S{i:04d}"),
            fields=tuple(FieldChange(f"metadata.k{j}", "a" * 40, "b" * 40) for j in range(5)),
            config={},
            live={},
        )
        for i in range(2_000)
    )
    delete = Delete(ref=ResourceRef("Stream", "ZZZ_GONE"))
    plan = Plan(server=SERVER, changes=(*steps, delete))
    link = (
        "artifact `jetstream-plan-x` of [the workflow run](https://github.com/o/r/actions/runs/1)"
    )
    markdown = render_markdown(plan, budget=20_000, full_plan=link)
    assert len(markdown) <= 20_000
    assert "delete Stream ZZZ_GONE" in markdown  # destructive first: never the one cut
    shown = markdown.count("update Stream S")
    assert 0 < shown < 2_000
    assert f"> {2_000 - shown} more change(s) not shown" in markdown
    assert link in markdown
    assert len(render_plan(plan, "markdown")) <= 60_000  # the default budget


def test_json_is_the_plan_document() -> None:
    plan = sample_plan()
    assert json.loads(render_plan(plan, "json")) == plan.to_json()


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown plan format"):
        render_plan(sample_plan(), "yaml")  # type: ignore[arg-type]


def test_bucket_fields_are_shown_with_their_bucket_names() -> None:
    text = render_plan(bucket_plan(), "text")
    assert "    max_msgs_per_subject (history): 1 → 5" in text
    assert "    max_age (ttl): 0s → 1h" in text
    assert "+ max_age (ttl): 1h" in render_plan(bucket_plan(), "markdown")


def test_markdown_never_renders_a_resource_name_as_a_link_or_markup() -> None:
    hostile = "[x](http:evil)"
    plan = Plan(
        server=SERVER,
        unmanaged=(Unmanaged(ref=ResourceRef("Stream", hostile)),),
        orphans=(Orphan(ref=ResourceRef("Stream", "*bold*_x_")),),
    )
    markdown = render_plan(plan, "markdown")
    assert hostile not in markdown and "\\[x\\](http:evil)" in markdown
    assert "*bold*" not in markdown
    drift = render_drift_markdown(from_plan(plan))
    assert "[x](http:evil)" not in drift.replace("`[x](http:evil)`", "")


def test_a_plan_run_with_the_allowing_flag_does_not_say_the_flag_is_needed() -> None:
    plan = sample_plan()  # a replace and a delete
    assert "apply refuses them without --allow-replace" in render_plan(plan, "text")
    allowed = render_plan(plan, "text", allowed=("--allow-replace",))
    assert "allowed by --allow-replace" in allowed and "refuses" not in allowed
    markdown = render_plan(plan, "markdown", allowed=("--allow-data-loss",))
    assert "allowed by --allow-data-loss" in markdown
