"""The live side: snapshot JSON Lines files read into a DataFrame.

The driver plans the read (``reconciler.fleet.lines``: whole files grouped into units,
big files cut into byte ranges); each unit is one Spark task whose Python worker opens
its files itself and hands its rows to the JVM as Arrow record batches (``mapInArrow``
over ``spark.range``: one unit per partition). Every line is parsed and checked there
(``reconciler.planning.snapshot.parse_fields``, the checks of ``parse_record``), and its
config found readable (``reconciler.fleet.canonical.readable``) once per resource, config
and server. Malformed lines are not fatal: they become rows with an ``error`` and are
reported with their file and line while every other line is still processed (the job
then exits 1: its result is incomplete). Blank lines are skipped.

A unit's good records are collapsed before they leave the worker: one row per resource
and config (``env, stream_name, consumer, config``) with the (day, capture) of each
record, so a resource that looks the same on many days is written, shuffled and handed
to the planning pass once (``reconciler.fleet.match`` merges the rows of one resource
that several units saw). A whole file's bad lines carry their file and line; a cut
file's carry (range, index within it), and each range reports its line count through an
accumulator, which :meth:`LineIndex.locate` turns into ``FILE:LINE`` after the job ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

from pyspark import Accumulator, AccumulatorParam
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from reconciler.errors import ReconcileError
from reconciler.fleet.canonical import config_text, placed, readable, server_info
from reconciler.fleet.lines import WHOLE_FILE_LIMIT, Piece, plan_units, range_lines, whole_lines
from reconciler.locations import Location
from reconciler.planning.snapshot import BadRecord, parse_fields

#: File names read from a snapshot folder (gzip is decompressed).
SNAPSHOT_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")

#: The read's rows: one per resource and config seen by one unit (good records), or one
#: per bad line (``error`` set, the rest null but where the line is).
LIVE_SCHEMA = StructType(
    [
        StructField("env", StringType()),
        StructField("stream_name", StringType()),  # the JetStream stream it is or lives in
        StructField("consumer", StringType()),  # "" for streams
        StructField("config", StringType()),  # the config verbatim, compact JSON text
        StructField("days", ArrayType(IntegerType(), False)),  # UTC days since the epoch
        StructField("captures", ArrayType(LongType(), False)),  # µs since the epoch, aligned
        StructField("bad_file", StringType()),  # bad lines of whole files
        StructField("bad_range", IntegerType()),  # bad lines of cut files
        StructField("bad_line", IntegerType()),  # line (whole files) or index in range
        StructField("error", StringType()),
    ]
)
COLUMNS = LIVE_SCHEMA.fieldNames()
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
DAY_MICROSECONDS = 86_400_000_000
#: Rows per Arrow batch handed to the JVM.
BATCH_ROWS = 8192


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
#: What one unit of the read saw: its bad lines, and each (env, UTC day)'s tally (the
#: day as days since the epoch).
PartTally = tuple[int, dict[tuple[str, int], DayTally]]
#: The read's tallies, by unit.
Tallies = Accumulator[dict[int, PartTally]]


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


def _rank(captured: int, version: str | None, level: int | None) -> tuple[int, str, int]:
    """Which capture of an env-day is the latest: the later time; equal times, the larger
    version, then level, so that the answer never depends on the order read."""
    return captured, version or "", -1 if level is None else level


class UnitRows:
    """One unit's rows as its lines are read (worker side): good records collapsed by
    resource and config, bad lines as they come, and the tally of each env-day."""

    def __init__(self) -> None:
        #: (env, stream_name, consumer, config text) → its days, captures, and the
        #: servers (version, level) its config was found readable on
        self.seen: dict[tuple[str, str, str, str], tuple[list[int], list[int], list[Any]]] = {}
        self.bad: list[tuple[Any, ...]] = []
        self.counts: dict[tuple[str, int], int] = {}
        self.latest: dict[tuple[str, int], tuple[int, str | None, int | None]] = {}

    def add_line(self, line: str) -> None:
        """One line, parsed and checked; raises :class:`BadRecord` (nothing is kept)."""
        env, moment, kind, stream, name, config, version, level = parse_fields(line)
        text = config_text(config)
        key = (env, *placed(kind, stream, name), text)
        found = self.seen.get(key)
        if found is None or (version, level) not in found[2]:  # the same record on
            readable(kind, config, server_info(version, level), text)  # another day: read
            if found is None:
                found = self.seen[key] = ([], [], [])
            found[2].append((version, level))
        captured = _micros(moment)
        day = captured // DAY_MICROSECONDS
        found[0].append(day)
        found[1].append(captured)
        on = (env, day)
        self.counts[on] = self.counts.get(on, 0) + 1
        before = self.latest.get(on)
        if before is None or (
            before != (captured, version, level)
            and _rank(captured, version, level) > _rank(*before)
        ):
            self.latest[on] = (captured, version, level)

    def take(
        self, text: str, *, line: int, file: str | None = None, part: int | None = None
    ) -> None:
        """One line read: a record, or a bad line kept with where it was (a whole file's
        ``file`` and line number, or a cut file's ``part`` and position in it)."""
        try:
            self.add_line(text)
        except BadRecord as err:
            self.add_bad(str(err), line=line, file=file, part=part)

    def add_bad(
        self, message: str, *, line: int, file: str | None = None, part: int | None = None
    ) -> None:
        self.bad.append((None,) * 6 + (file, part, line, message))

    def rows(self) -> Iterator[tuple[Any, ...]]:
        for (env, stream, consumer, text), (days, captures, _) in self.seen.items():
            yield env, stream, consumer, text, days, captures, None, None, None, None
        yield from self.bad

    def tally(self) -> PartTally:
        return len(self.bad), {on: (n, *self.latest[on]) for on, n in self.counts.items()}


@lru_cache(maxsize=1024)
def _micros(moment: datetime) -> int:
    """Microseconds since the epoch of a UTC time (a snapshot's records share theirs)."""
    return (moment - EPOCH) // MICROSECOND


def _merged(one: DayTally, other: DayTally) -> DayTally:
    """Two tallies of one env-day as one: the records added, the latest capture kept."""
    latest = other if _rank(*other[1:]) > _rank(*one[1:]) else one
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
    """Turns (range, index within the range) of a bad line of a cut file into FILE:LINE;
    after the read ran, also says how many lines were bad and what each env-day held."""

    files: list[tuple[str, int, int]]  # (file, its first range, its ranges)
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

    def locate(self, part: int, index: int) -> Location:
        lines: dict[int, int] = self.counts.value if self.counts is not None else {}
        for name, first, size in self.files:
            if first <= part < first + size:
                before = sum(lines.get(p, 0) for p in range(first, part))
                return Location(name, before + index + 1)
        return Location("?", index + 1)


def read_snapshots(
    spark: SparkSession,
    files: list[Path],
    *,
    min_partitions: int | None = None,
    whole_file_limit: int = WHOLE_FILE_LIMIT,
) -> tuple[DataFrame, LineIndex]:
    """Every good record of ``files`` in a row of :data:`LIVE_SCHEMA` (collapsed by
    resource and config within a unit), and a row per bad line (``error`` set).

    Files up to ``whole_file_limit`` bytes are read whole, many per task (a task per
    small file would cost more than its lines); bigger ones are cut into byte ranges
    (at least ``min_partitions`` each), one task each.
    """
    sc = spark.sparkContext
    units, layout = plan_units(
        files,
        parallelism=sc.defaultParallelism,
        min_partitions=min_partitions,
        whole_file_limit=whole_file_limit,
    )
    tallies: Tallies = sc.accumulator({}, PerPartition())
    counts: Accumulator[dict[int, int]] = sc.accumulator({}, PerPartition())

    def read(batches: Iterable[Any]) -> Iterator[Any]:
        return read_units(batches, units, counts, tallies)

    ids = spark.range(len(units), numPartitions=max(len(units), 1))
    return ids.mapInArrow(read, LIVE_SCHEMA), LineIndex(layout, counts, tallies)


def read_units(
    batches: Iterable[Any],
    units: list[list[Piece]],
    counts: Accumulator[dict[int, int]],
    tallies: Tallies,
) -> Iterator[Any]:
    """Worker side: the units whose numbers arrive in ``batches`` (Arrow record batches
    of ``spark.range``), each read, counted into the accumulators and handed back as
    Arrow record batches of :data:`LIVE_SCHEMA`."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(LIVE_SCHEMA)
    for batch in batches:
        for unit in batch.column(0).to_pylist():
            rows = read_unit(units[unit], counts)
            tallies.add({unit: rows.tally()})
            found = list(rows.rows())
            for first in range(0, len(found), BATCH_ROWS):
                columns = zip(*found[first : first + BATCH_ROWS], strict=True)
                yield pa.RecordBatch.from_arrays([list(c) for c in columns], schema=schema)


def read_unit(pieces: list[Piece], counts: Accumulator[dict[int, int]] | None = None) -> UnitRows:
    """Worker side: every line of one unit's pieces; a cut file's range reports its line
    count (blank lines included) to ``counts``."""
    rows = UnitRows()
    for piece in pieces:
        if piece.whole:
            for number, line in enumerate(whole_lines(piece.path), start=1):
                if line.strip():
                    rows.take(line, line=number, file=piece.path)
            continue
        seen = 0
        for position, line in enumerate(range_lines(piece)):
            seen = position + 1
            if line.strip():
                rows.take(line, line=position, part=piece.number)
        if counts is not None:
            counts.add({piece.number: seen})
    return rows


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
    bad = frame.where("error IS NOT NULL").select("bad_file", "bad_range", "bad_line", "error")
    found: list[BadLine] = []
    first = bad.orderBy("bad_file", "bad_range", "bad_line").limit(limit)
    for row in first.toLocalIterator():  # bounded: at most ``limit`` rows
        if row["bad_file"] is not None:
            location = Location(str(row["bad_file"]), int(row["bad_line"]))
        else:
            location = index.locate(int(row["bad_range"]), int(row["bad_line"]))
        found.append(BadLine(location, str(row["error"])))
    found.sort(key=lambda b: b.location)
    return found, total
