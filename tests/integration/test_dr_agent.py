"""The agent (`reconcile watch --env west`) exports each standby pair's health as metrics
and logs a pair that is not healthy (docs/dr.md#2-watch-each-pairs-health); it never fails over."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from agent_harness import cycles_after, lines, running_agent, until
from servers import NatsServer
from test_dr_standby import mirrored
from test_lifecycle import _info

from reconciler.agent.source import FixedSource
from reconciler.execution.environments import environment_target
from reconciler.execution.requests import PlanRequest
from reconciler.jetstream import ConnectionOptions
from reconciler.specs.project import load_project


def test_the_agent_exports_pair_health_and_reports_a_lost_origin(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    east, west, root = mirrored(server_factory, tmp_path, 12)
    project = load_project(root / "reconcile.yaml")
    target = environment_target(project, "west", ConnectionOptions(), "shop")
    source = FixedSource(lambda _: PlanRequest.for_target(target))

    def sample(name: str, agent: object) -> float | None:
        registry = agent.metrics.registry  # type: ignore[attr-defined]
        value = registry.get_sample_value(name, {"stream": "ORDERS"})
        return None if value is None else float(value)

    async def watch() -> None:
        async with running_agent(source, mode="observe", interval=0.5) as (agent, log):
            await cycles_after(agent, 2)
            assert sample("reconcile_standby_healthy", agent) == 1
            assert sample("reconcile_standby_lag_messages", agent) == 0
            seen = sample("reconcile_standby_seconds_since_active", agent)
            assert seen is not None and seen >= 0
            east.stop()
            await until(
                lambda: sample("reconcile_standby_healthy", agent) == 0,
                what="the pair reported unhealthy",
            )
            assert sample("reconcile_standby_lag_messages", agent) == -1  # east unread
            said = [line for line in lines(log) if line["event"] == "standby"]
            assert said and "east could not be read" in said[-1]["message"]
            await cycles_after(agent, 2)

    asyncio.run(watch())
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"  # no failover
