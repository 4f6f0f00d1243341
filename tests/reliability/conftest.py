"""Figures for RELIABILITY.md: tests add counts (faults survived, rounds run, inputs tried,
messages checked) with the ``figures`` fixture; when ``RELIABILITY_FIGURES`` names a file,
each count is appended to it as one JSON line ``{"test", "figure", "value"}`` and
``bench/reliability_report.py`` sums them up.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest


class Figures:
    def __init__(self, test: str) -> None:
        self.test = test
        self.counts: dict[str, int] = {}

    def add(self, figure: str, value: int = 1) -> None:
        self.counts[figure] = self.counts.get(figure, 0) + value

    def flush(self) -> None:
        target = os.environ.get("RELIABILITY_FIGURES")
        if not target or not self.counts:
            return
        with Path(target).open("a", encoding="utf-8") as out:
            for figure, value in sorted(self.counts.items()):
                out.write(json.dumps({"test": self.test, "figure": figure, "value": value}) + "\n")


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    counts = Figures(request.node.nodeid)
    yield counts
    counts.flush()
