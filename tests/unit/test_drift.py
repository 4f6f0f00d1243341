"""Drift reports: a plan read the other way round, and its four renderings."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reconciler.identity import ResourceRef
from reconciler.locations import Location
from reconciler.model.diff import FieldChange
from reconciler.model.state import ServerInfo
from reconciler.model.values import redact
from reconciler.planning.drift import DriftReport, ResourceDrift, from_plan
from reconciler.planning.steps import Create, Orphan, Plan, Replace, Unchanged, Unmanaged, Update
from reconciler.render.drift_html import render_drift_html
from reconciler.render.drift_markdown import render_drift_markdown
from reconciler.render.drift_text import render_drift_text

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "drift.schema.json").read_text()
)
DAY = 86_400 * 10**9
HOUR = 3_600 * 10**9


def here(line: int) -> Location:
    return Location("specs/orders.yaml", line)


@pytest.fixture
def plan() -> Plan:
    return Plan(
        server=ServerInfo(version="2.12.1", api_level=2),
        changes=(
            Update(
                ref=ResourceRef("Stream", "ORDERS"),
                fields=(FieldChange("max_age", before=HOUR, after=DAY),),
                source=here(1),
                config={},
                live={},
            ),
            Replace(
                ref=ResourceRef("Stream", "AUDIT"),
                fields=(FieldChange("storage", before="memory", after="file"),),
                reasons=("storage cannot be changed",),
                source=here(12),
                config={},
                live={},
            ),
            Create(ref=ResourceRef("Consumer", "ship", "ORDERS"), source=here(30), config={}),
        ),
        unchanged=(Unchanged(ref=ResourceRef("KeyValue", "config"), source=here(40)),),
        unmanaged=(Unmanaged(ref=ResourceRef("Stream", "SCRATCH")),),
        orphans=(Orphan(ref=ResourceRef("Consumer", "old", "ORDERS")),),
    )


def statuses(report: DriftReport) -> dict[str, str]:
    return {r.label: r.status for r in report.resources}


def test_each_plan_entry_becomes_one_drift_status(plan: Plan) -> None:
    assert statuses(from_plan(plan)) == {
        "ORDERS": "drifted",
        "AUDIT": "drifted",
        "ORDERS/ship": "missing",
        "config": "in_sync",
        "SCRATCH": "unmanaged",
        "ORDERS/old": "orphaned",
    }


def test_declared_is_the_plans_after_and_live_its_before(plan: Plan) -> None:
    orders = next(r for r in from_plan(plan).resources if r.name == "ORDERS")
    assert orders.fields == (FieldChange("max_age", HOUR, DAY),)
    assert orders.source == "specs/orders.yaml:1"


def test_replace_reasons_say_why_drift_cannot_be_undone_in_place(plan: Plan) -> None:
    audit = next(r for r in from_plan(plan).resources if r.name == "AUDIT")
    assert audit.reasons == ("storage cannot be changed",)


def test_summary_counts_statuses_kinds_fields_and_coverage(plan: Plan) -> None:
    summary = from_plan(plan).to_json()["summary"]
    assert summary["status"] == "drift"
    assert (summary["in_sync"], summary["drifted"], summary["missing"]) == (1, 2, 1)
    assert (summary["unmanaged"], summary["orphaned"], summary["drift"]) == (1, 1, 5)
    assert (summary["declared"], summary["live"]) == (4, 5)
    assert summary["coverage"] == 0.6  # 3 declared and live / 5 live
    assert summary["by_kind"]["Consumer"] == {
        "in_sync": 0,
        "drifted": 0,
        "missing": 1,
        "unmanaged": 0,
        "orphaned": 1,
        "foreign": 0,
    }
    assert summary["foreign"] == 0  # other owners' resources: counted, never drift
    assert summary["by_field"] == {"max_age": 1, "storage": 1}


def test_report_json_follows_its_schema(plan: Plan) -> None:
    jsonschema.validate(from_plan(plan).to_json(), SCHEMA)
    jsonschema.validate(DriftReport(resources=()).to_json(), SCHEMA)


def test_a_server_matching_its_specs_has_no_drift() -> None:
    report = DriftReport(resources=(ResourceDrift("Stream", "ORDERS", "in_sync"),))
    assert not report.has_drift
    assert report.summary.coverage == 1.0
    assert render_drift_text(report).startswith("No drift: 1 resource(s) in sync")


def test_coverage_is_undefined_when_the_server_holds_nothing() -> None:
    report = DriftReport(resources=(ResourceDrift("Stream", "ORDERS", "missing"),))
    assert report.summary.coverage is None
    assert report.has_drift


def test_resources_are_sorted_streams_first_then_consumers(plan: Plan) -> None:
    kinds = [r.kind for r in from_plan(plan).resources]
    assert kinds == ["Stream", "Stream", "Stream", "KeyValue", "Consumer", "Consumer"]


def test_secret_looking_values_are_redacted_everywhere() -> None:
    secret = "s3cr3t-value"
    report = DriftReport(
        resources=(
            ResourceDrift(
                "Stream",
                "ORDERS",
                "drifted",
                fields=(
                    FieldChange("metadata.api_token", None, secret),
                    FieldChange("metadata", {}, {"db_password": secret}),
                ),
            ),
        )
    )
    outputs = [
        json.dumps(report.to_json()),
        render_drift_text(report),
        render_drift_markdown(report),
        render_drift_html(report),
    ]
    assert all(secret not in out for out in outputs)
    assert redact({"a": {"nkey_seed": "x"}, "b": [1]}) == {
        "a": {"nkey_seed": "<redacted>"},
        "b": [1],
    }


def test_text_report_shows_fields_in_human_units_and_sources(plan: Plan) -> None:
    text = render_drift_text(from_plan(plan))
    assert text.splitlines()[0] == (
        "Drift: 5 of 6 resource(s) differ; coverage 60% (3 of 5 live resources declared by a spec)."
    )
    assert "~ Stream ORDERS: drifted  (specs/orders.yaml:1)" in text
    assert "    max_age: declared 1d, live 1h" in text
    assert "+ Consumer ORDERS/ship: missing" in text
    assert "cannot be updated in place: storage cannot be changed" in text
    assert "config" not in text  # in-sync resources are only counted


def test_markdown_report_is_a_table_with_escaped_cells() -> None:
    report = DriftReport(
        resources=(
            ResourceDrift(
                "Stream",
                "ORDERS",
                "drifted",
                fields=(FieldChange("description", "<b>x</b>", "a|b"),),
            ),
        )
    )
    markdown = render_drift_markdown(report)
    row = next(line for line in markdown.splitlines() if line.startswith("| ⚠️"))
    assert '`"a\\|b"`' in row
    assert row.count(" | ") == 6  # seven cells: the pipe in the value did not split one


class Figures(HTMLParser):
    """Collects ``#figure-*`` data-values, chart bars and resource rows of the page."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, str] = {}
        self.bars: list[dict[str, str | None]] = []
        self.rows: list[dict[str, str | None]] = []
        self.urls: list[str] = []
        self.data = ""
        self._in_data = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        ident = found.get("id") or ""
        if ident.startswith("figure-"):
            self.figures[ident.removeprefix("figure-")] = found.get("data-value") or ""
        if tag == "rect":
            self.bars.append(found)
        if tag == "tr" and found.get("class") == "resource":
            self.rows.append(found)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]
        self._in_data = ident == "drift-data"

    def handle_data(self, data: str) -> None:
        if self._in_data:
            self.data += data

    def handle_endtag(self, tag: str) -> None:
        self._in_data = False


