"""Large drift reports: unmanaged and foreign resources fold into counts per kind (pure)."""

from __future__ import annotations

from reconciler.planning.drift import DriftReport, ResourceDrift
from reconciler.render.drift_markdown import render_drift_markdown
from reconciler.render.drift_text import FOLD_OVER, render_drift_text


def foreign(count: int) -> list[ResourceDrift]:
    owners = ("billing", "search")
    return [
        ResourceDrift(kind="Stream", name=f"F{n:03}", status="foreign", owner=owners[n % 3 == 0])
        for n in range(count)
    ]


def test_many_foreign_resources_fold_with_their_owners_counted() -> None:
    report = DriftReport(resources=tuple(foreign(60)))

    text = render_drift_text(report)
    markdown = render_drift_markdown(report)

    assert "= 60 Stream(s) managed by another owner; never touched (owners: billing 40, " in text
    assert "search 20) (names: --full or --format json)" in text
    assert "F001" not in text
    assert (
        sum("(owner billing)" in line for line in render_drift_text(report, full=True).split("\n"))
        == 40
    )
    summary = markdown.split("<summary>", 1)[1].split("</summary>", 1)[0]
    assert summary.startswith("🔒 60 foreign (managed by another owner; never touched; owners")
    assert "| Stream | `F001` | `billing` |" in markdown


def test_a_short_list_is_not_folded() -> None:
    report = DriftReport(resources=tuple(foreign(FOLD_OVER)))

    text = render_drift_text(report)

    assert "= Stream F000: managed by another owner; never touched (owner search)" in text
    assert "<details>" not in render_drift_markdown(report)
