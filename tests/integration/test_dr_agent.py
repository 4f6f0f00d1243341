"""The agent (`reconcile watch --env west`) exports each standby pair's health as metrics
and logs a pair that is not healthy (docs/dr.md#2-watch-each-pairs-health); it never fails over."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nats
from agent_harness import Other, changes, cycles_after, lines, running_agent, until
from servers import NatsServer
from test_dr_standby import applied, dr_project, mirrored
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


async def _forging(url: str, answered: list[str]) -> Any:
    """A client of the standby's account (no JetStream there) answering its STREAM.INFO
    with what no server sends (``state`` a number, ``config`` text); closed by the caller."""
    forger = await nats.connect(url)

    async def forge(msg: Any) -> None:
        answered.append(msg.subject)
        await msg.respond(json.dumps({"state": 7, "config": "x"}).encode())

    await forger.subscribe("$JS.west.API.STREAM.INFO.>", cb=forge)
    return forger


def _east_watched(server_factory: Callable[..., NatsServer], tmp_path: Path, *, apply: bool) -> Any:
    """east (JetStream, domain east; applied first when ``apply``) and west (an account
    without JetStream): the source of an agent of east, and west."""
    east = server_factory(domain="east")
    west = server_factory(jetstream=False)
    root = dr_project(tmp_path, east, west)
    if apply:
        applied(root, "east")
    project = load_project(root / "reconcile.yaml")
    target = environment_target(project, "east", ConnectionOptions(), "shop")
    return FixedSource(lambda _: PlanRequest.for_target(target)), west


def test_a_standby_answering_what_no_server_sends_never_fails_the_primarys_cycles(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The standby's account has no JetStream and a client there answers its STREAM.INFO
    with what no server sends: that pair is unread (its metrics and a log line say so);
    the cycles of the primary, another environment on its own server, still succeed.
    They failed at each full cycle (an AttributeError reading the pair's health): no
    drift reported, /readyz 503, every advisory's plan a full one."""
    source, west = _east_watched(server_factory, tmp_path, apply=True)

    async def watch() -> None:
        answered: list[str] = []
        forger = await _forging(west.url, answered)
        try:
            async with running_agent(source, mode="observe", interval=0.5) as (agent, log):
                await cycles_after(agent, 3)
                assert answered  # the pair's health was asked on west
                last = agent.watch.last
                assert last is not None and last.ok, last and last.error
                registry = agent.metrics.registry
                labels = {"stream": "ORDERS"}
                assert registry.get_sample_value("reconcile_standby_healthy", labels) == 0
                assert registry.get_sample_value("reconcile_standby_lag_messages", labels) == -1
                said = [line for line in lines(log) if line["event"] == "standby"]
                assert said and "west could not be read" in said[-1]["message"]
        finally:
            await forger.close()

    asyncio.run(watch())


