"""The fleet page's figures from a summary (pure: no Spark): other owners' resources and
what coverage measures."""

from __future__ import annotations

import re
from typing import Any

from reconciler.fleet.report import render_html


def summary(**totals: int) -> dict[str, Any]:
    counts = {"in_sync": 0, "drifted": 0, "missing": 0, "unmanaged": 0, "orphaned": 0}
    counts |= {"foreign": 0, **totals}
    counts["drift"] = sum(counts[s] for s in ("drifted", "missing", "unmanaged", "orphaned"))
    env = {"day": "2026-01-02", "server_version": "2.12.1", "compared": True}
    return {
        "status": "drift" if counts["drift"] else "in_sync",
        "inputs": {"days": ["2026-01-02"], "environments": ["eu"], "records": 9},
        "totals": {**counts, "drifted_fields": counts["drifted"]},
        "by_env": {"eu": {**env, **counts, "drifted_fields": counts["drifted"]}},
        "by_kind": {},
        "top_fields": [],
        "history": [],
        "errors": {"count": 0, "bad_records": [], "bad_records_total": 0, "envs": []},
        "warnings": [],
    }


def test_the_page_shows_other_owners_resources_and_what_coverage_measures() -> None:
    page = render_html(summary(in_sync=5, drifted=1, unmanaged=1, foreign=3))

    figure = re.search(
        r'foreign \(other owners; never touched\)<b id="total-foreign" data-value="(\d+)"', page
    )
    assert figure is not None and figure[1] == "3"
    assert 'data-env="eu" data-status="foreign">3</td>' in page
    assert "<th>foreign</th>" in page
    # 6 declared and live of 10 live (foreign and unmanaged included, missing not)
    assert 'coverage (live resources declared by a spec)<b id="coverage" data-value="0.6">60%' in (
        page
    )


def test_coverage_is_not_a_figure_when_the_servers_hold_nothing() -> None:
    page = render_html(summary(missing=2))
    assert '<b id="coverage" data-value="">n/a</b>' in page
