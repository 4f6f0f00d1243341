"""The fleet drift job on Spark (local[2], one shared session) against real snapshots."""

from __future__ import annotations

import json
import re
import shutil
from datetime import date, timedelta
from html import escape
from pathlib import Path
from typing import Any

import pytest
from fleet_findings import FleetCase, expected_rows, spark_rows

from reconciler.errors import ReconcileError
from reconciler.fleet.job import fleet_drift
from reconciler.fleet.records import bad_lines, read_snapshots

pytestmark = pytest.mark.integration


def test_spark_findings_equal_reconcile_drift_for_every_environment(
    spark: Any, fleet_case: FleetCase, tmp_path: Path
) -> None:
    result = fleet_drift(
        specs=fleet_case.specs, snapshots=fleet_case.snapshots, out=tmp_path, spark=spark
    )
    statuses = set()
    for env, report in fleet_case.reports.items():
        want = expected_rows(report)
        assert spark_rows(spark, tmp_path, env) == want, env
        assert result.summary["by_env"][env]["in_sync"] == report.summary.counts["in_sync"]
        statuses |= {row[3] for row in want}
    # the scenario covers every kind of drift the job reports
    assert statuses == {"drifted", "missing", "unmanaged", "orphaned"}
    # a consumer of an external stream inherits that stream's live consumer limits
    us = {(r.stream, r.name): r.status for r in fleet_case.reports["us"].resources}
    assert us[("RAW", "READER")] == "in_sync" and us[("RAW", "SPY")] == "unmanaged"
    assert (None, "RAW") not in us
    assert result.exit_code == 2 and result.summary["status"] == "drift"


def test_summary_and_html_page_carry_the_same_figures(
    spark: Any, fleet_case: FleetCase, tmp_path: Path
) -> None:
    fleet_drift(specs=fleet_case.specs, snapshots=fleet_case.snapshots, out=tmp_path, spark=spark)
    summary = json.loads((tmp_path / "summary.json").read_text())
    reports = fleet_case.reports.values()
    totals = summary["totals"]
    for status in ("drifted", "missing", "unmanaged", "orphaned"):
        assert totals[status] == sum(r.summary.counts[status] for r in reports)
    fields = sum(len(r.fields) for rep in reports for r in rep.with_status("drifted"))
    assert totals["drifted_fields"] == fields
    assert {f["field"] for f in summary["top_fields"]} == {
        f.path for rep in reports for r in rep.with_status("drifted") for f in r.fields
    }
    assert set(summary["by_kind"]) <= {"Stream", "KeyValue", "ObjectStore", "Consumer"}
    html = (tmp_path / "report.html").read_text()
    shown = {m[1]: int(m[2]) for m in re.finditer(r'id="total-(\w+)" data-value="(\d+)"', html)}
    assert shown == {"environments": 2, **{k: totals[k] for k in shown if k != "environments"}}
    assert "<script" not in html and "http" not in html.split("</style>")[1]


def shifted(lines: list[str], stamp: str, *, drop: tuple[str, ...] = ()) -> str:
    out = []
    for line in lines:
        record = json.loads(line)
        if record["stream"] in drop:
            continue
        record["captured_at"] = stamp
        out.append(json.dumps(record))
    return "\n".join(out) + "\n"


