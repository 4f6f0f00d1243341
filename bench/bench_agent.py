"""The agent (`reconcile watch`): how fast drift made by another client is reported and
healed, what a full re-plan costs against the raw read, and its memory over cycles, against
raw baselines measured in the same run.

    python bench/bench_agent.py [--resources 100] [--trials 20] [--cycles 200]
    python bench/bench_agent.py --large          # 21,000 resources (7,000 streams x 3)
    python bench/bench_agent.py --huge           # 101,000 (1,000 streams x 100 consumers)

Prints, on a fresh nats-server (memory streams):
- raw baselines: a raw subscriber's time from an out-of-band STREAM.UPDATE to its
  advisory (the floor of advisory-driven detection), and the raw paged STREAM.LIST +
  CONSUMER.LIST of the account, 32 streams at a time (the floor of one poll);
- turns (``--turns``): each runs the raw read and one full re-plan of the running agent
  (heal mode, one connection, the specs it validated at start), in a rotating order, then
  its share of ``--trials`` changes (another client updates one stream's description)
  healed with advisories and a targeted re-plan. Printed: change -> healed median and
  p99 (goal < 1 s), the full re-plan against the raw read as the median of the turns'
  ratios (goal <= 3x), and VmRSS after the first and the last of the cycles the turns ran
  (goal: flat over 100 cycles or more);
- unless ``--huge`` (or with ``--ways``): drift -> reported (observe) and drift -> healed
  with advisories and a targeted re-plan, with a full re-plan, and with
  ``--no-advisories`` at ``--fallback-interval`` (a change lands at a random moment);
- the agent's idle CPU (process CPU seconds per wall second while nothing changes);
- with ``--cycles`` (default 200, 0 with ``--huge``): RSS over that many full re-plans
  back to back (first, last, max).
``--huge`` writes specs the way a repository holds them: one file per stream with its
consumers, ``max_age`` and ``filter_subject`` set. The agent runs in this process (so CPU
and RSS are the agent's and this script's drifting client, which idles). Figures only:
nothing here asserts a time.
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
from bench_process import RAW_READ

from reconciler.agent.cycles import Watch
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


def write_repository(folder: Path, streams: int, per_stream: int) -> tuple[Path, list[str]]:
    """Specs as a repository holds them: one file per stream with its consumers,
    ``max_age`` and ``filter_subject`` set (memory storage)."""
    target = folder / "specs"
    target.mkdir()
    names = [f"S{i:05d}" for i in range(streams)]
    for name in names:
        subject = name.lower()
        docs = [
            f"kind: Stream\nname: {name}\nsubjects: [{subject}.>]\nstorage: memory\n"
            "max_age: 7d\ndescription: declared\n"
        ]
        for c in range(per_stream):
            docs.append(
                f"kind: Consumer\nstream: {name}\nname: C{c:03d}\nack_policy: explicit\n"
                f"filter_subject: {subject}.c{c:03d}\n"
            )
        (target / f"{subject}.yaml").write_text("---\n".join(docs), encoding="utf-8")
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


_RAW: dict[str, Any] = {}
exec(RAW_READ, _RAW)  # defines read(nc)


async def raw_read(url: str) -> float:
    """The raw read of the account (``bench_process.RAW_READ``, the raw list process's
    own: nats-py and json only), on a connection of its own opened before the clock
    starts."""
    nc = await nats.connect(url)
    start = time.perf_counter()
    await _RAW["read"](nc)
    took = time.perf_counter() - start
    await nc.close()
    return took


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def back_to_back(specs: Path, url: str, cycles: int, read: float) -> None:
    """``cycles`` full re-plans back to back (interval 10 ms): CPU, time and RSS."""
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


def full_plans(the_agent: Agent) -> int:
    """Full plans the agent has made (its ``reconcile_plan_duration_seconds`` count)."""
    for metric in the_agent.metrics.plan_seconds.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count") and sample.labels.get("scope") == "full":
                return int(sample.value)
    return 0


async def settle(watch: Watch) -> None:
    """Until no cycle is due or running: nothing pending, no cycle for half a second."""
    while True:
        seen = watch.cycles
        await asyncio.sleep(0.5)
        listener = watch.listener
        if watch.cycles == seen and not listener.wake.is_set() and not listener.pending:
            return


async def full_replan(the_agent: Agent) -> float:
    """One full re-plan of the running agent (woken with nothing named: the whole
    account read on its connection, the specs it validated reused): its cycle's seconds."""
    watch = the_agent.watch
    await settle(watch)
    before, woken = full_plans(the_agent), time.time()
    watch.listener.wake.set()
    while full_plans(the_agent) == before or watch.last is None or watch.last.started_at < woken:
        await asyncio.sleep(0.01)
    last = watch.last
    assert last.ok, last.error
    return last.finished_at - last.started_at


