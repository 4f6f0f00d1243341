"""A protected stream whose spec was removed: the plan says, in text, Markdown and JSON,
that it is protected and that --prune will not delete it, instead of listing it with
what --prune deletes (issue 39). Messages counted before and after the apply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer
from test_lifecycle import _messages, protected

pytestmark = pytest.mark.integration

__all__ = ["protected"]  # the fixture: ORDERS (protected, 20 messages) and OTHER applied

DELETED_WITH_PRUNE = "deleted with --prune"


def plan(server: NatsServer, specs: Path, *extra: str) -> str:
    done = reconcile("plan", str(specs), "--server", server.url, *extra, cwd=specs.parent)
    assert done.returncode == 0, done.stderr
    return done.stdout


def section(text: str, heading: str, end: str = "") -> str:
    """The lines of ``text`` under the line holding ``heading``, to the next line that
    is ``end`` (a blank line: a text section; ``</details>``: a Markdown one)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if heading in line)
    block = []
    for line in lines[start + 1 :]:
        if line.strip() == end:
            break
        block.append(line)
    return "\n".join(block)


def test_the_plan_says_a_removed_protected_stream_will_not_be_deleted(
    clean_server: NatsServer, protected: Path
) -> None:
    (protected / "orders.yaml").unlink()  # ORDERS (protected) and its consumer
    (protected / "other.yaml").write_text("kind: Stream\nname: KEPT\nsubjects: [kept]\n")

    text = plan(clean_server, protected)
    markdown = plan(clean_server, protected, "--format", "markdown")
    as_json = json.loads(plan(clean_server, protected, "--format", "json"))

    prunable = section(text, DELETED_WITH_PRUNE)
    assert "Stream OTHER" in prunable and "Stream ORDERS" not in prunable
    assert "Stream ORDERS" in text and "prevent_destroy" in text
    prunable_md = section(markdown, "deleted with <code>--prune</code>", "</details>")
    assert "Stream OTHER" in prunable_md and "Stream ORDERS" not in prunable_md
    said = next(line for line in markdown.splitlines() if "Stream ORDERS" in line)
    assert "prevent\\_destroy" in said or "prevent_destroy" in said
    orphans = {(o["kind"], o["name"]): o for o in as_json["orphans"]}
    assert "prevent_destroy" in orphans[("Stream", "ORDERS")]["prevented"]
    assert orphans[("Stream", "OTHER")]["prevented"] is None

    done = reconcile(
        "apply",
        str(protected),
        "--server",
        clean_server.url,
        "--prune",
        "--allow-replace",
        "--allow-data-loss",
        "--yes",
        cwd=protected.parent,
    )

    assert done.returncode == 1  # as the plan said: refused whatever the flags
    assert _messages(clean_server.url) == 20
    assert _messages(clean_server.url, "OTHER") == 0
