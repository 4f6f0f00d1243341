"""Declared ⟗ live, one stream at a time, with one shuffle; judged by the planner.

The live rows (one per record, all days) and one row per declared stream group (its
specs, pickled on the driver) are unioned and partitioned by ``(env, stream_name)``.
Still in the JVM, the rows of each resource are collapsed by config: a resource that
looks the same day after day (nearly every one) becomes one row holding its config once
and the (day, capture) pairs it was seen on, so far fewer rows and less config text
cross into Python (about an eighth on the million-record benchmark: 1,000,000 records,
roughly 130,000 distinct resource configs by the generator's rates, not counted).
One Python pass then builds, for every usable day of the environment, the planner's
:class:`StreamGroup` (the latest capture of each resource and day wins) and hands it to
``reconciler.fleet.verdict.stream_findings``: the plan's own rules. A stream whose live
configs are the same as on an earlier day is not planned again (memoised per partition
by the configs' JSON text). The specs travel with their stream group, so each worker
unpickles only the groups it plans, once (a broadcast of every environment's specs was
unpickled whole by every Python worker).
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import date
from itertools import groupby
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, LongType, StringType, StructField, StructType

from reconciler.fleet.canonical import config_from_text, server_info
from reconciler.fleet.verdict import Finding, stream_findings
from reconciler.model.state import ServerInfo
from reconciler.planning.memo import Memo
from reconciler.planning.plan import DEFAULT_OWNERSHIP, Ownership, StreamGroup
from reconciler.specs.spec import Spec

FINDING_SCHEMA = StructType(
    [
        StructField("env", StringType()),
        StructField("day", DateType()),
        StructField("kind", StringType()),
        StructField("stream", StringType()),  # null unless a consumer
        StructField("name", StringType()),
        StructField("status", StringType()),
        StructField("field", StringType()),
        StructField("desired", StringType()),
        StructField("live", StringType()),
        # How many in-sync resources the row stands for: resources in sync are counted,
        # not listed (nearly every resource of a fleet, every day), one row per
        # (env, day, kind) and partition; None on the rows of resources not in sync.
        StructField("in_sync", LongType()),
    ]
)
FINDING_COLUMNS = [f.name for f in FINDING_SCHEMA.fields]
GROUP = ("env", "stream_name")
#: env → [(day, server version, API level)] of the days that can be compared
Days = Mapping[str, list[tuple[date, str | None, int | None]]]
#: One stream group's specs: the declared stream or bucket, its declared consumers.
GroupSpecs = tuple[Spec | None, tuple[Spec, ...]]
#: env → stream name → its group's specs
Declared = Mapping[str, Mapping[str, GroupSpecs]]
#: env → whose resources its plans manage (the project's owner, or ``--owner``)
Owners = Mapping[str, Ownership]
#: How many distinct (stream, live configs, server) verdicts a partition remembers.
MEMO_SIZE = 4096
#: Finding rows per Arrow batch handed back to Spark.
BATCH_ROWS = 10_000
#: Day numbers as Spark's ``unix_date`` counts them.
EPOCH = date(1970, 1, 1)

#: Column positions of the rows the Python pass reads (the order of :func:`_collapsed`):
#: env, stream, consumer ("" for the stream), config (JSON text; None on a specs row),
#: specs (a pickled :data:`GroupSpecs`; None on a live row), and the (day, capture) pairs
#: the config was seen on (days since the epoch, microseconds since the epoch).
ENV, STREAM, CONSUMER, CONFIG, SPECS, DAYS, CAPTURES = range(7)
#: The live side of one stream group: consumer ("" for the stream) → day → config.
Seen = dict[str, dict[int, str]]


def declared_frame(spark: SparkSession, declared: Declared) -> DataFrame:
    """One row per declared stream group: ``env, stream_name, specs`` (pickled here, on
    the driver, and read only by this job's own workers)."""
    rows = [
        (env, stream, pickle.dumps(specs, protocol=pickle.HIGHEST_PROTOCOL))
        for env, streams in declared.items()
        for stream, specs in streams.items()
    ]
    return spark.createDataFrame(rows, "env string, stream_name string, specs binary")


def _collapsed(declared: DataFrame, live: DataFrame, partitions: int) -> DataFrame:
    """Specs rows and live rows partitioned by stream group, each resource's rows of one
    config (one per unit of the read that saw it) merged into one (the aggregation needs
    no second shuffle: its keys include the partitioning's), sorted so that each group
    arrives whole."""
    pair = "struct<days: int, captures: bigint>"
    specs = declared.select(
        "env", "stream_name", F.lit("").alias("consumer"),
        F.lit(None).cast("string").alias("config"), "specs",
        F.lit(None).cast(f"array<{pair}>").alias("seen"),
    )  # fmt: skip
    records = live.select(
        "env", "stream_name", "consumer", "config",
        F.lit(None).cast("binary").alias("specs"), F.arrays_zip("days", "captures").alias("seen"),
    )  # fmt: skip

    def pairs(name: str, alias: str) -> Any:
        return F.transform("seen", lambda pair: pair.getField(name)).alias(alias)

    return (
        specs.unionByName(records)
        .repartition(partitions, *GROUP)
        .groupBy(*GROUP, "consumer", "config", "specs")
        .agg(F.flatten(F.collect_list("seen")).alias("seen"))
        .select(*GROUP, "consumer", "config", "specs", pairs("days", "day"),
                pairs("captures", "captured"))
        .sortWithinPartitions(*GROUP)
    )  # fmt: skip


def all_findings(
    declared: DataFrame,
    live: DataFrame,
    *,
    days: Days,
    partitions: int,
    owners: Owners | None = None,
) -> DataFrame:
    """Every resource's status, every env and usable day: FINDING_SCHEMA (resources in
    sync as counts).

    ``declared`` has one row per declared stream group (:func:`declared_frame`).
    """
    rows = _collapsed(declared, live, partitions)
    spark = rows.sparkSession
    shared = spark.sparkContext.broadcast((dict(days), dict(owners or {})))
    return rows.mapInArrow(lambda batches: arrow_findings(batches, *shared.value), FINDING_SCHEMA)


def arrow_findings(
    batches: Iterable[Any], days: Days, owners: Owners | None = None
) -> Iterator[Any]:
    """Worker side: :func:`partition_findings` over Arrow record batches, in and out.

    Arrow rather than the RDD's pickled rows: the million-record benchmark's planning
    pass took 19.7-20.8 s against 23.7-28.5 s, timed in turns, with the same findings."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(FINDING_SCHEMA)

    def rows() -> Iterator[tuple[Any, ...]]:
        for batch in batches:
            yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)

    def batch(found: list[tuple[Any, ...]]) -> Any:
        columns = [list(column) for column in zip(*found, strict=True)]
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    out: list[tuple[Any, ...]] = []
    for row in partition_findings(rows(), days, owners):
        out.append(row)
        if len(out) >= BATCH_ROWS:
            yield batch(out)
            out = []
    if out:
        yield batch(out)


def partition_findings(
    rows: Iterable[tuple[Any, ...]], days: Days, owners: Owners | None = None
) -> Iterator[tuple[Any, ...]]:
    """Worker side: the rows of whole stream groups (:func:`_collapsed`) → finding tuples
    (resources in sync counted per env, day and kind, after the others). ``owners``:
    each environment's :class:`Ownership` (the default owner where not given)."""
    memo: dict[tuple[Any, ...], list[Finding]] = {}
    plans: dict[tuple[ServerInfo, Ownership], Memo] = {}
    in_sync: Counter[tuple[str, date, str]] = Counter()
    numbered = {
        env: [((when - EPOCH).days, when, version, level) for when, version, level in on]
        for env, on in days.items()
    }
    for (env, stream_name), group in groupby(rows, key=lambda r: (r[ENV], r[STREAM])):
        specs, seen = _group_rows(group)
        ownership = (owners or {}).get(env, DEFAULT_OWNERSHIP)
        usable = numbered.get(env, [])
        judged = stream_days(env, stream_name, seen, specs, usable, memo, plans, ownership)
        for day, findings in judged:
            for finding in findings:
                if finding[3] == "in_sync":
                    in_sync[(env, day, finding[0])] += 1
                else:
                    yield (env, day, *finding, None)
    for (env, day, kind), count in sorted(in_sync.items()):
        yield (env, day, kind, None, None, "in_sync", None, None, None, count)


def _group_rows(rows: Iterable[tuple[Any, ...]]) -> tuple[GroupSpecs, Seen]:
    """One stream group's specs, and its live configs by resource and day: the latest
    capture of a day wins (equal captures: the larger config text, so that the answer
    never depends on the order the records were read in)."""
    specs: GroupSpecs = (None, ())
    latest: dict[str, dict[int, tuple[int, str]]] = {}
    for row in rows:
        if row[SPECS] is not None:
            specs = pickle.loads(row[SPECS])  # pickled by this job's driver
            continue
        config, by_day = row[CONFIG], latest.setdefault(row[CONSUMER], {})
        for day, captured in zip(row[DAYS], row[CAPTURES], strict=True):
            before = by_day.get(day)
            if before is None or (captured, config) > before:
                by_day[day] = (captured, config)
    seen = {c: {day: pair[1] for day, pair in by_day.items()} for c, by_day in latest.items()}
    return specs, seen


def stream_days(
    env: str,
    stream_name: str,
    seen: Seen,
    specs: GroupSpecs,
    days: list[tuple[int, date, str | None, int | None]],
    memo: dict[tuple[Any, ...], list[Finding]],
    plans: dict[tuple[ServerInfo, Ownership], Memo],
    ownership: Ownership = DEFAULT_OWNERSHIP,
) -> Iterator[tuple[date, list[Finding]]]:
    """One stream and its consumers, judged on each usable day of the environment
    (``days``: each as days since the epoch and as a date, with the day's server).

    ``memo``: verdicts by the stream's configs of the day; ``plans``: the planner's own
    memo (``reconciler.planning.memo``) per server and owner, so that a stream planned again
    because one consumer drifted does not normalise and diff its other consumers again
    when their inputs are exactly those of a day before (measured on a partition of the
    1M-record benchmark: 1.65-1.73 s -> 1.36-1.58 s, the same findings). Both are the
    partition's own and cleared together, so they stay bounded."""
    stream_spec, consumer_specs = specs
    for day, when, version, level in days:
        present = {c: by_day[day] for c, by_day in seen.items() if day in by_day}
        if stream_spec is None and not consumer_specs and not present:
            continue
        key = (env, stream_name, version, level, tuple(sorted(present.items())))
        if key not in memo:
            if len(memo) >= MEMO_SIZE:
                memo.clear()
                plans.clear()
            group = _group(stream_name, stream_spec, consumer_specs, present)
            server = server_info(version, level)
            if (server, ownership) not in plans:
                plans[(server, ownership)] = Memo.for_plan(server, ownership.owner)
            plan_memo = plans[(server, ownership)]
            memo[key] = stream_findings(group, server, plan_memo, ownership)
        yield when, memo[key]


def _group(
    name: str, stream: Spec | None, consumers: tuple[Spec, ...], present: Mapping[str, str]
) -> StreamGroup:
    stream_config = present.get("")
    return StreamGroup(
        name=name,
        declared=stream,
        consumers=consumers,
        live=None if stream_config is None else config_from_text(stream_config),
        live_consumers={c: config_from_text(text) for c, text in present.items() if c}
        if stream_config is not None
        else {},
    )
