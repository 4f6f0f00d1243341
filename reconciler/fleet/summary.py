"""``summary.json``: the figures of a fleet drift run, from small Spark aggregates.

Counts are of *resources* (a stream, consumer or bucket), not of rows: a drifted
resource is one resource however many fields drifted; ``drifted_fields`` counts the
(resource, field) pairs. ``by_env``, ``by_status``, ``by_kind`` and ``top_fields``
describe each environment's latest snapshot day; ``history`` has one entry per
environment and day.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from reconciler.fleet.desired import EnvSpecs
from reconciler.fleet.records import BadLine, EnvDay
from reconciler.model.timestamps import rfc3339
from reconciler.model.values import written_as
from reconciler.planning.drift import DRIFT_STATUSES, STATUSES
from reconciler.render.palette import STATUS_ORDER

FORMAT_VERSION = 1
TOP_FIELDS = 20
MAX_PROBLEMS = 100
#: Resources per environment listed in the drill-down (the Parquet output holds them all).
DRILL_LIMIT = 200
#: Most urgent first, in the order every page shows statuses.
_URGENCY = {s: rank for rank, s in enumerate(STATUS_ORDER) if s in DRIFT_STATUSES}


def _resource() -> list[Any]:
    return [F.col("kind"), F.coalesce(F.col("stream"), F.lit("")), F.col("name")]


def _counted(findings: DataFrame, *keys: Any) -> DataFrame:
    """Resources per ``keys`` and status: the rows of resources in sync are counts (see
    ``reconciler.fleet.match.FINDING_SCHEMA``), the others one or more rows each."""
    listed = findings.where(F.col("in_sync").isNull())
    counted = findings.where(F.col("in_sync").isNotNull())
    return (
        listed.groupBy(*keys, "status")
        .agg(F.countDistinct(*_resource()).alias("n"))
        .unionByName(counted.groupBy(*keys, "status").agg(F.sum("in_sync").alias("n")))
    )


def latest_days(env_days: list[EnvDay]) -> dict[str, EnvDay]:
    """env → its latest snapshot day (compared or not): what ``drift`` and ``by_env`` show."""
    latest: dict[str, EnvDay] = {}
    for item in env_days:
        if item.env not in latest or item.day > latest[item.env].day:
            latest[item.env] = item
    return latest


#: (env, day, kind) → status → resources
KindCounts = Mapping[tuple[str, date, str], Mapping[str, int]]


def kind_day_counts(findings: DataFrame) -> KindCounts:
    """(env, day, kind) → status → resources: one pass, summed below by day or by kind
    (a resource has one kind, so the sums are counts of resources too)."""
    counts: dict[tuple[str, date, str], dict[str, int]] = defaultdict(dict)
    for row in _counted(findings, "env", "day", "kind").collect():
        counts[(row["env"], row["day"], row["kind"])][row["status"]] = int(row["n"])
    return counts


def status_counts(counts: KindCounts) -> dict[tuple[str, date], Counter[str]]:
    """(env, day) → status → resources."""
    by_day: dict[tuple[str, date], Counter[str]] = defaultdict(Counter)
    for (env, day, _kind), statuses in counts.items():
        by_day[(env, day)].update(statuses)
    return dict(by_day)


def _with_totals(counts: Mapping[str, int]) -> dict[str, int]:
    full: dict[str, int] = {status: int(counts.get(status, 0)) for status in STATUSES}
    full["drift"] = sum(full[s] for s in DRIFT_STATUSES)
    return full


def kind_counts(counts: KindCounts, latest: Mapping[str, EnvDay]) -> dict[str, dict[str, int]]:
    """kind → status → resources on each environment's latest day."""
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    for (env, day, kind), statuses in counts.items():
        if env in latest and latest[env].day == day:
            by_kind[kind].update(statuses)
    order = {"Stream": 0, "KeyValue": 1, "ObjectStore": 2, "Consumer": 3}
    return {k: _with_totals(by_kind[k]) for k in sorted(by_kind, key=lambda k: order.get(k, 9))}


