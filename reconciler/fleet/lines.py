"""Snapshot files as lines, read by the workers themselves: what the read's tasks read.

The driver only plans the work (:func:`plan_units`): a file up to the whole-file limit is
one piece, read whole (its line numbers come for free); a bigger file is cut into byte
ranges, each read by its own task (a gzip file is never cut: it is one range). Either
way lines end at ``\\n``, ``\\r`` or ``\\r\\n`` and a leading byte order mark is dropped,
as Hadoop's ``textFile`` reads them. Bytes are read as UTF-8, an invalid sequence read as U+FFFD, as
Spark's text readers (Java) read them; ``.gz`` files are decompressed.

Files are grouped into units of work, one Spark task each, so that files of the same
name (``day01/eu.jsonl``, ``day02/eu.jsonl``: nearly always the same environment on
other days) land in one unit: the read then collapses a resource seen on many days into
one row. The grouping only decides where work runs, never what is found.

Nothing here imports pyspark, so it is tested without a JVM.
"""

from __future__ import annotations

import codecs
import gzip
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

#: Files up to this size are read whole (several per task); bigger ones are cut.
WHOLE_FILE_LIMIT = 64 * 1024 * 1024
#: The largest byte range of a cut file (Hadoop's block size on a local file system).
RANGE_BYTES = 32 * 1024 * 1024
#: Whole files per unit: about this many bytes (several units per core keep both busy).
UNIT_BYTES = 16 * 1024 * 1024
_DELIMITER = re.compile(rb"\r\n|\r|\n")
_TEXT_DELIMITER = re.compile("\r\n|\r|\n")
_BLOCK = 1 << 20
#: How invalid UTF-8 is read: as Java reads it (Spark's text readers did, and the
#: findings must not change with the reader).
DECODING = "fleet-as-java"


def _as_java(error: UnicodeError) -> tuple[str, int]:
    """One U+FFFD per invalid sequence, as Java's UTF-8 decoder counts them: Python's
    own ``replace`` does too, but for an encoded surrogate (``ED A0 80``), which Java
    reads as one sequence (three U+FFFD in Python) and ``ED A0`` cut short as one."""
    assert isinstance(error, UnicodeDecodeError)
    data, at = error.object, error.start
    if data[at] == 0xED and at + 1 < len(data) and 0xA0 <= data[at + 1] <= 0xBF:
        whole = at + 2 < len(data) and 0x80 <= data[at + 2] <= 0xBF
        return "\ufffd", at + 3 if whole else at + 2
    return "\ufffd", error.end


codecs.register_error(DECODING, _as_java)


@dataclass(frozen=True)
class Piece:
    """A whole file (``end`` None), or the lines of a cut file that begin in a byte range:
    those whose preceding line break ends in ``[start, end)`` (the first line: ``start``
    0). ``number`` counts the ranges of all cut files, in file order (FILE:LINE of a bad
    line of a range is found after the read, from the line counts of the ranges before)."""

    path: str
    start: int = 0
    end: int | None = None
    number: int = -1

    @property
    def whole(self) -> bool:
        return self.end is None


def is_gzip(path: str) -> bool:
    return path.endswith(".gz")


def plan_units(
    files: list[Path],
    *,
    parallelism: int,
    min_partitions: int | None = None,
    whole_file_limit: int = WHOLE_FILE_LIMIT,
) -> tuple[list[list[Piece]], list[tuple[str, int, int]]]:
    """The units of work (each a list of pieces) and the layout of the cut files:
    ``(file, its first range number, its ranges)``. A file with a comma in its name is
    cut, as before the workers read the files themselves (its lines end as a cut file's)."""
    sizes = {f: f.stat().st_size for f in files}
    whole = [f for f in files if sizes[f] <= whole_file_limit and "," not in str(f)]
    cut = [f for f in files if f not in set(whole)]
    units = _whole_units(whole, sizes, parallelism, min_partitions)
    layout: list[tuple[str, int, int]] = []
    number = 0
    for path in cut:
        ranges = _ranges(str(path), sizes[path], min_partitions)
        layout.append((str(path), number, len(ranges)))
        for start, end in ranges:
            units.append([Piece(str(path), start, end, number)])
            number += 1
    return units, layout


