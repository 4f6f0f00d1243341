"""Where a value came from: :class:`Location` (a file and a line), the location maps of
a document's fields (:class:`Lines`, kept compactly) and :func:`closest_location`.

Problems and exceptions that name a location live in :mod:`reconciler.errors`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True, slots=True)
class Location:
    """Where a value came from: a file and a 1-based line."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class LazyLocations(Mapping[str, Location]):
    """Field locations kept compactly in ``_raw`` (by path), each made a
    :class:`Location` when it is read (``__getitem__``, per kind of map): a plan reads
    a few of 100,000 specs' locations."""

    __slots__ = ("_raw",)

    _raw: dict[str, Any]

    def __contains__(self, path: object) -> bool:
        return path in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


class Lines(LazyLocations):
    """The locations of one document's fields, all in one file: each kept as its line's
    distance from ``start`` (a small integer, one object the interpreter shares). At
    101,000 documents a Location and a line number per field were 30 MiB."""

    __slots__ = ("_file", "_start")

    def __init__(self, file: str, start: int) -> None:
        self._file = file
        self._start = start
        self._raw = {}

    def add(self, path: str, line: int, *, again: bool = True) -> None:
        """``path`` is at ``line``; ``again``: replacing where it was before."""
        if again or path not in self._raw:
            self._raw[path] = line - self._start

    def __getitem__(self, path: str) -> Location:
        return Location(self._file, self._start + self._raw[path])


def closest_location(locations: Mapping[str, Location], path: str, default: Location) -> Location:
    """Where a dotted field path came from, or its closest enclosing field, or ``default``."""
    while path:
        if path in locations:
            return locations[path]
        path = path.rpartition(".")[0]
    return default