def test_a_standby_answering_what_no_server_sends_never_stops_the_primarys_heal(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The same standby while the primary's stream is missing: the plan asks the standby
    whether its stream takes writes (promoted); a reply no server sends is a standby that
    could not be read (the plan says it was not checked), as one that is down: the
    primary's stream is made. The plan failed, and east was never healed."""
    source, west = _east_watched(server_factory, tmp_path, apply=False)

    async def watch() -> None:
        answered: list[str] = []
        forger = await _forging(west.url, answered)
        try:
            async with running_agent(source, mode="heal", interval=0.5) as (agent, log):
                await until(
                    lambda: changes(log, "Stream ORDERS", "healed"),
                    what="ORDERS made in east",
                )
                assert answered
                await cycles_after(agent, 1)
                last = agent.watch.last
                assert last is not None and last.ok, last and last.error
        finally:
            await forger.close()

    asyncio.run(watch())


class _Hanging:
    """A listener on 127.0.0.1 that takes every TCP connection and never answers (a
    standby's server that hangs): ``accepted`` counts the connections taken, ``closed``
    those the client closed since."""

    def __init__(self) -> None:
        self.accepted = 0
        self.closed = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            try:
                while await reader.read(4096):  # whatever the client says: no answer
                    pass
            except ConnectionError:
                pass
            self.closed += 1
            writer.close()

        self.server = await asyncio.start_server(held, "127.0.0.1", 0)
        return f"nats://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


def test_a_standby_that_hangs_never_delays_the_primarys_cycles(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """west, the standby, takes the TCP connection and never answers. Each full cycle of
    east, the primary, read the pair's health on a new connection to west and waited for
    it up to the connect timeout (60 s here) before its report: a consumer deleted in
    east was healed and said only then, at every interval. The pairs are read in a task
    of their own now: east's cycles plan, heal and report while west's connection hangs
    (none of the connections west took was given up meanwhile)."""
    east = server_factory(domain="east")
    refused = SimpleNamespace(url="nats://127.0.0.1:1")  # the apply's west: refused at once
    root = dr_project(tmp_path, east, refused)  # type: ignore[arg-type]
    applied(root, "east")

    async def watch() -> None:
        west = _Hanging()
        root_now = dr_project(tmp_path, east, SimpleNamespace(url=await west.start()))  # type: ignore[arg-type]
        project = load_project(root_now / "reconcile.yaml")
        base = ConnectionOptions(connect_timeout=60.0)
        target = environment_target(project, "east", base, "shop")
        source = FixedSource(lambda _: PlanRequest.for_target(target))
        settings = {"interval": 0.5, "advisories": False}  # every cycle a full one
        try:
            async with running_agent(source, mode="heal", **settings) as (agent, log):
                await until(lambda: west.accepted, what="the pair's health asked of west")
                async with Other.connect(east.url) as alice:
                    await alice.api("CONSUMER.DELETE.ORDERS.shipper")
                await until(
                    lambda: changes(log, "Consumer ORDERS/shipper", "healed"),
                    what="shipper healed in east while west hangs",
                )
                await cycles_after(agent, 2)
                assert west.accepted and not west.closed  # still waiting on west meanwhile
                last = agent.watch.last
                assert last is not None and last.ok, last and last.error
                standby = agent.watch.status()["standby"]
                assert standby["reading_since"] is not None and standby["read_at"] is None
        finally:
            assert west.server is not None
            west.server.close()

    asyncio.run(watch())


def test_a_busy_account_still_reads_the_pairs_every_interval(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Pairs are read by full cycles only; an advisory's cycle is targeted, and each
    cycle began the interval again. An account whose applications make a consumer more
    often than the interval (a KV watcher, an ordered consumer) never had a full cycle
    again: the pairs went unread, then were shown unread (healthy 0, lag -1) while the
    pair was healthy, and drift no advisory names was never found. Now a full cycle
    comes every interval, however many targeted ones come between."""
    _, west, root = mirrored(server_factory, tmp_path, 5)
    project = load_project(root / "reconcile.yaml")
    target = environment_target(project, "west", ConnectionOptions(), "shop")
    source = FixedSource(lambda _: PlanRequest.for_target(target))

    def full_plans(agent: Any) -> float:
        labels = {"scope": "full"}
        found = agent.metrics.registry.get_sample_value(
            "reconcile_plan_duration_seconds_count", labels
        )
        return float(found or 0)

    def targeted_plans(agent: Any) -> float:
        labels = {"scope": "targeted"}
        found = agent.metrics.registry.get_sample_value(
            "reconcile_plan_duration_seconds_count", labels
        )
        return float(found or 0)

    async def watch() -> None:
        async with running_agent(source, mode="observe", interval=1.0) as (agent, _):
            await cycles_after(agent, 1)
            nc = await nats.connect(west.url)
            stop = asyncio.Event()

            async def busy() -> None:  # an application's short-lived consumers
                body = {"stream_name": "ORDERS", "config": {"ack_policy": "none"}}
                while not stop.is_set():
                    await nc.request(
                        "$JS.API.CONSUMER.CREATE.ORDERS", json.dumps(body).encode(), timeout=5
                    )
                    await asyncio.sleep(0.1)

            making = asyncio.ensure_future(busy())
            try:
                await until(lambda: targeted_plans(agent) >= 1, what="a targeted cycle")
                full = full_plans(agent)
                await until(lambda: full_plans(agent) > full, what="a full cycle meanwhile")
            finally:
                stop.set()
                await making
                await nc.close()

    asyncio.run(watch())
