"""An agent's log is the program's: the copies each environment logs through
(``Log.bound``: its name on every line; ``Log.showing``: a git tree's paths as the
repository's) are of the log's own class and share its state. ``showing`` made a plain
``Log``: a program passing a log of its own (bench_agent.py's, which notes when each
change was healed) was told nothing, and waited for a heal it never heard of."""

from __future__ import annotations

import io
from typing import Any

import pytest

from reconciler.agent.logs import Log

pytestmark = pytest.mark.unit


class Noting(Log):
    def __init__(self) -> None:
        super().__init__("json", io.StringIO())
        self.heard: list[tuple[str, str, dict[str, Any]]] = []

    def event(self, event: str, message: str = "", **fields: Any) -> None:
        self.heard.append((event, message, fields))
        super().event(event, message, **fields)


def test_an_environments_log_is_the_programs_log_told_everything() -> None:
    log = Noting()
    theirs = log.showing(lambda text: text.replace("/cache/trees/abc/", "")).bound(env="prod")
    assert isinstance(theirs, Noting)
    theirs.event("change", "healed /cache/trees/abc/orders.yaml:4", resource="Stream ORDERS")
    assert [event for event, _, _ in log.heard] == ["change"]
    written = log.out.getvalue()
    assert '"env": "prod"' in written and "orders.yaml:4" in written
    assert "/cache/trees/abc/" not in written
    assert log.showing(str).bound(env=None)._bound == {}  # None: left out, as before
