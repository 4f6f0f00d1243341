"""An attacker and a careless operator against one `reconcile watch` process serving
many environments (issue 42, "Many NATS systems"): a server that stops answering while
the agent is connected, a server that takes the connection and fails every cycle."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agent_harness import (
    get,
    lines,
    orders_healed_in,
    project_sources,
    running_agent,
    until,
)
from prometheus_client.parser import text_string_to_metric_families
from test_agent_envs import _project

pytestmark = pytest.mark.slow  # attack runs: .ci/run's second stage


async def _connected(agent: Any) -> dict[str, float]:
    """``reconcile_connected`` by environment, from /metrics."""
    text = (await get(agent, "/metrics"))[1].decode()
    return {
        sample.labels["env"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "reconcile_connected"
        for sample in family.samples
    }


def test_a_server_without_jetstream_is_retried_with_the_backoff_not_every_second(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """``nojs``'s server takes the connection and fails every cycle (JetStream is off):
    each attempt opened a connection, reset the failure count and failed, so it was
    tried again every ``first_backoff`` forever (a new connection each time, the 1 s of
    docs/agent.md never doubling). The failures now grow (1, 2, 3, ...) and so does the
    wait; the server saw one connection per attempt, no more."""
    servers = {"good": server_factory(), "nojs": server_factory(jetstream=False)}
    sources = project_sources(_project(tmp_path, servers))

    def attempts(log: Any) -> list[int]:
        return [
            int(line["failures"])
            for line in lines(log)
            if line["event"] == "error" and line.get("env") == "nojs"
        ]

    async def scenario() -> None:
        async with running_agent(sources, mode="heal", interval=60.0, first_backoff=0.1) as (
            agent,
            log,
        ):
            await orders_healed_in(log, ["good"])
            await until(lambda: len(attempts(log)) >= 4, what="four attempts on nojs")
            assert attempts(log)[:4] == [1, 2, 3, 4], attempts(log)
            assert agent.watches["nojs"]._backoff() >= 0.8  # 0.1 s doubled three times
            varz = await asyncio.to_thread(servers["nojs"].monitor, "varz")
            assert varz["total_connections"] <= len(attempts(log)) + 1
            status = json.loads((await get(agent, "/status"))[1])["environments"]["nojs"]
            assert status["ready"] is False and status["error"]
            assert "JetStream" in status["error"]

    run(scenario())
