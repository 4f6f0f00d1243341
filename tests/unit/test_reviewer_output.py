"""Reviewer-first output at scale: a table per kind and action first, destructive and
lossy steps always in full, the rest grouped behind ``<details>`` (Markdown) or folded
per kind and action (text, over 50 steps; ``full`` shows each), and a PR comment or
step summary never over GitHub's limits nor cut inside a code block or a ``<details>``."""

from __future__ import annotations

import re

import pytest

from action.comment import COMMENT_LIMIT, comment_body
from action.runner import truncate_summary
from reconciler.identity import ResourceRef
from reconciler.model.diff import FieldChange
from reconciler.model.loss import Loss
from reconciler.model.state import ServerInfo
from reconciler.planning.steps import Create, Delete, Plan, Replace, Step, Update
from reconciler.render import render_plan
from reconciler.render.markdown import fit, render_markdown
from reconciler.render.text import render_text

SERVER = ServerInfo(version="2.12.8", api_level=3)
HOUR = 3_600_000_000_000


def creates(count: int) -> tuple[Step, ...]:
    """``count`` streams and one consumer each, as a first plan of a big project has."""
    steps: list[Step] = []
    for i in range(count // 2):
        fields = (
            FieldChange("subjects", None, [f"orders{i}.>"]),
            FieldChange("storage", None, "file"),
            FieldChange("num_replicas", None, 3),
            FieldChange("max_age", None, 7 * 24 * HOUR),
            FieldChange("max_bytes", None, 1 << 30),
            FieldChange("description", None, f"orders of shop number {i}"),
        )
        steps.append(Create(ref=ResourceRef("Stream", f"ORDERS{i:04d}"), fields=fields, config={}))
        consumer = (
            FieldChange("ack_policy", None, "explicit"),
            FieldChange("ack_wait", None, 30 * 10**9),
            FieldChange("max_deliver", None, 5),
        )
        ref = ResourceRef("Consumer", "ship", f"ORDERS{i:04d}")
        steps.append(Create(ref=ref, fields=consumer, config={}))
    return tuple(steps)


def destructive() -> tuple[Step, ...]:
    lossy = Update(
        ref=ResourceRef("Stream", "AUDIT"),
        fields=(FieldChange("max_age", 30 * 24 * HOUR, HOUR),),
        losses=(Loss("max_age", "holds 9 messages older than 1h: they are deleted", 9),),
        config={},
        live={},
    )
    replace = Replace(
        ref=ResourceRef("Stream", "EVENTS"),
        fields=(FieldChange("storage", "file", "memory"),),
        reasons=("storage cannot be changed",),
        config={},
        live={},
    )
    return (lossy, replace, Delete(ref=ResourceRef("Stream", "ZZZ_GONE")))


def _outside_details(markdown: str) -> str:
    return re.sub(r"<details>.*?</details>", "", markdown, flags=re.S)


@pytest.mark.parametrize("count", [300, 3_000])
def test_a_big_plan_comment_leads_with_a_table_and_keeps_destructive_steps_in_full(
    count: int,
) -> None:
    plan = Plan(server=SERVER, changes=(*creates(count), *destructive()))
    markdown = render_markdown(plan)
    body = comment_body(markdown, path="specs")
    assert len(body) <= COMMENT_LIMIT
    head = markdown.split("####")[0]
    assert f"| Stream | {count // 2} | 1 | 1 | 1 |" in head  # create, update, replace, delete
    assert f"| Consumer | {count // 2} | 0 | 0 | 0 |" in head
    visible = _outside_details(markdown)
    assert "**⚠️ replace Stream EVENTS**" in visible
    assert "- storage cannot be changed" in visible
    assert "**🔄 update Stream AUDIT**" in visible
    assert "- **loses:** holds 9 messages older than 1h: they are deleted" in visible
    assert "**🗑️ delete Stream ZZZ_GONE**" in visible
    assert "create Stream ORDERS" not in visible  # the harmless ones are folded
    assert f"<summary>🆕 {count // 2} to create: Stream (ORDERS0000, ORDERS0001" in markdown
    assert markdown.count("<details>") == markdown.count("</details>")
    assert markdown.count("```") % 2 == 0


def test_300_creates_read_in_a_few_lines_before_the_first_fold() -> None:
    markdown = render_markdown(Plan(server=SERVER, changes=creates(300)))
    before_fold = markdown.split("<details>")[0]
    assert len(before_fold.splitlines()) < 20
    assert len(markdown) <= 60_000


def test_a_plan_of_50_steps_or_fewer_is_shown_whole() -> None:
    markdown = render_markdown(Plan(server=SERVER, changes=creates(50)))
    assert "<details>" not in markdown and markdown.count("**🆕 create") == 50
    full = render_markdown(Plan(server=SERVER, changes=creates(60)), full=True)
    assert "<details>" not in full and full.count("**🆕 create") == 60


def test_fit_never_cuts_inside_a_code_block_or_leaves_details_open() -> None:
    block = "<details>\n<summary>x</summary>\n\n```diff\n" + "+ a: 1\n" * 50 + "```\n\n</details>\n"
    markdown = "### title\n\n" + block * 40
    for limit in (500, 1_234, 5_000, 9_999):
        cut = fit(markdown, limit, where="the plan artifact")
        assert len(cut) <= limit
        assert cut.count("```") % 2 == 0, limit
        assert cut.count("<details>") == cut.count("</details>"), limit
        assert cut.endswith("The complete plan: the plan artifact.\n")
    assert fit(markdown, len(markdown), where="x") == markdown


def test_a_comment_over_the_limit_is_cut_outside_its_code_blocks() -> None:
    line = "+ description: " + "x" * 80 + "\n"
    markdown = "```diff\n" + line * 2_000 + "```\n" + ("<details>\n\n" + line + "</details>\n") * 9
    body = comment_body(markdown, path="specs")
    assert len(body) <= COMMENT_LIMIT
    assert body.count("```") % 2 == 0
    text, cut = truncate_summary(markdown * 8)
    assert cut and text.count("```") % 2 == 0
    assert text.count("<details>") == text.count("</details>")


def test_text_over_50_steps_folds_all_but_destructive_ones() -> None:
    plan = Plan(server=SERVER, changes=(*creates(300), *destructive()))
    text = render_text(plan)
    assert len(text.splitlines()) < 40, text
    assert "-/+ replace Stream EVENTS" in text and "    # storage cannot be changed" in text
    assert "~ update Stream AUDIT" in text and "! loses: holds 9 messages" in text
    assert "- delete Stream ZZZ_GONE" in text
    assert "+ 150 to create: Stream" in text
    assert "    ORDERS0000, ORDERS0001," in text and "… and 140 more" in text
    assert "--full shows each" in text
    full = render_text(plan, full=True)
    assert full.count("+ create ") == 300
    assert "Plan: 300 to create, 1 to update, 1 to replace, 1 to delete" in text
    assert render_plan(plan, "text", full=True) == full
