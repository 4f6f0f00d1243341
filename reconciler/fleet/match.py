"""Desired ⟗ live: the full outer join, then the drift status of every resource.

The join runs in the JVM; the verdicts in one Python pass over the joined rows,
partitioned and sorted so that each stream arrives with its consumers right behind it
(``reconciler.fleet.verdict.stream_findings``: the plan's rules, which need the stream's
verdict to judge its consumers).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import groupby
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StringType, StructField, StructType

from reconciler.fleet.verdict import Pair, stream_findings

KEYS = ["env", "day", "stream_name", "consumer"]
GROUP = ["env", "day", "stream_name"]
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


def join_sides(desired: DataFrame, live: DataFrame) -> DataFrame:
    """Full outer join on the resource identity; desired columns ``d_*``, live ``l_*``."""
    left = desired.select(
        *KEYS,
        *(F.col(c).alias(f"d_{c}") for c in ("kind", "name", "desired", "external")),
        F.col("server_version").alias("d_server_version"),
        F.col("api_level").alias("d_api_level"),
    )
    right = live.select(
        *KEYS, *(F.col(c).alias(f"l_{c}") for c in ("kind", "name", "live", "managed"))
    )
    return left.join(right, on=KEYS, how="full_outer")


def _pair(row: Row) -> Pair:
    return Pair(
        consumer=row["consumer"],
        declared_kind=row["d_kind"],
        declared_name=row["d_name"],
        desired=row["d_desired"],
        external=bool(row["d_external"]),
        server_version=row["d_server_version"],
        api_level=row["d_api_level"],
        live_kind=row["l_kind"],
        live_name=row["l_name"],
        live=row["l_live"],
        managed=bool(row["l_managed"]),
    )


def _partition_findings(rows: Iterable[Row]) -> Iterator[tuple[Any, ...]]:
    """Worker side: rows sorted by (env, day, stream_name, consumer) → finding tuples."""
    for (env, day, stream_name), group in groupby(
        rows, key=lambda r: (r["env"], r["day"], r["stream_name"])
    ):
        for finding in stream_findings(stream_name, [_pair(r) for r in group]):
            yield (env, day, *finding)


def all_findings(desired: DataFrame, live: DataFrame, *, partitions: int) -> DataFrame:
    """Every resource's status (in_sync included), every env and day: FINDING_SCHEMA."""
    joined = join_sides(desired, live)
    ordered = joined.repartition(partitions, *GROUP).sortWithinPartitions(*KEYS)
    rows = ordered.rdd.mapPartitions(_partition_findings)
    return ordered.sparkSession.createDataFrame(rows, FINDING_SCHEMA, verifySchema=False)
