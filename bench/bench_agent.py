"""The agent (`reconcile watch`): how fast drift made by another client is reported and
healed, against the interval-only fallback and raw baselines measured in the same run.

    python bench/bench_agent.py [--resources 100] [--trials 20] [--cycles 200]
    python bench/bench_agent.py --large          # 21,000 resources (7,000 streams x 3)

Prints, on a fresh nats-server (memory streams, half of the resources consumers):
- raw baselines: a raw subscriber's time from an out-of-band STREAM.UPDATE to its
  advisory (the floor of advisory-driven detection), and the raw paged STREAM.LIST +
  CONSUMER.LIST of the account (the floor of one poll);
- the agent's full re-plan time per cycle (median), and its ratio to the raw read;
- drift -> reported (observe) and drift -> healed (heal): median and p99 over
  ``--trials`` changes (another client updates one stream's description), with
  advisories and a targeted re-plan (the default), with advisories and a full re-plan,
  and with ``--no-advisories`` at ``--fallback-interval`` (a change lands at a random
  moment of the interval);
- the agent's idle CPU (process CPU seconds per wall second while nothing changes);
- RSS over ``--cycles`` full re-plans (first, last, max): flat means bounded.
The agent runs in this process (so CPU and RSS are the agent's and this script's
drifting client, which idles). Figures only: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats

from reconciler.agent.logs import Log
from reconciler.agent.loop import Agent, WatchSettings
from reconciler.agent.source import FixedSource
from reconciler.execution import run as engine
from reconciler.execution.requests import PlanRequest
from reconciler.jetstream import ConnectionOptions
from reconciler.jetstream.embedded import find_binary, free_port


def write_specs(folder: Path, resources: int) -> tuple[Path, list[str]]:
    """Streams with two consumers each (a third streams), memory storage."""
    streams = max(resources // 3, 1)
    target = folder / "specs"
    target.mkdir()
    names = [f"S{i:05d}" for i in range(streams)]
    for first in range(0, streams, 100):
        docs = []
        for name in names[first : first + 100]:
            docs.append(
                f"kind: Stream\nname: {name}\nsubjects: [{name.lower()}.>]\nstorage: memory\n"
                "description: declared\n"
            )
            for c in range(2):
                docs.append(f"kind: Consumer\nstream: {name}\nname: C{c}\nack_policy: explicit\n")
        (target / f"s{first // 100:04d}.yaml").write_text("---\n".join(docs), encoding="utf-8")
    return target, names


class TimedLog(Log):
    """The agent's log, noting when each change line was written."""

    def __init__(self) -> None:
        super().__init__("json", io.StringIO())
        self.seen: dict[tuple[str, str], float] = {}
        self.cycles: list[float] = []
        self.changed = asyncio.Event()

    def event(self, event: str, message: str = "", **fields: Any) -> None:
        if event == "change":
            self.seen[(str(fields.get("resource")), str(fields.get("state")))] = time.perf_counter()
            self.changed.set()
        self.out.seek(0)
        self.out.truncate()  # keep nothing: the bench measures memory too


@contextlib.asynccontextmanager
async def agent(
    specs: Path,
    url: str,
    *,
    mode: str,
    interval: float,
    advisories: bool = True,
    targeted: bool = True,
) -> AsyncIterator[tuple[Agent, TimedLog]]:
    options = ConnectionOptions(servers=url, timeout=60)
    log = TimedLog()
    the_agent = Agent(
        FixedSource(lambda root: PlanRequest.of([specs], options)),
        WatchSettings(
            interval=interval,
            mode="heal" if mode == "heal" else "observe",
            listen=None,
            advisories=advisories,
            targeted=targeted,
            lock_timeout=120,
        ),
        log,
    )
    task = asyncio.ensure_future(the_agent.run())
    try:
        while the_agent.watch.last is None:
            await asyncio.sleep(0.05)
        yield the_agent, log
    finally:
        the_agent.stop.set()
        await task