def test_several_days_make_a_history_and_the_latest_capture_of_a_day_wins(
    spark: Any, fleet_case: FleetCase, tmp_path: Path
) -> None:
    lines = (fleet_case.snapshots / "eu.jsonl").read_text().splitlines()
    snaps = tmp_path / "snaps"
    (snaps / "2026-01").mkdir(parents=True)
    (snaps / "2026-01" / "eu-day1.jsonl").write_text(
        shifted(lines, "2026-01-01T06:00:00Z", drop=("LEGACY", "OLD"))
    )
    stale = shifted(lines, "2026-01-02T01:00:00Z").replace("changed by hand", "stale")
    (snaps / "eu-day2-early.jsonl").write_text(stale)
    (snaps / "eu-day2.jsonl").write_text(shifted(lines, "2026-01-02T18:00:00Z"))
    out = tmp_path / "out"
    only_eu = tmp_path / "specs"
    shutil.copytree(fleet_case.specs / "eu", only_eu / "eu")
    result = fleet_drift(specs=only_eu, snapshots=snaps, out=out, spark=spark)
    history = {h["day"]: h for h in result.summary["history"]}
    report = fleet_case.reports["eu"]
    assert set(history) == {"2026-01-01", "2026-01-02"}
    assert history["2026-01-02"]["drift"] == report.summary.drift
    # day 1 had neither the unmanaged LEGACY nor the orphaned OLD stream
    assert history["2026-01-01"]["drift"] == report.summary.drift - 2
    assert history["2026-01-01"]["orphaned"] == 0
    assert spark_rows(spark, out, "eu") == expected_rows(report)  # the later capture won
    assert 'id="chart-history"' in (out / "report.html").read_text()
    days = spark.read.parquet(str(out / "history")).orderBy("day").collect()
    assert [(r["day"].isoformat(), r["drift"]) for r in days] == [
        ("2026-01-01", report.summary.drift - 2),
        ("2026-01-02", report.summary.drift),
    ]


def test_bad_lines_are_reported_with_file_and_line_and_the_rest_is_compared(
    spark: Any, fleet_case: FleetCase, tmp_path: Path
) -> None:
    snaps = tmp_path / "snaps"
    shutil.copytree(fleet_case.snapshots, snaps)
    good = json.loads((snaps / "eu.jsonl").read_text().splitlines()[0])
    extra = {
        **good,
        "stream": "EXTRA",
        "name": "EXTRA",
        "config": {"name": "EXTRA", "subjects": ["extra.>"]},
    }
    unknown = {**good, "kind": "Queue"}
    broken_env = {**good, "env": "broken"}
    (snaps / "more.jsonl").write_text(
        "\n".join(
            ["", "{broken json", json.dumps(unknown), json.dumps(extra), json.dumps(broken_env)]
        )
        + "\n"
    )
    specs = tmp_path / "specs"
    shutil.copytree(fleet_case.specs, specs)
    (specs / "broken").mkdir()
    (specs / "broken" / "bad.yaml").write_text("kind: Stream\nname: X\nmax_age: 10 parsecs\n")
    out = tmp_path / "out"
    result = fleet_drift(specs=specs, snapshots=snaps, out=out, spark=spark)
    more = str((snaps / "more.jsonl").resolve())
    assert [(str(b.location), b.message[:20]) for b in result.bad_lines] == [
        (f"{more}:2", "not valid JSON: Expe"),
        (f"{more}:3", "unknown kind 'Queue'"),
    ]
    errors = result.summary["errors"]
    assert errors["bad_records_total"] == 2 and errors["count"] == 3
    [env_error] = errors["envs"]
    assert env_error["env"] == "broken"
    assert env_error["problems"][0].startswith(f"{specs / 'broken' / 'bad.yaml'}:3:")
    assert "broken" not in result.summary["by_env"]
    rows = spark_rows(spark, out, "eu")
    assert ("Stream", None, "EXTRA", "unmanaged", None, None, None) in rows
    assert rows - expected_rows(fleet_case.reports["eu"]) == {
        ("Stream", None, "EXTRA", "unmanaged", None, None, None)
    }
    assert result.exit_code == 1 and not result.summary["complete"]


def test_line_numbers_hold_across_partitions(spark: Any, tmp_path: Path) -> None:
    record = {
        "env": "e",
        "captured_at": "2026-01-01T00:00:00Z",
        "kind": "Stream",
        "name": "S",
        "config": {"name": "S"},
    }
    lines = [json.dumps({**record, "name": f"S{i}"}) for i in range(400)]
    for bad in (7, 150, 399):
        lines[bad - 1] = "oops"
    path = tmp_path / "many.jsonl"
    path.write_text("\n".join(lines) + "\n")
    frame, index = read_snapshots(spark, [path], min_partitions=4, whole_file_limit=0)
    assert frame.rdd.getNumPartitions() >= 2
    assert frame.where("error IS NULL").count() == 397  # runs the job: line counts arrive
    found, total = bad_lines(frame, index)
    assert total == 3
    assert [b.location.line for b in found] == [7, 150, 399]


