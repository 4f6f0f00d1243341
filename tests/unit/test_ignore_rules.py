"""Drift ignore rules: the syntax, how they match, and what they may hide (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.errors import SpecError
from reconciler.identity import ResourceRef
from reconciler.model.diff import FieldChange
from reconciler.model.state import ServerInfo
from reconciler.planning.drift import from_plan
from reconciler.planning.hidden import hide_notes
from reconciler.planning.steps import Foreign, Orphan, Plan, Unchanged, Unmanaged, Update
from reconciler.specs.ignore import IgnoreRules, read_ignore_file


def rules(tmp_path: Path, text: str) -> IgnoreRules:
    path = tmp_path / ".reconcileignore"
    path.write_text(text, encoding="utf-8")
    return read_ignore_file(path)


def plan_of(*entries: object) -> Plan:
    server = ServerInfo(version="2.12.1", api_level=2)
    return Plan(
        server=server,
        changes=tuple(e for e in entries if isinstance(e, Update)),
        unchanged=tuple(e for e in entries if isinstance(e, Unchanged)),
        unmanaged=tuple(e for e in entries if isinstance(e, Unmanaged)),
        orphans=tuple(e for e in entries if isinstance(e, Orphan)),
        foreign=tuple(e for e in entries if isinstance(e, Foreign)),
    )


def test_comments_blank_lines_and_globs(tmp_path: Path) -> None:
    found = rules(tmp_path, "# app-made\n\n  Consumer ORDERS/ephemeral-*\nKeyValue cache-?\n")
    assert [r.where.line for r in found.rules] == [3, 4]
    assert found.hiding("Consumer", "ephemeral-1", "ORDERS") is not None
    assert found.hiding("Consumer", "ephemeral-1", "OTHER") is None
    assert found.hiding("KeyValue", "cache-a", None) is not None
    assert found.hiding("KeyValue", "cache-ab", None) is None
    assert found.hiding("Stream", "cache-a", None) is None  # another kind


def test_the_last_matching_rule_wins_and_negation_shows_again(tmp_path: Path) -> None:
    found = rules(tmp_path, "* TMP_*\n!Stream TMP_KEEP\n")
    assert found.hiding("Stream", "TMP_1", None) is not None
    assert found.hiding("ObjectStore", "TMP_1", None) is not None
    assert found.hiding("Stream", "TMP_KEEP", None) is None
    assert found.hiding("Consumer", "TMP_1", "S") is None  # `*` without `/`: no consumer


def test_every_bad_line_is_reported_with_its_line(tmp_path: Path) -> None:
    text = (
        "Streams X\nConsumer ephemeral-*\nStream A/B\nStream\nStream X *\nStream X metadata.a b\n"
    )
    with pytest.raises(SpecError) as raised:
        rules(tmp_path, text)
    lines = [str(p) for p in raised.value.problems]
    assert [line.split(": ", 1)[0].rsplit(":", 1)[1] for line in lines] == [
        "1",
        "2",
        "3",
        "4",
        "5",
        "6",
    ]
    assert "did you mean 'Stream'?" in lines[0]
    assert "STREAM/NAME" in lines[1]


def test_only_unmanaged_notes_are_hidden_with_their_consumers(tmp_path: Path) -> None:
    """A name glob matching every kind hides nothing declared, orphaned or foreign."""
    found = rules(tmp_path, "Stream *\nConsumer */*\n!Consumer TMP/keep\n")
    plan = plan_of(
        Unchanged(ref=ResourceRef("Stream", "ORDERS")),
        Update(
            ref=ResourceRef("Stream", "PAY"),
            config={},
            live={},
            fields=(FieldChange("max_age", 1, 2),),
        ),
        Orphan(ref=ResourceRef("Stream", "OLD")),
        Foreign(ref=ResourceRef("Stream", "THEIRS"), owner="billing"),
        Unmanaged(ref=ResourceRef("Stream", "TMP")),
        Unmanaged(ref=ResourceRef("Consumer", "c1", "TMP")),
        Unmanaged(ref=ResourceRef("Consumer", "keep", "TMP")),
    )
    hidden = hide_notes(plan, found)
    assert [n.name for n in hidden.unmanaged] == ["keep"]
    assert hidden.changes == plan.changes
    assert (hidden.orphans, hidden.foreign, hidden.unchanged) == (
        plan.orphans,
        plan.foreign,
        plan.unchanged,
    )
    assert [(h.rule, h.count) for h in hidden.hidden] == [("Stream *", 1), ("Consumer */*", 1)]
    report = from_plan(hidden)
    assert {r.name: r.status for r in report.resources} == {
        "ORDERS": "in_sync",
        "PAY": "drifted",
        "OLD": "orphaned",
        "THEIRS": "foreign",
        "keep": "unmanaged",
    }


def test_a_consumer_of_a_hidden_stream_goes_with_it(tmp_path: Path) -> None:
    found = rules(tmp_path, "Stream TMP_*\n")
    plan = plan_of(
        Unmanaged(ref=ResourceRef("Stream", "TMP_1")),
        Unmanaged(ref=ResourceRef("Consumer", "c", "TMP_1")),
        Unmanaged(ref=ResourceRef("Consumer", "c", "OTHER")),
    )
    hidden = hide_notes(plan, found)
    assert [n.ref.path for n in hidden.unmanaged] == ["OTHER/c"]
    assert hidden.hidden[0].count == 2


def test_field_rules_hide_fields_of_drift_only(tmp_path: Path) -> None:
    found = rules(tmp_path, "Stream ORD* metadata.app_*\n")
    changes = (FieldChange("metadata.app_v", "1", None), FieldChange("max_age", 1, 2))
    plan = plan_of(
        Update(ref=ResourceRef("Stream", "ORDERS"), config={}, live={}, fields=changes[:1]),
        Update(ref=ResourceRef("Stream", "ORDERS2"), config={}, live={}, fields=changes),
    )
    report = from_plan(hide_notes(plan, found))
    status = {r.name: (r.status, [f.path for f in r.fields]) for r in report.resources}
    assert status == {"ORDERS": ("in_sync", []), "ORDERS2": ("drifted", ["max_age"])}
    assert [(h.count, h.fields) for h in report.hidden] == [(2, True)]
