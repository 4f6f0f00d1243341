"""The fleet drift job: specs of every environment against their snapshots, on Spark.

::

    snapshots ─ read, check, collapse by config, tally env-days (Python, per unit)
        ─▶ OUT/_staging/live
    FLEET/<env>/ ─ load_specs, the plan's refusals per env and day (driver) ─┐
    live rows of every day, partitioned by (env, stream) ────────────────────┴─▶
        per-day groups planned by plan_stream (one Python pass, specs broadcast)
        ─▶ OUT/_staging/findings
        ─▶ OUT/drift (latest day per env), OUT/history, OUT/summary.json, OUT/report.html

Records never come back to the driver: only per-environment/day aggregates (counted by
the read itself, in accumulators: no second pass over the rows), the top fields and
which of the streams the specs rely on exist each day are collected.
Snapshots are grouped per environment and UTC day; the drift dataset describes each
environment's latest day, the history every day.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from reconciler.errors import ExitStatus, Problem, ReconcileError, changes_status
from reconciler.execution.run import fewer_collections
from reconciler.fleet.backups import COLUMNS as BACKUP_COLUMNS
from reconciler.fleet.backups import SeenBackup, backup_rows, backups_section, read_backups
from reconciler.fleet.canonical import server_info
from reconciler.fleet.desired import EnvSpecs, load_fleet
from reconciler.fleet.match import Days, all_findings, declared_frame
from reconciler.fleet.records import BadLine, EnvDay, bad_lines, read_snapshots, snapshot_files
from reconciler.fleet.report import write_report
from reconciler.fleet.session import check_java, spark_session
from reconciler.fleet.summary import build_summary, latest_days
from reconciler.model.state import ServerInfo

Notice = Callable[[str], None]
DRIFT_COLUMNS = ["env", "kind", "stream", "name", "status", "field", "desired", "live"]


@dataclass
class FleetResult:
    """What the job wrote and found; ``exit_code`` follows the CLI contract."""

    out_dir: Path
    summary: dict[str, Any]
    bad_lines: list[BadLine] = field(default_factory=list)

    @property
    def has_drift(self) -> bool:
        return bool(self.summary["totals"]["drift"])

    @property
    def complete(self) -> bool:
        return not self.summary["errors"]["count"]

    @property
    def exit_code(self) -> ExitStatus:
        if not self.complete:
            return ExitStatus.ERROR
        return changes_status(self.has_drift)


def fleet_drift(
    *,
    specs: Path,
    snapshots: Path,
    out: Path,
    master: str | None = None,
    spark: SparkSession | None = None,
    on_notice: Notice | None = None,
    backups: Path | None = None,
    owner: str | None = None,
) -> FleetResult:
    """Run the job; raises :class:`ReconcileError` when nothing usable was given.
    ``backups``: a folder of backup folders (:mod:`reconciler.fleet.backups`); ``owner``:
    whose resources the plans manage where a project file does not say
    (:func:`~reconciler.fleet.desired.load_fleet`)."""
    say = on_notice or (lambda _: None)
    if spark is None:
        check_java()  # before a word of progress: without Java the one line says why
    files = snapshot_files(snapshots)
    seen = read_backups(backups) if backups is not None else None
    with fewer_collections():
        fleet = {env.env: env for env in load_fleet(specs, owner=owner)}
    noun = "file" if len(files) == 1 else "files"
    say(f"fleet: specs of {len(fleet)} environment(s) read; {len(files)} snapshot {noun}")
    if spark is None:
        say(f"fleet: starting Spark ({master or 'local[*]'})")
    session = spark or spark_session(master)
    out.mkdir(parents=True, exist_ok=True)
    staging = out / "_staging"
    _clear(out)
    try:
        return _run(session, files, fleet, out, staging, say, seen)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _clear(out: Path) -> None:
    for name in ("drift", "history", "backups", "_staging"):
        shutil.rmtree(out / name, ignore_errors=True)
    for name in ("summary.json", "report.html"):
        (out / name).unlink(missing_ok=True)


def _run(
    spark: SparkSession,
    files: list[Path],
    fleet: dict[str, EnvSpecs],
    out: Path,
    staging: Path,
    say: Notice,
    seen: tuple[list[SeenBackup], list[str]] | None = None,
) -> FleetResult:
    say("fleet: reading the snapshots")
    parsed_frame, index = read_snapshots(spark, files)
    parsed_frame.write.mode("overwrite").parquet(str(staging / "live"))
    parsed = spark.read.parquet(str(staging / "live"))
    bad, bad_total = bad_lines(parsed, index)
    for line in bad[:20]:
        say(f"{line} (skipped)")
    if bad_total > 20:
        say(f"... and {bad_total - 20} more bad lines (see summary.json)")
    invalid = sorted(env for env, specs in fleet.items() if not specs.valid)
    readable = parsed.where(F.col("error").isNull())
    good = readable.where(~F.col("env").isin(invalid))
    env_days = [day for day in index.env_days() if day.env not in invalid]
    if not env_days and not bad_total and readable.isEmpty():
        raise ReconcileError(f"no snapshot records in {', '.join(map(str, files[:3]))}")
    days = _usable_days(spark, fleet, env_days, good)
    declared = {env.env: env.by_stream() for env in fleet.values() if env.valid}
    configured = int(spark.conf.get("spark.sql.shuffle.partitions") or 8)
    partitions = max(configured, 2 * spark.sparkContext.defaultParallelism)
    owners = {env.env: env.ownership for env in fleet.values()}
    say(f"fleet: planning {len(env_days)} environment-day(s) against their specs")
    findings = all_findings(
        declared_frame(spark, declared), good, days=days, partitions=partitions, owners=owners
    )
    findings.write.mode("overwrite").parquet(str(staging / "findings"))
    stored = spark.read.parquet(str(staging / "findings"))
    say(f"fleet: writing the report to {out}")
    current = _write_outputs(spark, stored, env_days, out)
    summary = build_summary(
        stored,
        current,
        fleet=fleet,
        env_days=env_days,
        bad=bad,
        bad_total=bad_total,
        files=files,
    )
    _write_history(spark, summary["history"], out)
    if seen is not None:
        _write_backups(spark, seen, fleet, good, env_days, out, summary)
    write_report(summary, out)
    return FleetResult(out, summary, bad)


def _present_streams(
    spark: SparkSession, fleet: dict[str, EnvSpecs], good: DataFrame
) -> set[tuple[str, date, str]]:
    """``(env, day, stream)`` of the live streams the specs rely on without declaring them
    (external streams, and streams whose consumers alone are declared). Few rows."""
    pairs = [(env.env, s) for env in fleet.values() if env.valid for s in env.needed_streams()]
    if not pairs:
        return set()
    wanted = spark.createDataFrame(pairs, "env string, stream_name string")
    rows = (
        good.where(F.col("consumer") == "")
        .join(F.broadcast(wanted), ["env", "stream_name"])
        .select("env", F.explode("days").alias("day"), "stream_name")
        .distinct()
        .select("env", F.date_from_unix_date("day").alias("day"), "stream_name")
        .toLocalIterator()
    )
    return {(r["env"], r["day"], r["stream_name"]) for r in rows}


def _usable_days(
    spark: SparkSession, fleet: dict[str, EnvSpecs], env_days: list[EnvDay], good: DataFrame
) -> Days:
    """env → [(day, version, level)] of the days the plan accepts; the others get problems."""
    present: dict[tuple[str, date], set[str]] = {}
    for env_name, day, stream in _present_streams(spark, fleet, good):
        present.setdefault((env_name, day), set()).add(stream)
    days: dict[str, list[tuple[date, str | None, int | None]]] = {}
    # a month of days of one environment is nearly always one answer: asked once per
    # (environment, server, streams present) rather than per day (1,000 env-days)
    judged: dict[tuple[str, ServerInfo, frozenset[str]], list[Problem]] = {}
    for item in env_days:
        env = fleet.get(item.env) or EnvSpecs(item.env, Path(item.env))
        server = server_info(item.server_version, item.api_level)
        live = frozenset(present.get((item.env, item.day), ()))
        key = (item.env, server, live)
        if key not in judged:
            judged[key] = env.problems_on(server, live.__contains__)
        problems = judged[key]
        if problems:
            item.problems = [str(p) for p in problems]
            continue
        days.setdefault(item.env, []).append((item.day, item.server_version, item.api_level))
    return days


def _write_outputs(
    spark: SparkSession, findings: DataFrame, env_days: list[EnvDay], out: Path
) -> DataFrame:
    """``OUT/drift``: the findings of each environment's latest day (no in_sync rows)."""
    last = [(env, item.day) for env, item in latest_days(env_days).items()]
    current = findings.join(
        F.broadcast(spark.createDataFrame(last, "env string, day date")), ["env", "day"]
    )
    (
        current.where(F.col("status") != "in_sync")
        .select(*DRIFT_COLUMNS)
        .orderBy("env", "kind", "stream", "name", "field")
        .write.mode("overwrite")
        .parquet(str(out / "drift"))
    )
    return current