def parse(page: str) -> Figures:
    parser = Figures()
    parser.feed(page)
    return parser


def test_html_figures_equal_the_json_summary(plan: Plan) -> None:
    report = from_plan(plan)
    summary: dict[str, Any] = report.to_json()["summary"]
    page = parse(render_drift_html(report))
    for name in ("in_sync", "drifted", "missing", "unmanaged", "orphaned", "drift", "live"):
        assert page.figures[name] == str(summary[name])
    assert float(page.figures["coverage"]) == summary["coverage"]
    assert json.loads(page.data) == report.to_json()


def test_html_charts_show_drift_by_kind_and_by_field(plan: Plan) -> None:
    page = parse(render_drift_html(from_plan(plan)))
    by_kind = {
        (b["data-kind"], b["data-status"]): int(b["data-value"] or 0)
        for b in page.bars
        if b.get("data-kind")
    }
    assert by_kind == {
        ("Stream", "drifted"): 2,
        ("Stream", "unmanaged"): 1,
        ("KeyValue", "in_sync"): 1,
        ("Consumer", "missing"): 1,
        ("Consumer", "orphaned"): 1,
    }
    by_field = {b["data-field"]: b["data-value"] for b in page.bars if b.get("data-field")}
    assert by_field == {"max_age": "1", "storage": "1"}
    assert len(page.rows) == 6


def test_html_page_needs_no_network_and_cannot_be_broken_out_of(plan: Plan) -> None:
    hostile = "</script><script>alert(1)</script>"
    report = DriftReport(
        resources=(
            ResourceDrift(
                "Stream",
                "ORDERS",
                "drifted",
                fields=(FieldChange("description", "<img src=x>", hostile),),
            ),
        )
    )
    page = render_drift_html(report)
    assert "default-src 'none'" in page
    assert page.count("<script") == 2  # the data block and the filter script
    assert "<img" not in page
    assert parse(page).urls == []
    assert json.loads(parse(page).data) == report.to_json()
