"""Findings as comparable rows: from ``reconcile drift``'s report and from the Parquet output."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.planning.drift import DriftReport


@dataclass
class FleetCase:
    """A fleet on real servers: spec folders, snapshot files, and the expected reports."""

    specs: Path
    snapshots: Path
    reports: dict[str, DriftReport]
    servers: dict[str, Any]  # env -> servers.NatsServer


Row = tuple[Any, ...]


def canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def expected_rows(report: DriftReport) -> set[Row]:
    rows: set[Row] = set()
    for r in report.resources:
        if r.status == "drifted":
            for f in r.fields:
                j = f.to_drift_json()
                rows.add(
                    (
                        r.kind,
                        r.stream,
                        r.name,
                        "drifted",
                        f.path,
                        canon(j["declared"]),
                        canon(j["live"]),
                    )
                )
        elif r.status != "in_sync":
            rows.add((r.kind, r.stream, r.name, r.status, None, None, None))
    return rows


def spark_rows(spark: Any, out: Path, env: str) -> set[Row]:
    rows: set[Row] = set()
    for r in spark.read.parquet(str(out / "drift")).where(f"env = '{env}'").collect():
        if r["status"] == "drifted":
            values = (canon(json.loads(r["desired"])), canon(json.loads(r["live"])))
        else:
            values = (None, None)
        rows.add((r["kind"], r["stream"], r["name"], r["status"], r["field"], *values))
    return rows
