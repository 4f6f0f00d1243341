"""The live side: snapshot JSON Lines files read into a DataFrame.

Every line is parsed, checked (``reconciler.planning.snapshot.parse_record``) and normalised
(``reconciler.fleet.canonical.live_row``) in one Python pass over the lines, on the RDD
(pandas is not needed). Malformed lines are not fatal: they become rows with an
``error`` and are reported with their file and line while every other line is still
processed (the job then exits 1: its result is incomplete). Blank lines are skipped.

Small files (the usual one-snapshot-per-env-and-day) are read whole, many per task
(``wholeTextFiles``): a task per file would cost more than the file's lines, and line
numbers come for free. Files above :data:`WHOLE_FILE_LIMIT` are split across tasks; each
file is its own RDD (a partition never spans files), each partition reports its line
count through an accumulator, and only bad lines carry (partition, index), which
:meth:`LineIndex.locate` turns into ``FILE:LINE`` after the job ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyspark import RDD, Accumulator, AccumulatorParam, SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DateType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from reconciler.errors import ReconcileError
from reconciler.fleet.canonical import config_text, live_row
from reconciler.locations import Location
from reconciler.planning.snapshot import BadRecord, parse_record

#: Files up to this size are read whole, several per task; bigger ones are split.
WHOLE_FILE_LIMIT = 64 * 1024 * 1024

#: File names read from a snapshot folder (gzip is decompressed by Spark).
SNAPSHOT_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")

LIVE_SCHEMA = StructType(
    [
        StructField("env", StringType()),
        StructField("captured_at", TimestampType()),  # UTC
        StructField("day", DateType()),  # the UTC day of captured_at
        StructField("stream_name", StringType()),  # the JetStream stream it is or lives in
        StructField("consumer", StringType()),  # "" for streams
        StructField("kind", StringType()),  # undeclared kind: Stream | KeyValue | ... | Consumer
        StructField("name", StringType()),  # undeclared name: KV_x is KeyValue x
        StructField("live", StringType()),  # the config verbatim, JSON text
        StructField("managed", BooleanType()),  # carries this tool's managed marker
        StructField("server_version", StringType()),
        StructField("api_level", IntegerType()),
        StructField("bad_file", StringType()),  # bad lines of whole-read files
        StructField("bad_partition", IntegerType()),  # bad lines of split files
        StructField("bad_line", IntegerType()),  # line (whole files) or index in partition
        StructField("error", StringType()),
    ]
)


#: What the Python read hands to the JVM: :data:`LIVE_SCHEMA` but for the capture as
#: microseconds and the day as days since the epoch (UTC), made typed by Spark's own
#: functions. A schema with a timestamp or date makes pyspark convert every row in Python
#: (``StructType.toInternal``: a fifth of the read's Python time, measured on the
#: benchmark's lines); with none, rows pass as they are.
RAW_SCHEMA = StructType(
    [
        StructField(f.name, LongType(), f.nullable)
        if f.name == "captured_at"
        else StructField(f.name, IntegerType(), f.nullable)
        if f.name == "day"
        else f
        for f in LIVE_SCHEMA.fields
    ]
)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
DAY_MICROSECONDS = 86_400_000_000


def typed(raw: DataFrame) -> DataFrame:
    """Rows of :data:`RAW_SCHEMA` as rows of :data:`LIVE_SCHEMA`."""
    columns = {
        "captured_at": F.timestamp_micros("captured_at").alias("captured_at"),
        "day": F.date_from_unix_date("day").alias("day"),
    }
    return raw.select(*(columns.get(name, F.col(name)) for name in LIVE_SCHEMA.fieldNames()))


class PerPartition(AccumulatorParam[dict[Any, Any]]):
    """What each partition reported, keyed by partition: a task run twice (a retry, a
    stage computed again) reports the same value under the same key, so nothing is
    counted twice. Used for line counts and for :data:`PartTally`."""

    def zero(self, value: dict[Any, Any]) -> dict[Any, Any]:
        return {}

    def addInPlace(self, value1: dict[Any, Any], value2: dict[Any, Any]) -> dict[Any, Any]:
        value1.update(value2)
        return value1


#: One env-day as counted: records, the latest capture (microseconds since the epoch),
#: that capture's version and level.
DayTally = tuple[int, int, str | None, int | None]
#: What one partition of the read saw: its bad lines, and each (env, UTC day)'s tally
#: (the day as days since the epoch).
PartTally = tuple[int, dict[tuple[str, int], DayTally]]
#: The read's tallies, by (whole or split, partition index).
Tallies = Accumulator[dict[tuple[str, int], PartTally]]
#: Positions of the columns a tally reads, in a row of :data:`LIVE_SCHEMA`.
_ENV, _CAPTURED, _DAY, _VERSION, _LEVEL, _ERROR = (
    LIVE_SCHEMA.fieldNames().index(name)
    for name in ("env", "captured_at", "day", "server_version", "api_level", "error")
)


@dataclass
class EnvDay:
    """One environment's snapshot of one UTC day, as far as the driver needs to know
    (counted by the read: :meth:`LineIndex.env_days`)."""

    env: str
    day: date
    server_version: str | None  # the server of the latest capture
    api_level: int | None
    captured_at: datetime  # the latest capture of the day (UTC)
    records: int
    problems: list[str] = field(default_factory=list)  # why this day was not compared


class _Tally:
    """Counts one partition's rows as they pass (worker side)."""

    def __init__(self) -> None:
        self.bad = 0
        self.days: dict[tuple[str, int], DayTally] = {}

    def count(self, row: tuple[Any, ...]) -> None:
        if row[_ERROR] is not None:  # a bad line
            self.bad += 1
            return
        key, one = (row[_ENV], row[_DAY]), (1, row[_CAPTURED], row[_VERSION], row[_LEVEL])
        seen = self.days.get(key)
        self.days[key] = one if seen is None else _merged(seen, one)

    def part(self) -> PartTally:
        return self.bad, self.days


