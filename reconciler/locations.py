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
    101,000 documents a Location and a line number per field were 30 MiB.

    Once the document is read (:meth:`freeze`), a small one keeps its distances as a tuple
    beside a tuple of its paths that documents with the same fields share: a dict of
    six fields was 360 bytes a document, the tuple 88 (101,000 documents: 25 MiB)."""

    __slots__ = ("_file", "_lines", "_paths", "_start")

    def __init__(self, file: str, start: int) -> None:
        self._file = file
        self._start = start
        self._raw = {}
        self._paths: tuple[str, ...] | None = None
        self._lines: tuple[int, ...] = ()

    @classmethod
    def read(cls, file: str, start: int, distances: dict[str, int]) -> Lines:
        """A document's lines gathered by its reader (each path -> its line's distance
        from ``start``; the dict is taken, not copied), frozen."""
        lines = cls.__new__(cls)
        lines._file = file
        lines._start = start
        lines._raw = distances
        lines._paths = None
        lines._lines = ()
        lines.freeze()
        return lines

    def add(self, path: str, line: int, *, again: bool = True) -> None:
        """``path`` is at ``line``; ``again``: replacing where it was before."""
        if self._paths is not None:
            raise RuntimeError("Lines.add after freeze")
        if again or path not in self._raw:
            self._raw[path] = line - self._start

    def freeze(self) -> None:
        """Keep the lines compactly from now on (nothing is added after)."""
        raw = self._raw
        if not raw or len(raw) > _COMPACT_UP_TO or self._paths is not None:
            return  # a large document keeps its dict: a path is found without a search
        paths = tuple(raw)
        if len(_SHARED_PATHS) > 10_000:
            _SHARED_PATHS.clear()
        self._paths = _SHARED_PATHS.setdefault(paths, paths)
        self._lines = tuple(raw.values())
        self._raw = _FROZEN

    @property
    def file(self) -> str:
        """The file every one of these lines is in."""
        return self._file

    def packed(self) -> tuple[int, tuple[str, ...] | dict[str, int], tuple[int, ...] | None]:
        """What :meth:`unpacked` makes these lines again from (plain values: marshal
        takes them): the start, and the paths and their distances (a dict of the
        distances where the lines are kept so)."""
        if self._paths is None:
            return self._start, dict(self._raw), None
        return self._start, self._paths, self._lines

    @classmethod
    def unpacked(
        cls,
        file: str,
        packed: tuple[int, tuple[str, ...] | dict[str, int], tuple[int, ...] | None],
    ) -> Lines:
        """The lines :meth:`packed` gave, of ``file`` (frozen, as they were)."""
        start, paths, lines = packed
        if isinstance(paths, dict):
            return cls.read(file, start, dict(paths))
        if lines is None:
            raise TypeError("packed lines without their distances")
        made = cls.__new__(cls)
        made._file = file
        made._start = start
        made._raw = _FROZEN
        if len(_SHARED_PATHS) > 10_000:
            _SHARED_PATHS.clear()
        made._paths = _SHARED_PATHS.setdefault(paths, paths)
        made._lines = lines
        return made

    def __contains__(self, path: object) -> bool:
        paths = self._paths
        return path in (self._raw if paths is None else paths)

    def __iter__(self) -> Iterator[str]:
        paths = self._paths
        return iter(self._raw if paths is None else paths)

    def __len__(self) -> int:
        paths = self._paths
        return len(self._raw if paths is None else paths)

    def __getitem__(self, path: str) -> Location:
        paths = self._paths
        if paths is None:
            return Location(self._file, self._start + self._raw[path])
        try:
            offset = self._lines[paths.index(path)]
        except ValueError:
            raise KeyError(path) from None
        return Location(self._file, self._start + offset)


#: The most fields a frozen :class:`Lines` keeps as tuples (a path is found by a search).
_COMPACT_UP_TO = 32
#: The path tuples of frozen Lines, one object for each set of fields in order.
_SHARED_PATHS: dict[tuple[str, ...], tuple[str, ...]] = {}
#: The dict of every frozen Lines (empty: its paths and lines are the tuples).
_FROZEN: dict[str, Any] = {}


def closest_location(locations: Mapping[str, Location], path: str, default: Location) -> Location:
    """Where a dotted field path came from, or its closest enclosing field, or ``default``."""
    while path:
        if path in locations:
            return locations[path]
        path = path.rpartition(".")[0]
    return default
