"""The agent's standby pairs as last read (``agent.standby``): shown with when they were
read, and unread once no read came for twice the interval plus the read's deadline."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import time
import warnings
from types import SimpleNamespace

import pytest

from reconciler.agent import standby
from reconciler.agent.logs import Log
from reconciler.agent.metrics import Metrics
from reconciler.agent.standby import PairReads
from reconciler.execution.pair_reads import SidedHealth
from reconciler.model.standby import PairHealth


def test_a_pair_not_read_for_too_long_is_shown_unread_with_when_it_was_read() -> None:
    metrics, out = Metrics(), io.StringIO()
    reads = PairReads(Log("json", out), metrics.of(None), interval=60.0)
    reads.deadline = 10.0
    healthy = PairHealth("ORDERS", 25, 25, 0, 0.5)
    read_at = time.time() - 100
    reads.pairs, reads.read_at = [SidedHealth("east", "west", healthy)], read_at
    metrics.of(None).set_standby([healthy], read_at=read_at)

    def sample(name: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"stream": "ORDERS"})

    reads.expire()  # 100 s old: within 2 x 60 + 10
    assert sample("reconcile_standby_healthy") == 1
    shown = reads.to_json()
    assert shown["stale"] is False and shown["read_at"]
    assert shown["pairs"][0]["healthy"] is True

    reads.read_at = read_at = time.time() - 131
    reads.expire()
    assert sample("reconcile_standby_healthy") == 0
    assert sample("reconcile_standby_lag_messages") == -1
    assert sample("reconcile_standby_read_timestamp_seconds") == read_at
    shown = reads.to_json()
    assert shown["stale"] is True and shown["pairs"][0]["healthy"] is False
    reads.expire()  # said once
    said = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["event"] for line in said] == ["standby"]


def test_an_agent_stopping_before_the_read_starts_leaves_no_coroutine_never_awaited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full cycle starts the pairs' read, and the agent stops before the read's task has
    run a step (SIGTERM at that moment): the read's coroutine, made before its task, was
    never awaited, a RuntimeWarning at exit. It is made in the task now: not made at all."""
    made: list[str] = []

    async def read(*_args: object, **_kwargs: object) -> list[SidedHealth]:
        made.append("read")
        return []

    monkeypatch.setattr(standby, "pairs_health", read)
    options = SimpleNamespace(connect_timeout=1.0, timeout=1.0)
    request = SimpleNamespace(project=object(), env="east", options=options, owner="o")

    async def stopped_at_once() -> None:
        reads = PairReads(Log("json", io.StringIO()), Metrics().of(None), interval=60.0)
        reads.start(request, [])  # type: ignore[arg-type]
        await reads.close()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(stopped_at_once())
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
    assert made == []