def drifted_by_field(current: DataFrame) -> dict[tuple[str, str], int]:
    """(env, field) → drifted resources with that field, on the latest days: one pass for
    ``top_fields`` and ``drifted_fields`` (a drifted resource has one row per field)."""
    rows = current.where(F.col("status") == "drifted").groupBy("env", "field").count().collect()
    return {(r["env"], r["field"]): int(r["count"]) for r in rows}


def top_fields(by_field: Mapping[tuple[str, str], int]) -> list[dict[str, Any]]:
    resources: Counter[str] = Counter()
    envs: Counter[str] = Counter()
    for (_env, name), n in by_field.items():
        resources[name] += n
        envs[name] += 1
    ranked = sorted(resources, key=lambda name: (-resources[name], name or ""))[:TOP_FIELDS]
    return [{"field": name, "resources": resources[name], "envs": envs[name]} for name in ranked]


def drifted_fields(by_field: Mapping[tuple[str, str], int]) -> dict[str, int]:
    per_env: Counter[str] = Counter()
    for (env, _name), n in by_field.items():
        per_env[env] += n
    return dict(per_env)


def written_in(fleet: Mapping[str, EnvSpecs]) -> dict[tuple[str, str, str | None, str], Any]:
    """(env, kind, stream of a consumer, name) → how its spec wrote each field (``7d``),
    so the page shows a declared value in the spec's own unit, as ``reconcile drift`` does."""
    return {
        (env, s.kind, s.stream_name if s.kind == "Consumer" else None, s.name): written_as(
            s.kind, s.written
        )
        for env, specs in fleet.items()
        for s in specs.specs
        if s.written
    }


def drill_down(
    current: DataFrame,
    *,
    limit: int = DRILL_LIMIT,
    written: Mapping[tuple[str, str, str | None, str], Mapping[str, str]] | None = None,
) -> dict[str, dict[str, Any]]:
    """env → the resources not in sync on its latest day, each with its fields'
    declared and live values (JSON text, secrets redacted) and how the spec wrote them;
    at most ``limit`` resources per environment, the most urgent first, with the
    environment's ``total``."""
    urgency = F.create_map(*(F.lit(x) for pair in _URGENCY.items() for x in pair))
    drift = current.where(F.col("status").isin(*_URGENCY)).withColumn(
        "stream_key", F.coalesce(F.col("stream"), F.lit(""))
    )
    keys = ["env", "kind", "stream_key", "name", "status"]
    resources = drift.select(*keys).distinct()
    order = Window.partitionBy("env").orderBy(
        urgency[F.col("status")], "kind", "stream_key", "name"
    )
    ranked = resources.withColumn("rank", F.row_number().over(order)).withColumn(
        "total", F.count(F.lit(1)).over(Window.partitionBy("env"))
    )
    kept = ranked.where(F.col("rank") <= limit)
    rows = (
        drift.join(kept, keys)
        .select(
            "env", "rank", "total", "kind", "stream", "name", "status", "field", "desired", "live"
        )
        .orderBy("env", "rank", "field")
        .collect()
    )
    totals = {row["env"]: int(row["total"]) for row in rows}  # every env has its rank 1
    found: dict[str, dict[str, Any]] = {
        env: {"total": total, "resources": []} for env, total in sorted(totals.items())
    }
    last: dict[str, Any] = {}
    for row in rows:
        listed = found[row["env"]]["resources"]
        if last.get(row["env"]) != row["rank"]:
            last[row["env"]] = row["rank"]
            listed.append(
                {
                    "kind": row["kind"],
                    "stream": row["stream"],
                    "name": row["name"],
                    "status": row["status"],
                    "fields": [],
                }
            )
        key = (row["env"], row["kind"], row["stream"], row["name"])
        said = (written or {}).get(key, {}).get(row["field"] or "")
        listed[-1]["fields"].append(
            {"field": row["field"], "desired": row["desired"], "live": row["live"]}
            | ({"written": said} if said else {})
        )
    return found