async def turns(
    specs: Path, url: str, names: list[str], *, trials: int, count: int
) -> tuple[list[float], list[float], list[float]]:
    """``count`` turns on one running agent (heal mode, interval 1 h): the raw read and a
    full re-plan in a rotating order, then the turn's share of ``trials`` changes healed.
    Prints the figures; returns the raw reads, full re-plans and heal times."""
    reads: list[float] = []
    plans: list[float] = []
    heals: list[float] = []
    nc = await nats.connect(url, name="bench-other")
    try:
        async with agent(specs, url, mode="heal", interval=3600) as (the_agent, log):
            watch = the_agent.watch
            assert watch.last is not None
            print(
                f"  the agent's first cycle (specs validated, account read): "
                f"{watch.last.finished_at - watch.last.started_at:.2f} s"
            )
            first_cycle = watch.cycles
            rss = [rss_mib()]
            trial = 0
            for turn in range(count):
                took: dict[str, float] = {}
                for what in ("read", "plan") if turn % 2 == 0 else ("plan", "read"):
                    if what == "read":
                        took[what] = await raw_read(url)
                    else:
                        took[what] = await full_replan(the_agent)
                reads.append(took["read"])
                plans.append(took["plan"])
                rss.append(rss_mib())
                share = trials // count + (1 if turn < trials % count else 0)
                for _ in range(share):
                    name = names[(trial * 7919) % len(names)]
                    start = time.perf_counter()
                    await set_description(nc, name, f"changed {trial}")
                    heals.append(await wait_for(log, (f"Stream {name}", "healed"), start, 120))
                    rss.append(rss_mib())
                    trial += 1
                print(
                    f"  turn {turn}: raw read {took['read']:.3f} s, full re-plan "
                    f"{took['plan']:.3f} s ({took['plan'] / took['read']:.2f}x), "
                    f"{share} heal(s), RSS {rss[-1]:.0f} MiB"
                )
            await settle(watch)
            rss.append(rss_mib())
            cycles = watch.cycles - first_cycle
    finally:
        await nc.close()
    ratio = statistics.median(p / r for p, r in zip(plans, reads, strict=True))
    median, p99 = quantiles(heals)
    print(f"  change -> healed, advisory + targeted re-plan ({len(heals)} changes):")
    print(f"    median {median * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms   (goal: p99 < 1 s)")
    print(
        f"  full re-plan {statistics.median(plans):.3f} s / raw read "
        f"{statistics.median(reads):.3f} s (medians of {count} turns): "
        f"{ratio:.2f}x as the median of the turns' ratios   (goal: <= 3x)"
    )
    print(
        f"  VmRSS over {cycles} cycles after the first: first {rss[0]:.0f} MiB, after turn 0 "
        f"(its raw read and first full re-plan) {rss[1]:.0f} MiB, last "
        f"{rss[-1]:.0f} MiB, max after turn 0 {max(rss[1:]):.0f} MiB   (goal: flat)"
    )
    return reads, plans, heals


async def idle_cpu(specs: Path, url: str, idle: float) -> None:
    async with agent(specs, url, mode="heal", interval=3600):
        cpu, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        await asyncio.sleep(idle)
        after = resource.getrusage(resource.RUSAGE_SELF)
        used = (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime)
        share = 100 * used / (time.perf_counter() - wall)
        print(f"  idle CPU over {idle:g}s (interval 1h): {share:.2f} %")


def show(label: str, samples: list[float], floor: float) -> None:
    median, p99 = quantiles(samples)
    print(
        f"  {label:<46} median {median * 1000:8.1f} ms  p99 {p99 * 1000:8.1f} ms"
        f"  ({median / floor:6.1f}x the raw floor)"
    )


def start_server(store: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A JetStream nats-server on a free loopback port storing in ``store``, and its URL."""
    port = free_port()
    process = subprocess.Popen(
        [str(find_binary()), "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return process, f"nats://127.0.0.1:{port}"


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        server, url = (None, args.server) if args.server else start_server(folder / "js")
        try:
            await asyncio.sleep(0.5)
            if args.huge:
                specs, names = write_repository(folder, 1000, 100)
                total = 101_000
            else:
                specs, names = write_specs(folder, 21_000 if args.large else args.resources)
                total = len(names) * 3
            options = ConnectionOptions(servers=url, timeout=60)
            began = time.perf_counter()
            await engine.apply([specs], options, approved=True, lock_timeout=120)
            print(
                f"{total:,} resources ({len(names)} streams), nats-server at {url}; "
                f"applied in {time.perf_counter() - began:.1f} s"
            )
            raw_adv = await raw_advisory_latency(url, names, min(args.trials, 20))
            floor = statistics.median(raw_adv)
            print(f"  raw: update -> its API audit advisory   median {floor * 1000:8.1f} ms")
            reads, _, _ = await turns(specs, url, names, trials=args.trials, count=args.turns)
            read = statistics.median(reads)
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
            for label, advisories, targeted, interval, trials in (
                ways if args.ways or not (args.huge or args.cycles_only) else []
            ):
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
            await idle_cpu(specs, url, args.idle)
            cycles = args.cycles if args.cycles is not None else (0 if args.huge else 200)
            if cycles:
                await back_to_back(specs, url, cycles, read)
        finally:
            if server is not None:
                server.terminate()
                server.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resources", type=int, default=100)
    parser.add_argument("--large", action="store_true", help="21,000 resources")
    parser.add_argument(
        "--huge", action="store_true", help="101,000 resources: 1,000 streams x 100 consumers"
    )
    parser.add_argument("--trials", type=int, default=100, help="changes healed in the turns")
    parser.add_argument("--turns", type=int, default=5, help="raw read / full re-plan turns")
    parser.add_argument("--interval", type=float, default=60.0, help="the agent's interval")
    parser.add_argument("--fallback-interval", type=float, default=5.0)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU")
    parser.add_argument(
        "--cycles", type=int, default=None, help="full re-plans back to back (200; 0 --huge)"
    )
    parser.add_argument(
        "--server",
        help="a server of one's own already holding these specs (the apply then only checks)",
    )
    parser.add_argument("--ways", action="store_true", help="observe and fallback latencies too")
    parser.add_argument("--cycles-only", action="store_true", help="no observe/fallback ways")
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