def _merged(one: DayTally, other: DayTally) -> DayTally:
    """Two tallies of one env-day as one: the records added, the later capture kept
    (equal times: the larger version, then level, so that the answer never depends on
    the order the records were read in)."""

    def rank(tally: DayTally) -> tuple[int, str, int]:
        return tally[1], tally[2] or "", -1 if tally[3] is None else tally[3]

    latest = other if rank(other) > rank(one) else one
    return (one[0] + other[0], *latest[1:])


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
    """Turns (partition, index within partition) of a bad line of a split file into FILE:LINE;
    after the read ran, also says how many lines were bad and what each env-day held."""

    files: list[tuple[str, int, int]]  # (file, first partition, partitions)
    counts: Accumulator[dict[int, int]] | None = field(default=None, repr=False)
    tallies: Tallies | None = field(default=None, repr=False)

    def bad_total(self) -> int:
        """Bad lines of the whole read (call after an action over it ran)."""
        return sum(bad for bad, _ in self._parts())

    def env_days(self) -> list[EnvDay]:
        """Every (env, UTC day) of the good records, sorted (after an action ran)."""
        merged: dict[tuple[str, int], DayTally] = {}
        for _, days in self._parts():
            for key, seen in days.items():
                before = merged.get(key)
                merged[key] = seen if before is None else _merged(before, seen)
        return [
            EnvDay(
                env,
                date.fromordinal(EPOCH.toordinal() + day),
                version,
                level,
                EPOCH + captured * MICROSECOND,
                records,
            )
            for (env, day), (records, captured, version, level) in sorted(merged.items())
        ]

    def _parts(self) -> list[PartTally]:
        return list(self.tallies.value.values()) if self.tallies is not None else []

    def locate(self, partition: int, index: int) -> Location:
        lines: dict[int, int] = self.counts.value if self.counts is not None else {}
        for name, first, size in self.files:
            if first <= partition < first + size:
                before = sum(lines.get(p, 0) for p in range(first, partition))
                return Location(name, before + index + 1)
        return Location("?", index + 1)