async def wait_for(log: TimedLog, key: tuple[str, str], after: float, patience: float) -> float:
    deadline = time.perf_counter() + patience
    while True:
        seen = log.seen.get(key)
        if seen is not None and seen >= after:
            return seen - after
        if time.perf_counter() > deadline:
            raise TimeoutError(f"no {key} within {patience:g}s")
        log.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(log.changed.wait(), 0.5)


async def set_description(nc: Any, name: str, text: str) -> None:
    info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=30)).data)
    config = info["config"]
    config["description"] = text
    reply = await nc.request(
        f"$JS.API.STREAM.UPDATE.{name}", json.dumps(config).encode(), timeout=30
    )
    assert b'"error"' not in reply.data, reply.data


chance = random.Random(33)


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


async def drift_latency(
    specs: Path,
    url: str,
    names: list[str],
    *,
    mode: str,
    trials: int,
    interval: float,
    advisories: bool,
    targeted: bool,
) -> list[float]:
    """Seconds from another client's update to the agent's line (drifted, or healed)."""
    state = "healed" if mode == "heal" else "drifted"
    samples = []
    nc = await nats.connect(url, name="bench-other")
    try:
        async with agent(
            specs, url, mode=mode, interval=interval, advisories=advisories, targeted=targeted
        ) as (
            _,
            log,
        ):
            for trial in range(trials):
                if not advisories:  # a change lands anywhere in the interval, not just after a plan
                    await asyncio.sleep(chance.uniform(0, interval))
                name = names[(trial * 7919) % len(names)]
                start = time.perf_counter()
                await set_description(nc, name, f"changed {trial}")
                took = await wait_for(log, (f"Stream {name}", state), start, 4 * interval + 120)
                samples.append(took)
                if mode == "observe":
                    await set_description(nc, name, "declared")
                    await wait_for(log, (f"Stream {name}", "in_sync"), start, 4 * interval + 120)
    finally:
        await nc.close()
    return samples


async def raw_advisory_latency(url: str, names: list[str], trials: int) -> list[float]:
    watcher = await nats.connect(url)
    other = await nats.connect(url, name="bench-other")
    arrived: asyncio.Queue[float] = asyncio.Queue()

    async def on_msg(msg: Any) -> None:
        if b"STREAM.UPDATE" in msg.data:
            arrived.put_nowait(time.perf_counter())

    await watcher.subscribe("$JS.EVENT.ADVISORY.API", cb=on_msg)
    await watcher.flush()
    samples = []
    for trial in range(trials):
        name = names[trial % len(names)]
        start = time.perf_counter()
        await set_description(other, name, "raw")
        samples.append(await asyncio.wait_for(arrived.get(), 30) - start)
        await set_description(other, name, "declared")
        await asyncio.wait_for(arrived.get(), 30)
    await watcher.close()
    await other.close()
    return samples