def build_summary(
    findings: DataFrame,
    current: DataFrame,
    *,
    fleet: Mapping[str, EnvSpecs],
    env_days: list[EnvDay],
    bad: list[BadLine],
    bad_total: int,
    files: list[Path],
) -> dict[str, Any]:
    """The whole ``summary.json`` document."""
    by_kind = kind_day_counts(findings)
    counts = status_counts(by_kind)
    latest = latest_days(env_days)
    by_field = drifted_by_field(current)
    fields = drifted_fields(by_field)
    history = [
        {"env": e.env, "day": e.day.isoformat(), **_with_totals(counts.get((e.env, e.day), {}))}
        for e in env_days
        if not e.problems
    ]
    by_env = _by_env(latest, counts, fields)
    totals = _with_totals({s: sum(env[s] for env in by_env.values() if s in env) for s in STATUSES})
    totals["drifted_fields"] = sum(fields.values())
    errors = _errors(fleet, env_days, bad, bad_total)
    return {
        "format_version": FORMAT_VERSION,
        "generated_at": rfc3339(datetime.now(UTC)),
        "status": "drift" if totals["drift"] else "in_sync",
        "complete": errors["count"] == 0,
        "inputs": {
            "snapshot_files": len(files),
            "records": sum(e.records for e in env_days),
            "environments": sorted({*fleet, *(e.env for e in env_days)}),
            "days": sorted({e.day.isoformat() for e in env_days}),
        },
        "totals": totals,
        "by_status": {s: totals[s] for s in STATUSES},
        "by_env": by_env,
        "by_kind": kind_counts(by_kind, latest),
        "top_fields": top_fields(by_field),
        "drill_down": drill_down(current, written=written_in(fleet)),
        "history": history,
        "errors": errors,
        "warnings": _warnings(fleet, env_days),
    }


def _by_env(
    latest: Mapping[str, EnvDay],
    counts: Mapping[tuple[str, date], Mapping[str, int]],
    fields: Mapping[str, int],
) -> dict[str, dict[str, Any]]:
    by_env: dict[str, dict[str, Any]] = {}
    for env, item in sorted(latest.items()):
        entry: dict[str, Any] = {
            "day": item.day.isoformat(),
            "captured_at": rfc3339(item.captured_at),
            "server_version": item.server_version,
            "compared": not item.problems,
        }
        if not item.problems:
            entry.update(_with_totals(counts.get((env, item.day), {})))
            entry["drifted_fields"] = fields.get(env, 0)
        by_env[env] = entry
    return by_env


def _errors(
    fleet: Mapping[str, EnvSpecs], env_days: list[EnvDay], bad: list[BadLine], bad_total: int
) -> dict[str, Any]:
    envs: list[dict[str, Any]] = [
        {"env": e.env, "day": None, "problems": [str(p) for p in e.problems[:MAX_PROBLEMS]]}
        for e in fleet.values()
        if not e.valid
    ]
    envs += [
        {"env": e.env, "day": e.day.isoformat(), "problems": e.problems[:MAX_PROBLEMS]}
        for e in env_days
        if e.problems
    ]
    return {
        "count": bad_total + len(envs),
        "bad_records_total": bad_total,
        "bad_records": [b.to_json() for b in bad],
        "envs": envs,
    }


def _warnings(fleet: Mapping[str, EnvSpecs], env_days: list[EnvDay]) -> list[str]:
    seen = {e.env for e in env_days}
    warnings = [
        f"{env}: no snapshot records; not compared"
        for env, specs in sorted(fleet.items())
        if env not in seen and specs.valid
    ]
    warnings += [
        f"{env}: snapshot records but no spec folder; everything live is unmanaged"
        for env in sorted(seen - set(fleet))
    ]
    return warnings