HISTORY_COLUMNS = ("env", "day", "in_sync", "drifted", "missing", "unmanaged", "orphaned", "drift")


def _write_history(spark: SparkSession, history: list[dict[str, Any]], out: Path) -> None:
    """``OUT/history``: drift per environment and day (small: built on the driver)."""
    rows = [
        (h["env"], date.fromisoformat(h["day"]), *(int(h[c]) for c in HISTORY_COLUMNS[2:]))
        for h in history
    ]
    schema = "env string, day date, " + ", ".join(f"{c} long" for c in HISTORY_COLUMNS[2:])
    spark.createDataFrame(rows, schema).coalesce(1).write.mode("overwrite").parquet(
        str(out / "history")
    )


def _latest_streams(
    spark: SparkSession, good: DataFrame, env_days: list[EnvDay]
) -> dict[str, set[str]]:
    """env → the streams of its latest snapshot day (few rows: streams, not records)."""
    last = [(env, item.day) for env, item in latest_days(env_days).items()]
    live: dict[str, set[str]] = {}
    if not last:
        return live
    rows = (
        good.where(F.col("consumer") == "")
        .select("env", F.explode("days").alias("day"), "stream_name")
        .withColumn("day", F.date_from_unix_date("day"))
        .join(F.broadcast(spark.createDataFrame(last, "env string, day date")), ["env", "day"])
        .select("env", "stream_name")
        .distinct()
        .toLocalIterator()
    )
    for row in rows:
        live.setdefault(row["env"], set()).add(row["stream_name"])
    return live


def _write_backups(
    spark: SparkSession,
    seen: tuple[list[SeenBackup], list[str]],
    fleet: dict[str, EnvSpecs],
    good: DataFrame,
    env_days: list[EnvDay],
    out: Path,
    summary: dict[str, Any],
) -> None:
    """``OUT/backups`` and the summary's ``backups`` section; manifests that could not be
    read are input errors (the run is incomplete: exit 1)."""
    backups, problems = seen
    as_of = {
        env: item.captured_at.replace(tzinfo=item.captured_at.tzinfo or UTC)
        for env, item in latest_days(env_days).items()
    }
    declared = {env: specs.declared_streams() for env, specs in fleet.items() if specs.valid}
    live = _latest_streams(spark, good, env_days)
    rows = backup_rows(backups, declared=declared, live=live, as_of=as_of, now=datetime.now(UTC))
    frame = spark.createDataFrame([tuple(r.values()) for r in rows], BACKUP_COLUMNS)
    frame.coalesce(1).write.mode("overwrite").parquet(str(out / "backups"))
    summary["backups"] = backups_section(rows, backups, problems, as_of)
    if problems:
        summary["errors"]["backups"] = problems
        summary["errors"]["count"] += len(problems)
        summary["complete"] = False