def read_snapshots(
    spark: SparkSession,
    files: list[Path],
    *,
    min_partitions: int | None = None,
    whole_file_limit: int = WHOLE_FILE_LIMIT,
) -> tuple[DataFrame, LineIndex]:
    """Every line of ``files`` as a row of :data:`LIVE_SCHEMA` (bad lines carry ``error``).

    Files up to ``whole_file_limit`` bytes are read whole, many per task (a task per small
    file would cost more than its lines); bigger files are split across tasks.
    """
    sc: SparkContext = spark.sparkContext
    small = [f for f in files if f.stat().st_size <= whole_file_limit and "," not in str(f)]
    large = [f for f in files if f not in set(small)]
    parts = []
    tallies = sc.accumulator({}, PerPartition())
    if small:
        size = sum(f.stat().st_size for f in small)
        wanted = max(sc.defaultParallelism * 2, size // WHOLE_FILE_LIMIT, 1)
        whole = sc.wholeTextFiles(",".join(str(f) for f in small), min_partitions or wanted)
        parts.append(
            whole.mapPartitionsWithIndex(lambda index, items: parse_files(index, items, tallies))
        )
    index = LineIndex([], tallies=tallies)
    if large:
        split, index = _read_split(sc, large, min_partitions, tallies)
        parts.append(split)
    rows = sc.union(parts) if len(parts) > 1 else parts[0]
    return typed(spark.createDataFrame(rows, RAW_SCHEMA, verifySchema=False)), index


def _read_split(
    sc: SparkContext,
    files: list[Path],
    min_partitions: int | None,
    tallies: Tallies,
) -> tuple[RDD[tuple[Any, ...]], LineIndex]:
    rdds = [sc.textFile(str(path), min_partitions) for path in files]
    layout: list[tuple[str, int, int]] = []
    first = 0
    for path, rdd in zip(files, rdds, strict=True):
        layout.append((str(path), first, rdd.getNumPartitions()))
        first += rdd.getNumPartitions()
    counts = sc.accumulator({}, PerPartition())
    lines = sc.union(rdds) if len(rdds) > 1 else rdds[0]
    rows = lines.mapPartitionsWithIndex(
        lambda index, part: parse_partition(index, part, counts, tallies)
    )
    return rows, LineIndex(layout, counts, tallies)


def parse_files(
    index: int,
    items: Iterable[tuple[str, str]],
    tallies: Tallies,
) -> Iterator[tuple[Any, ...]]:
    """Worker side: the whole files of one partition, counted into ``tallies``."""
    tally = _Tally()
    for uri, text in items:
        for row in parse_file(uri, text):
            tally.count(row)
            yield row
    tallies.add({("whole", index): tally.part()})


def parse_file(uri: str, text: str) -> Iterator[tuple[Any, ...]]:
    """Worker side: every line of one whole file (bad lines carry file and line)."""
    path = unquote(urlparse(uri).path) if uri.startswith("file:") else uri
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield record_row(line)
        except BadRecord as err:
            yield _bad_row(str(err), file=path, line=number)


def parse_partition(
    index: int,
    lines: Iterable[str],
    counts: Accumulator[dict[int, int]],
    tallies: Tallies,
) -> Iterator[tuple[Any, ...]]:
    """Worker side: every line of one partition of a split file."""
    seen = 0
    tally = _Tally()
    for position, line in enumerate(lines):
        seen = position + 1
        if not line.strip():
            continue
        try:
            row = record_row(line)
        except BadRecord as err:
            row = _bad_row(str(err), partition=index, line=position)
        tally.count(row)
        yield row
    counts.add({index: seen})
    tallies.add({("split", index): tally.part()})


def record_row(line: str) -> tuple[Any, ...]:
    """One good line as a row of :data:`RAW_SCHEMA`; raises :class:`BadRecord`."""
    record = parse_record(line)
    text = config_text(record.config)
    stream_name, consumer, kind, name, _, managed = live_row(record, text)
    captured = (record.captured_at - EPOCH) // MICROSECOND  # captured_at is in UTC
    return (
        record.env,
        captured,
        captured // DAY_MICROSECONDS,
        stream_name,
        consumer,
        kind,
        name,
        text,
        managed,
        record.server_version,
        record.api_level,
        None,
        None,
        None,
        None,
    )


def _bad_row(
    message: str, *, line: int, file: str | None = None, partition: int | None = None
) -> tuple[Any, ...]:
    return (None,) * 11 + (file, partition, line, message)


def bad_lines(
    frame: DataFrame, index: LineIndex, *, limit: int = 1000
) -> tuple[list[BadLine], int]:
    """The first ``limit`` bad lines (by file and line) and how many there are in all.

    Call after an action over ``frame`` has run (the line counts come with it): the
    count is the read's own, and the lines are looked up only when there are any.
    """
    total = index.bad_total()
    if total == 0:
        return [], 0
    bad = frame.where("error IS NOT NULL").select("bad_file", "bad_partition", "bad_line", "error")
    found: list[BadLine] = []
    first = bad.orderBy("bad_file", "bad_partition", "bad_line").limit(limit)
    for row in first.toLocalIterator():  # bounded: at most ``limit`` rows
        if row["bad_file"] is not None:
            location = Location(str(row["bad_file"]), int(row["bad_line"]))
        else:
            location = index.locate(int(row["bad_partition"]), int(row["bad_line"]))
        found.append(BadLine(location, str(row["error"])))
    found.sort(key=lambda b: b.location)
    return found, total