def test_an_empty_snapshot_folder_is_an_error(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "snaps").mkdir()
    (tmp_path / "specs" / "dev").mkdir(parents=True)
    with pytest.raises(ReconcileError, match="no snapshot files"):
        fleet_drift(
            specs=tmp_path / "specs", snapshots=tmp_path / "snaps", out=tmp_path / "o", spark=spark
        )
    (tmp_path / "snaps" / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ReconcileError, match="no snapshot records"):
        fleet_drift(
            specs=tmp_path / "specs", snapshots=tmp_path / "snaps", out=tmp_path / "o", spark=spark
        )


def test_the_page_drills_down_from_environment_to_resource_to_field(
    spark: Any, fleet_case: FleetCase, tmp_path: Path
) -> None:
    """Every resource not in sync, in every environment, is on the page with its status,
    and every drifted field with its declared and live value as the CLI shows them."""
    from html.parser import HTMLParser

    from reconciler.render.drift_text import render_drift_text

    fleet_drift(specs=fleet_case.specs, snapshots=fleet_case.snapshots, out=tmp_path, spark=spark)
    summary = json.loads((tmp_path / "summary.json").read_text())
    html = (tmp_path / "report.html").read_text()

    class Page(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.title = ""
            self.resources: set[tuple[str, str, str]] = set()
            self._in_title = False

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found = dict(attrs)
            self._in_title = tag == "title" and not self.title
            if tag == "details" and found.get("class") == "resource":
                self.resources.add(
                    (str(found["data-env"]), str(found["data-status"]), str(found["data-name"]))
                )

        def handle_endtag(self, tag: str) -> None:
            self._in_title = False

        def handle_data(self, data: str) -> None:
            if self._in_title:
                self.title += data

    page = Page()
    page.feed(html)
    assert page.title == "JetStream fleet drift report"
    assert summary["generated_at"].endswith("Z")
    want = {
        (env, r.status, r.label)
        for env, report in fleet_case.reports.items()
        for r in report.resources
        if r.status in ("drifted", "missing", "unmanaged", "orphaned")
    }
    assert page.resources == want
    for env, report in fleet_case.reports.items():
        text = render_drift_text(report)
        listed = summary["drill_down"][env]
        assert listed["total"] == len({w for w in want if w[0] == env})
        assert [r["status"] for r in listed["resources"]][:1] == ["drifted"]  # urgent first
        for resource in report.with_status("drifted"):
            for change in resource.fields:
                declared, live = resource.shown(change)
                cells = f"<code>{escape(declared)}</code></td><td><code>{escape(live)}</code>"
                assert cells in html
                assert declared in text  # the same units as `reconcile drift`


def test_the_drill_down_is_bounded_per_environment(
    spark: Any, fleet_case: FleetCase, tmp_path: Path
) -> None:
    from reconciler.fleet.job import fleet_drift as job
    from reconciler.fleet.summary import drill_down

    job(specs=fleet_case.specs, snapshots=fleet_case.snapshots, out=tmp_path, spark=spark)
    current = spark.read.parquet(str(tmp_path / "drift"))
    bounded = drill_down(current, limit=1)
    full = drill_down(current)
    for env, found in bounded.items():
        assert len(found["resources"]) == 1 and found["total"] == full[env]["total"] > 1
        assert found["resources"][0] == full[env]["resources"][0]


CHROMIUM = shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_fleet_page_renders_in_a_real_browser_with_its_drill_down(
    spark: Any, fleet_case: FleetCase, tmp_path: Path
) -> None:
    import subprocess

    fleet_drift(specs=fleet_case.specs, snapshots=fleet_case.snapshots, out=tmp_path, spark=spark)
    page = (tmp_path / "report.html").as_uri()
    flags = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run(
        [*flags, "--dump-dom", page], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    listed = sum(len(env["resources"]) for env in summary["drill_down"].values())
    assert dom.count('<details class="resource"') == listed > 0
    assert dom.count('<details class="env"') == len(summary["drill_down"])
    shot = tmp_path / "fleet.png"
    subprocess.run(
        [*flags, "--window-size=1200,2400", f"--screenshot={shot}", page],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_project_file_drives_the_fleet_like_one_folder_per_environment(
    spark: Any, fleet_case: FleetCase, tmp_path: Path
) -> None:
    """The same fleet described by reconcile.yaml (each environment's specs as its own
    resources) gives the same findings as the folder-per-environment layout."""
    (tmp_path / "shared").mkdir()
    shutil.copytree(fleet_case.specs, tmp_path / "envs")
    project = tmp_path / "reconcile.yaml"
    project.write_text(
        "specs: [shared]\nenvironments:\n"
        + "".join(
            f"  {env}: {{servers: 'nats://{env}:4222', resources: [envs/{env}]}}\n"
            for env in fleet_case.reports
        )
    )
    out = tmp_path / "out"
    result = fleet_drift(specs=project, snapshots=fleet_case.snapshots, out=out, spark=spark)
    for env, report in fleet_case.reports.items():
        assert spark_rows(spark, out, env) == expected_rows(report), env
    assert result.summary["errors"]["count"] == 0


@pytest.mark.parametrize("whole_file_limit", [0, 1 << 20], ids=["split", "whole"])
def test_the_read_counts_each_env_day_and_its_latest_server(
    spark: Any, tmp_path: Path, whole_file_limit: int
) -> None:
    """The read's own tally (no second pass over the rows) says, per environment and
    UTC day, how many good records there were and which server the latest capture
    came from; equal capture times pick the larger version whatever the order read;
    bad lines are counted apart. Checked against Spark's own aggregation."""
    from pyspark.sql import functions as F

    def line(env: str, stamp: str, version: str, name: str) -> str:
        record = {
            "env": env,
            "captured_at": stamp,
            "kind": "Stream",
            "name": name,
            "config": {"name": name},
            "server_version": version,
        }
        return json.dumps(record)

    day_one = [
        line("a", "2026-01-01T01:00:00Z", "2.10.1", "S1"),
        line("a", "2026-01-01T23:00:00+01:00", "2.11.0", "S2"),  # 22:00 UTC: latest
        line("a", "2026-01-01T05:00:00Z", "2.12.0", "S3"),
        line("b", "2026-01-01T08:00:00Z", "2.11.0", "S1"),
        line("b", "2026-01-01T08:00:00Z", "2.11.9", "S2"),  # a tie: the larger version
        line("b", "2026-01-01T08:00:00Z", "2.11.2", "S3"),
        "not json",
    ]
    day_two = [
        line("a", "2026-01-02T00:30:00+02:00", "2.12.1", "S1"),  # Jan 1, 22:30 UTC
        line("a", "2026-01-02T03:00:00Z", "2.12.2", "S9"),
        "{}",
        "",
    ]
    files = [tmp_path / "one.jsonl", tmp_path / "two.jsonl"]
    files[0].write_text("\n".join(day_one * 3) + "\n")
    files[1].write_text("\n".join(reversed(day_two * 2)) + "\n")
    frame, index = read_snapshots(spark, files, min_partitions=3, whole_file_limit=whole_file_limit)
    frame.write.format("noop").mode("overwrite").save()
    tallied = [
        (t.env, t.day.isoformat(), t.records, t.server_version, t.captured_at.isoformat())
        for t in index.env_days()
    ]
    assert tallied == [
        ("a", "2026-01-01", 11, "2.12.1", "2026-01-01T22:30:00+00:00"),
        ("a", "2026-01-02", 2, "2.12.2", "2026-01-02T03:00:00+00:00"),
        ("b", "2026-01-01", 9, "2.11.9", "2026-01-01T08:00:00+00:00"),
    ]
    assert index.bad_total() == 3 + 2 == frame.where("error IS NOT NULL").count()
    records = frame.where("error IS NULL").select("env", F.explode("days").alias("day"))
    counted = {
        (r["env"], (date(1970, 1, 1) + timedelta(days=r["day"])).isoformat()): r["n"]
        for r in records.groupBy("env", "day").agg(F.count("*").alias("n")).collect()
    }
    assert counted == {(env, day): n for env, day, n, _, _ in tallied}
