"""An in-process `reconcile watch` agent for the agent tests, and another client to make
drift with (nats-py, raw JSON API, its own connect name)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats

from reconciler.agent.logs import Log
from reconciler.agent.loop import Agent, WatchSettings
from reconciler.agent.source import FixedSource, Source
from reconciler.execution.requests import PlanRequest
from reconciler.jetstream import ConnectionOptions

#: How long a test waits for the agent to see something (a bound, never a measurement).
PATIENCE = 30.0

ORDERS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_msgs: 1000
description: orders as declared
---
kind: Consumer
stream: ORDERS
name: worker
ack_policy: explicit
"""


def fixed_source(paths: list[Path], url: str) -> FixedSource:
    options = ConnectionOptions(servers=url)
    return FixedSource(lambda root: PlanRequest.of(paths, options))


@contextlib.asynccontextmanager
async def running_agent(
    source: Source, *, mode: str = "heal", interval: float = 1.0, **settings: Any
) -> AsyncIterator[tuple[Agent, io.StringIO]]:
    """The agent running in this loop (JSON log into a buffer), stopped at exit."""
    log = io.StringIO()
    agent = Agent(
        source,
        WatchSettings(
            interval=interval,
            mode="heal" if mode == "heal" else "observe",
            listen=settings.pop("listen", ("127.0.0.1", 0)),
            **settings,
        ),
        Log("json", log),
    )
    task = asyncio.ensure_future(agent.run())
    try:
        yield agent, log
    finally:
        agent.stop.set()
        await asyncio.wait_for(task, 15)


def lines(log: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.getvalue().splitlines() if line.strip()]


def changes(log: io.StringIO, resource: str, state: str) -> list[dict[str, Any]]:
    return [
        line
        for line in lines(log)
        if line["event"] == "change" and line["resource"] == resource and line["state"] == state
    ]


async def until(check: Callable[[], Any], *, what: str, patience: float = PATIENCE) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while True:
        found = check()
        if found:
            return found
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        await asyncio.sleep(0.05)


async def cycles_after(agent: Agent, n: int = 2) -> None:
    """Wait until ``n`` more cycles have finished."""
    start = agent.watch.cycles
    await until(lambda: agent.watch.cycles >= start + n, what=f"{n} more cycles")


class Other:
    """Another client (as a person's laptop would be): raw JetStream API over nats-py."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(cls, url: str, name: str = "alice-laptop") -> AsyncIterator[Other]:
        nc = await nats.connect(url, name=name, allow_reconnect=False, max_reconnect_attempts=0)
        try:
            yield cls(nc)
        finally:
            await nc.close()

    async def api(self, op: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = b"" if body is None else json.dumps(body).encode()
        reply = await self.nc.request(f"$JS.API.{op}", payload, timeout=5)
        answer: dict[str, Any] = json.loads(reply.data)
        assert "error" not in answer, answer
        return answer

    async def info(self, stream: str) -> dict[str, Any]:
        return await self.api(f"STREAM.INFO.{stream}")

    async def messages(self, stream: str) -> int:
        return int((await self.info(stream))["state"]["messages"])

    async def publish(self, subject: str, n: int) -> None:
        for i in range(n):
            await self.nc.request(subject, f"m{i}".encode(), timeout=5)
