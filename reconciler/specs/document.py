"""A spec document (plain values, each with its ``FILE:LINE``) and what stops reading one.

The readers: :mod:`.files` (the walk, one file's text), :mod:`.yaml_lines` and
:mod:`.json_lines` (the values with their lines), :mod:`.natscli_json` (the nats CLI's
files), all put together by :mod:`.loader`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.errors import Problem
from reconciler.locations import Location, closest_location

MAX_DEPTH = 64
MAX_DOCUMENTS = 50_000  # per file


@dataclass(frozen=True, init=False)
class Document:
    """One spec document: plain JSON-able values plus the location of each of them.
    Made by its own ``__init__`` (the dataclass's sets each field through
    ``object.__setattr__``; a repository's every document is made once or twice)."""

    body: dict[str, Any]
    source: Location
    locations: Mapping[str, Location] = field(default_factory=dict)
    #: the first line of the overlay document merged into this one, if any
    overlay: Location | None = None

    def __init__(
        self,
        body: dict[str, Any],
        source: Location,
        locations: Mapping[str, Location] | None = None,
        overlay: Location | None = None,
    ) -> None:
        fields = self.__dict__
        fields["body"] = body
        fields["source"] = source
        fields["locations"] = {} if locations is None else locations
        fields["overlay"] = overlay

    def where(self, path: str) -> Location:
        """The location of a field (or the closest enclosing one, or the document)."""
        return closest_location(self.locations, path, self.source)


class Abort(Exception):
    """Stops reading one document or file; carries the problem to report."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def file_problem(path: Path, message: str) -> Problem:
    return Problem(Location(str(path), 1), "", message)


#: How the loader reads one file (``loader.load_file``): its documents, its problems
#: appended to the list given.
ReadFile = Callable[[Path, list[Problem]], list[Document]]
#: One file's documents and the problems reading it found.
Loaded = tuple[list[Document], list[Problem]]


def read_one(path: Path, read_file: ReadFile) -> Loaded:
    """``path`` read by ``read_file``: its documents and its own problems."""
    found: list[Problem] = []
    return read_file(path, found), found