def _whole_units(
    files: list[Path], sizes: dict[Path, int], parallelism: int, min_partitions: int | None
) -> list[list[Piece]]:
    if not files:
        return []
    total = sum(sizes[f] for f in files)
    wanted = max(min_partitions or 0, 2 * parallelism, total // UNIT_BYTES, 1)
    target = max(total // wanted, 1)
    units: list[list[Piece]] = [[]]
    held = 0
    for path in sorted(files, key=lambda f: (f.name, str(f))):  # one name's days together
        if units[-1] and held + sizes[path] > target:
            units.append([])
            held = 0
        units[-1].append(Piece(str(path)))
        held += sizes[path]
    return units


def _ranges(path: str, size: int, min_partitions: int | None) -> list[tuple[int, int]]:
    if is_gzip(path) or size == 0:
        return [(0, max(size, 1))]  # a gzip stream is read from its start, whole
    count = max(min_partitions or 1, -(-size // RANGE_BYTES))
    step = max(-(-size // count), 1)
    return [(start, min(start + step, size)) for start in range(0, size, step)]


def whole_lines(path: str) -> list[str]:
    """Every line of a whole file, ended as a cut file's are (:func:`text_lines`)."""
    with _open(path) as stream:
        return text_lines(stream.read().decode("utf-8", DECODING))


def text_lines(text: str) -> list[str]:
    """``text``'s lines as Hadoop's reader ends them: at ``\r\n``, ``\r`` or ``\n``
    only, no line after a final break, a leading byte order mark dropped. A JSON string
    may hold U+2028, U+2029 or U+0085 as they are, and ``str.splitlines`` (which the
    read of whole files used) ended a line there: the record came as two bad lines, and
    every line number after it was off. ``str.splitlines`` runs first (in C): when the
    only characters it took out were ``\r`` and ``\n`` (this tool's snapshots escape the
    others), its lines are these."""
    lines = text.splitlines()
    if sum(map(len, lines)) != len(text) - text.count("\n") - text.count("\r"):
        lines = _TEXT_DELIMITER.split(text)
        if lines and lines[-1] == "":
            lines.pop()
    if lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:]
    return lines


def range_lines(piece: Piece) -> Iterator[str]:
    """The lines of a cut file that belong to ``piece`` (blank lines included)."""
    end = piece.end if piece.end is not None else 0
    first = max(piece.start - 1, 0)  # the byte before: is a line break ending there ours?
    with _open(piece.path) as stream:
        if is_gzip(piece.path):
            end = 1 << 62  # never cut: the range is the whole stream
        else:
            stream.seek(first)
        for begins, line in _split(stream, first):
            if begins > 0 and begins - 1 >= end:
                return
            if begins == piece.start == 0:  # Hadoop drops a byte order mark there
                yield line.removeprefix(codecs.BOM_UTF8).decode("utf-8", DECODING)
            elif begins - 1 >= piece.start:
                yield line.decode("utf-8", DECODING)


def _open(path: str) -> BinaryIO:
    if is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")  # closed by the caller's with


def _split(stream: BinaryIO, offset: int) -> Iterator[tuple[int, bytes]]:
    """``(where it begins, line)`` of each line of ``stream`` (whose first byte is at
    ``offset`` in the file); a line ends at ``\\r\\n``, ``\\r`` or ``\\n``. The text before
    the first line break counts as a line beginning at ``offset``."""
    rest, at = b"", offset
    while block := stream.read(_BLOCK):
        text = rest + block
        done = 0
        for match in _DELIMITER.finditer(text):
            if match.end() == len(text) and text.endswith(b"\r"):
                break  # perhaps the first half of \r\n: wait for the next block
            yield at + done, text[done : match.start()]
            done = match.end()
        rest, at = text[done:], at + done
    done = 0
    for match in _DELIMITER.finditer(rest):
        yield at + done, rest[done : match.start()]
        done = match.end()
    if done < len(rest):
        yield at + done, rest[done:]
