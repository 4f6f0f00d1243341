"""Desired ⟗ live: matching both sides and judging every resource, with one shuffle.

The desired rows (one per spec and context) and the live rows (one per record, all days)
are unioned and partitioned by ``(env, stream_name)``, sorted so that each stream
arrives with its consumers, desired rows first, then the live rows day by day. One
Python pass then does the full outer join per day (the latest capture of a resource on a
day wins) and applies the plan's rules (``reconciler.fleet.verdict.stream_findings``,
which needs a stream's verdict to judge its consumers). Desired configs are not copied
per day, and the records cross the network once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import date
from itertools import groupby
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StringType, StructField, StructType

from reconciler.fleet.verdict import Pair, stream_findings

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
    ]
)
FINDING_COLUMNS = [f.name for f in FINDING_SCHEMA.fields]
GROUP = ("env", "stream_name")
ORDER = ("env", "stream_name", "side", "day", "consumer")
#: env → [(day, context id)] of the days that can be compared
Days = Mapping[str, list[tuple[date, int]]]

#: Column positions of the unioned rows (the order of ``_desired_rows`` / ``_live_rows``).
ENV, STREAM, CONSUMER, SIDE, DAY, CAPTURED, CTX, KIND, NAME, CONFIG = range(10)
EXTERNAL, MANAGED, VERSION, LEVEL = range(10, 14)


def _null(kind: str) -> Any:
    return F.lit(None).cast(kind)


def _desired_rows(desired: DataFrame) -> DataFrame:
    return desired.select(
        "env", "stream_name", "consumer", F.lit(0).alias("side"), _null("date").alias("day"),
        _null("timestamp").alias("captured_at"), "ctx", "kind", "name",
        F.col("desired").alias("config"), "external", _null("boolean").alias("managed"),
        "server_version", "api_level",
    )  # fmt: skip


def _live_rows(live: DataFrame) -> DataFrame:
    return live.select(
        "env", "stream_name", "consumer", F.lit(1).alias("side"), "day", "captured_at",
        _null("int").alias("ctx"), "kind", "name", F.col("live").alias("config"),
        _null("boolean").alias("external"), "managed", "server_version", "api_level",
    )  # fmt: skip


def all_findings(desired: DataFrame, live: DataFrame, *, days: Days, partitions: int) -> DataFrame:
    """Every resource's status (in_sync included), every env and usable day: FINDING_SCHEMA."""
    rows = (
        _desired_rows(desired)
        .unionByName(_live_rows(live))
        .repartition(partitions, *GROUP)
        .sortWithinPartitions(*ORDER, F.col("captured_at").desc())
    )
    spark = rows.sparkSession
    shared = spark.sparkContext.broadcast(dict(days))
    found = rows.rdd.mapPartitions(lambda part: partition_findings(part, shared.value))
    return spark.createDataFrame(found, FINDING_SCHEMA, verifySchema=False)


def partition_findings(rows: Iterable[Row], days: Days) -> Iterator[tuple[Any, ...]]:
    """Worker side: sorted rows of whole streams → finding tuples."""
    for (env, stream_name), group in groupby(rows, key=lambda r: (r[ENV], r[STREAM])):
        yield from stream_days(env, stream_name, list(group), days.get(env, []))


def stream_days(
    env: str, stream_name: str, rows: list[Row], days: list[tuple[date, int]]
) -> Iterator[tuple[Any, ...]]:
    """One stream and its consumers, judged on each usable day of the environment."""
    desired: dict[int, dict[str, Row]] = {}
    live: dict[date, dict[str, Row]] = {}
    for row in rows:
        if row[SIDE] == 0:
            desired.setdefault(row[CTX], {})[row[CONSUMER]] = row
        else:  # sorted latest capture first: the first one of a day wins
            live.setdefault(row[DAY], {}).setdefault(row[CONSUMER], row)
    for day, context in days:
        declared, present = desired.get(context, {}), live.get(day, {})
        if not declared and not present:
            continue
        pairs = [_pair(c, declared.get(c), present.get(c)) for c in sorted({*declared, *present})]
        for finding in stream_findings(stream_name, pairs):
            yield (env, day, *finding)


def _pair(consumer: str, declared: Row | None, live: Row | None) -> Pair:
    values: dict[str, Any] = {}
    if declared is not None:
        values.update(
            declared_kind=declared[KIND],
            declared_name=declared[NAME],
            desired=declared[CONFIG],
            external=bool(declared[EXTERNAL]),
            server_version=declared[VERSION],
            api_level=declared[LEVEL],
        )
    if live is not None:
        values.update(
            live_kind=live[KIND],
            live_name=live[NAME],
            live=live[CONFIG],
            managed=bool(live[MANAGED]),
        )
    return Pair(consumer, **values)
