"""The live side: snapshot JSON Lines files read into a DataFrame.

Every line is parsed, checked (``reconciler.snapshot.parse_record``) and normalised
(``reconciler.fleet.canonical.live_row``) in one Python pass over the lines
(``mapPartitionsWithIndex`` on the RDD: pandas is not needed). Malformed lines are not
fatal: they become rows with an ``error`` and are reported with their file and line
while every other line is still processed (the job then exits 1: its result is
incomplete). Blank lines are skipped.

Line numbers cost nothing when every line is good: each file is read as its own RDD (so
a partition never spans files), each partition reports its line count through an
accumulator, and only the rows of bad lines carry (partition, index) which
:meth:`LineIndex.locate` turns into ``FILE:LINE`` after the job ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark import Accumulator, AccumulatorParam, SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BooleanType,
    DateType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from reconciler.errors import Location, ReconcileError
from reconciler.fleet.canonical import live_row, to_json
from reconciler.snapshot import BadRecord, parse_record

#: File names read from a snapshot folder (gzip is decompressed by Spark).
SNAPSHOT_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")

LIVE_SCHEMA = StructType(
    [
        StructField("env", StringType()),
        StructField("captured_at", TimestampType()),
        StructField("day", DateType()),
        StructField("stream_name", StringType()),  # the JetStream stream it is or lives in
        StructField("consumer", StringType()),  # "" for streams
        StructField("kind", StringType()),  # undeclared kind: Stream | KeyValue | ... | Consumer
        StructField("name", StringType()),  # undeclared name: KV_x is KeyValue x
        StructField("live", StringType()),  # canonical config, JSON text
        StructField("managed", BooleanType()),  # carries this tool's managed marker
        StructField("server_version", StringType()),
        StructField("api_level", IntegerType()),
        StructField("bad_partition", IntegerType()),
        StructField("bad_index", IntegerType()),
        StructField("error", StringType()),
    ]
)


class LineCounts(AccumulatorParam[dict[int, int]]):
    """partition index → number of lines; idempotent, so task retries do no harm."""

    def zero(self, value: dict[int, int]) -> dict[int, int]:
        return {}

    def addInPlace(self, value1: dict[int, int], value2: dict[int, int]) -> dict[int, int]:
        value1.update(value2)
        return value1


def snapshot_files(path: Path) -> list[Path]:
    """A snapshot file, or every snapshot file under a folder (recursive, sorted)."""
    if not path.exists():
        raise ReconcileError(f"{path}: no such snapshot file or folder")
    if path.is_file():
        return [path.resolve()]
    found = sorted(
        p.resolve()
        for p in path.rglob("*")
        if p.is_file() and p.name.endswith(SNAPSHOT_SUFFIXES) and not p.name.startswith(".")
    )
    if not found:
        raise ReconcileError(f"{path}: no snapshot files (*.jsonl, *.ndjson, *.json[.gz])")
    return found


@dataclass(frozen=True)
class BadLine:
    """A snapshot line that was skipped, and why."""

    location: Location
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.location.file, "line": self.location.line, "message": self.message}


@dataclass
class LineIndex:
    """Turns (partition, index within partition) of a bad line into FILE:LINE."""

    files: list[tuple[str, int, int]]  # (file, first global partition, partitions)
    counts: Accumulator[dict[int, int]] = field(repr=False)

    def locate(self, partition: int, index: int) -> Location:
        lines: dict[int, int] = self.counts.value
        for name, first, size in self.files:
            if first <= partition < first + size:
                before = sum(lines.get(p, 0) for p in range(first, partition))
                return Location(name, before + index + 1)
        return Location("?", index + 1)


def read_snapshots(
    spark: SparkSession, files: list[Path], *, min_partitions: int | None = None
) -> tuple[DataFrame, LineIndex]:
    """Every line of ``files`` as a row of :data:`LIVE_SCHEMA` (bad lines carry ``error``)."""
    sc: SparkContext = spark.sparkContext
    rdds = [sc.textFile(str(path), min_partitions) for path in files]
    layout: list[tuple[str, int, int]] = []
    first = 0
    for path, rdd in zip(files, rdds, strict=True):
        layout.append((str(path), first, rdd.getNumPartitions()))
        first += rdd.getNumPartitions()
    counts = sc.accumulator({}, LineCounts())
    lines = sc.union(rdds) if len(rdds) > 1 else rdds[0]
    rows = lines.mapPartitionsWithIndex(
        lambda index, part: parse_partition(index, part, counts), preservesPartitioning=True
    )
    frame = spark.createDataFrame(rows, LIVE_SCHEMA, verifySchema=False)
    return frame, LineIndex(layout, counts)


def parse_partition(
    index: int, lines: Iterable[str], counts: Accumulator[dict[int, int]]
) -> Iterator[tuple[Any, ...]]:
    """Worker side: parse, check and normalise each line of one partition."""
    seen = 0
    for position, line in enumerate(lines):
        seen = position + 1
        if not line.strip():
            continue
        try:
            yield record_row(line)
        except BadRecord as err:
            yield _bad_row(index, position, str(err))
    counts.add({index: seen})


def record_row(line: str) -> tuple[Any, ...]:
    """One good line as a row of :data:`LIVE_SCHEMA`; raises :class:`BadRecord`."""
    record = parse_record(line)
    stream_name, consumer, kind, name, live, managed = live_row(record)
    return (
        record.env,
        record.captured_at,
        record.day,
        stream_name,
        consumer,
        kind,
        name,
        to_json(live),
        managed,
        record.server_version,
        record.api_level,
        None,
        None,
        None,
    )


def _bad_row(partition: int, position: int, message: str) -> tuple[Any, ...]:
    return (None,) * 11 + (partition, position, message)


def bad_lines(
    frame: DataFrame, index: LineIndex, *, limit: int = 1000
) -> tuple[list[BadLine], int]:
    """The first ``limit`` bad lines (by file and line) and how many there are in all.

    Call after an action over ``frame`` has run (the line counts come with it).
    """
    bad = frame.where("error IS NOT NULL").select("bad_partition", "bad_index", "error")
    total = bad.count()
    if total == 0:
        return [], 0
    # toLocalIterator keeps the driver bounded even with millions of bad lines.
    found: list[BadLine] = []
    for row in bad.orderBy("bad_partition", "bad_index").limit(limit).toLocalIterator():
        location = index.locate(int(row["bad_partition"]), int(row["bad_index"]))
        found.append(BadLine(location, str(row["error"])))
    return found, total