async def raw_read(url: str, names: list[str]) -> float:
    """The raw paged STREAM.LIST and every stream's CONSUMER.LIST (64 in flight)."""
    nc = await nats.connect(url)
    start = time.perf_counter()
    offset, total = 0, 1
    while offset < total:
        reply = json.loads(
            (
                await nc.request(
                    "$JS.API.STREAM.LIST", json.dumps({"offset": offset}).encode(), timeout=60
                )
            ).data
        )
        total = reply["total"]
        offset += len(reply.get("streams") or []) or total
    limit = asyncio.Semaphore(64)

    async def consumers(name: str) -> None:
        async with limit:
            await nc.request(f"$JS.API.CONSUMER.LIST.{name}", b'{"offset": 0}', timeout=60)

    await asyncio.gather(*(consumers(n) for n in names))
    took = time.perf_counter() - start
    await nc.close()
    return took


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def idle_and_memory(specs: Path, url: str, idle: float, cycles: int, read: float) -> None:
    async with agent(specs, url, mode="heal", interval=3600) as (the_agent, _):
        cpu, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        await asyncio.sleep(idle)
        after = resource.getrusage(resource.RUSAGE_SELF)
        used = (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime)
        share = 100 * used / (time.perf_counter() - wall)
        print(f"  idle CPU over {idle:g}s (interval 1h): {share:.2f} %")
    async with agent(specs, url, mode="heal", interval=0.01) as (the_agent, _):
        start = the_agent.watch.cycles
        before = resource.getrusage(resource.RUSAGE_SELF)
        rss = [rss_mib()]
        times = []
        while the_agent.watch.cycles < start + cycles:
            seen = the_agent.watch.cycles
            await asyncio.sleep(0.01)
            if the_agent.watch.cycles != seen and the_agent.watch.last is not None:
                times.append(the_agent.watch.last.finished_at - the_agent.watch.last.started_at)
                if the_agent.watch.cycles % max(cycles // 20, 1) == 0:
                    rss.append(rss_mib())
        rss.append(rss_mib())
        after = resource.getrusage(resource.RUSAGE_SELF)
    spent = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    per_cycle = statistics.median(times)
    print(
        f"  CPU per full cycle: {spent / cycles:.3f} s (with the default 1m interval: "
        f"{100 * spent / cycles / 60:.1f} % of a core)"
    )
    print(
        f"  full re-plan per cycle (median of {len(times)}): {per_cycle:.3f} s"
        f"  ({per_cycle / read:.1f}x the raw read)"
    )
    print(
        f"  RSS over {cycles} cycles: first {rss[0]:.0f} MiB, last {rss[-1]:.0f} MiB, "
        f"max {max(rss):.0f} MiB"
    )


def show(label: str, samples: list[float], floor: float) -> None:
    median, p99 = quantiles(samples)
    print(
        f"  {label:<46} median {median * 1000:8.1f} ms  p99 {p99 * 1000:8.1f} ms"
        f"  ({median / floor:6.1f}x the raw floor)"
    )


async def main(args: argparse.Namespace) -> None:
    resources = 21_000 if args.large else args.resources
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        port = free_port()
        server = subprocess.Popen(
            [
                str(find_binary()),
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                str(port),
                "-sd",
                str(folder / "js"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"nats://127.0.0.1:{port}"
        try:
            await asyncio.sleep(0.5)
            specs, names = write_specs(folder, resources)
            options = ConnectionOptions(servers=url, timeout=60)
            await engine.apply([specs], options, approved=True, lock_timeout=120)
            print(f"{len(names) * 3} resources ({len(names)} streams), nats-server at {url}")
            raw_adv = await raw_advisory_latency(url, names, args.trials)
            read = min([await raw_read(url, names) for _ in range(3)])
            floor = statistics.median(raw_adv)
            print(f"  raw: update -> its API audit advisory   median {floor * 1000:8.1f} ms")
            print(f"  raw: paged STREAM.LIST + CONSUMER.LIST (best of 3) {read:.3f} s")
            ways = [
                ("advisories, targeted re-plan", True, True, args.interval, args.trials),
                ("advisories, full re-plan", True, False, args.interval, args.trials),
                (
                    f"interval only ({args.fallback_interval:g}s)",
                    False,
                    False,
                    args.fallback_interval,
                    max(args.trials // 4, 3),
                ),
            ]
            for label, advisories, targeted, interval, trials in [] if args.cycles_only else ways:
                for mode in ("observe", "heal"):
                    found = await drift_latency(
                        specs,
                        url,
                        names,
                        mode=mode,
                        trials=trials,
                        interval=interval,
                        advisories=advisories,
                        targeted=targeted,
                    )
                    verb = "healed" if mode == "heal" else "reported"
                    show(f"{mode} -> {verb}: {label}", found, floor)
            await idle_and_memory(specs, url, args.idle, args.cycles, read)
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resources", type=int, default=100)
    parser.add_argument("--large", action="store_true", help="21,000 resources")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--interval", type=float, default=60.0, help="the agent's interval")
    parser.add_argument("--fallback-interval", type=float, default=5.0)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU")
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--cycles-only", action="store_true", help="idle CPU, cycles, RSS")
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
