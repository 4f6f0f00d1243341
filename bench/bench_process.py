"""Plan and apply as whole processes against raw nats-py processes, in the same run.

    python bench/bench_process.py [--streams 1000] [--consumers-per-stream 20] [--turns 5]

`bench_plan_apply.py` times the engine in-process; this times what a CI job pays: a
`reconcile plan` / `reconcile apply` process from exec to exit, imports and spec loading
included, against a small nats-py process doing the raw requests (paged STREAM.LIST and
CONSUMER.LIST; the same creates with 64 in flight). The bare interpreter's start-up
(`python -c pass`, the same for both) is subtracted from each before the ratio; the whole
ratio is printed too. Each turn runs every figure once, in a rotating order, and the
medians of the turns are printed: this machine's two cores are shared, one run moves by a
third. Each apply and its raw baseline run on an empty server of their own. `reconcile
export --out` (a file per stream written) is timed in the plan's turns, against the
re-plan of the same turn. The project's modules are compiled to bytecode first, as an
install leaves them. Figures only: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_plan_apply import write_specs

from reconciler.jetstream import EmbeddedServer
from reconciler.specs.cache import CACHE_ENV, KEY_ENV

#: The raw processes: nats-py, asyncio and json only (nothing of this project).
RAW_LIST = """
import asyncio, json, sys
import nats

async def main(url):
    nc = await nats.connect(url)
    names, offset, total = [], 0, 1
    while offset < total:
        page = json.loads((await nc.request(
            "$JS.API.STREAM.LIST", json.dumps({"offset": offset}).encode(), timeout=60)).data)
        total, streams = page["total"], page.get("streams") or []
        names += [s["config"]["name"] for s in streams]
        offset += len(streams)
        if not streams:
            break
    limit = asyncio.Semaphore(32)

    async def consumers(stream):
        async with limit:
            off, tot = 0, 1
            while off < tot:
                body = json.loads((await nc.request(
                    f"$JS.API.CONSUMER.LIST.{stream}", json.dumps({"offset": off}).encode(),
                    timeout=60)).data)
                tot, got = body["total"], body.get("consumers") or []
                off += len(got)
                if not got:
                    break

    await asyncio.gather(*(consumers(n) for n in names))
    await nc.close()

asyncio.run(main(sys.argv[1]))
"""

RAW_CREATES = """
import asyncio, json, sys
import nats

async def main(url, streams, per):
    nc = await nats.connect(url)
    limit = asyncio.Semaphore(64)

    async def req(subject, body):
        async with limit:
            msg = await nc.request(subject, json.dumps(body).encode(), timeout=60)
            if b'"error"' in msg.data:
                raise RuntimeError(msg.data.decode())

    await asyncio.gather(*(
        req(f"$JS.API.STREAM.CREATE.B{i:05d}",
            {"name": f"B{i:05d}", "subjects": [f"b{i}.>"], "storage": "memory"})
        for i in range(streams)))
    await asyncio.gather(*(
        req(f"$JS.API.CONSUMER.CREATE.B{i:05d}.C{c}",
            {"stream_name": f"B{i:05d}", "action": "create",
             "config": {"durable_name": f"C{c}", "name": f"C{c}", "ack_policy": "explicit"}})
        for i in range(streams) for c in range(per)))
    await nc.close()

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""

RECONCILE = [sys.executable, "-m", "reconciler"]


def compile_bytecode() -> None:
    """The project's modules compiled once, as a pip install leaves them (and nats-py,
    the raw side's one import, already is): with PYTHONDONTWRITEBYTECODE set (this
    machine's environment) every `reconcile` process compiled all of its modules from
    source again, 0.1-0.15 s of CPU the raw processes never paid."""
    import compileall

    import reconciler

    compileall.compile_dir(Path(reconciler.__file__).parent, quiet=1)


def process_seconds(argv: list[str], env: dict[str, str] | None = None) -> float:
    """Seconds one process takes from exec to exit (its output discarded; it must
    succeed)."""
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def median_of(argv: list[str], runs: int = 7) -> float:
    return statistics.median(process_seconds(argv) for _ in range(runs))


def apply_turn(tmp: Path, spec: Path, streams: int, per: int, turn: int) -> tuple[float, float]:
    """(reconcile apply from nothing, raw creates) seconds, each on an empty server."""
    took: dict[str, float] = {}

    def ours() -> None:
        with EmbeddedServer(tmp / f"apply-{turn}") as server:
            argv = [*RECONCILE, "apply", str(spec), "--server", server.url, "--yes"]
            took["apply"] = process_seconds([*argv, "--concurrency", "64"])

    def raw() -> None:
        with EmbeddedServer(tmp / f"raw-{turn}") as server:
            argv = [sys.executable, "-c", RAW_CREATES, server.url, str(streams), str(per)]
            took["raw"] = process_seconds(argv)

    for run in [ours, raw] if turn % 2 == 0 else [raw, ours]:
        run()
    return took["apply"], took["raw"]


def plan_turns(spec: Path, url: str, cache: Path, turns: int) -> dict[str, list[float]]:
    """Seconds of the raw list, the plan without a spec cache and with a warm one, per
    turn, each turn in a rotating order."""
    plain = {k: v for k, v in os.environ.items() if k not in (CACHE_ENV, KEY_ENV)}
    warm = {**plain, CACHE_ENV: str(cache), KEY_ENV: secrets.token_hex(24)}
    plan = [*RECONCILE, "plan", str(spec), "--server", url]
    process_seconds(plan, warm)  # fills the cache
    runs: dict[str, Callable[[], float]] = {
        "raw list": lambda: process_seconds([sys.executable, "-c", RAW_LIST, url]),
        "plan": lambda: process_seconds(plan, plain),
        "plan, cache warm": lambda: process_seconds(plan, warm),
        "export": lambda: process_seconds(
            [*RECONCILE, "export", "--server", url, "--out", tempfile.mkdtemp(dir=cache.parent)],
            plain,
        ),
    }
    took: dict[str, list[float]] = {name: [] for name in runs}
    for turn in range(turns):
        order = [*runs][turn % len(runs) :] + [*runs][: turn % len(runs)]
        for name in order:
            took[name].append(runs[name]())
    return took


def ratio_line(label: str, ours: list[float], raw: list[float], start: float, goal: str) -> None:
    net = [(o - start) / (r - start) for o, r in zip(ours, raw, strict=True)]
    whole = [o / r for o, r in zip(ours, raw, strict=True)]
    print(
        f"{label:<34}: {statistics.median(net):5.2f}x  (goal {goal}; turns "
        f"{', '.join(f'{r:.2f}' for r in net)}; whole processes {statistics.median(whole):.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--consumers-per-stream", type=int, default=20)
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    streams, per, turns = args.streams, args.consumers_per_stream, args.turns
    compile_bytecode()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        spec = write_specs(tmp, streams, per)
        print(f"{streams} streams, {streams * per} consumers; {turns} turns")
        start = median_of([sys.executable, "-c", "pass"])
        help_time = median_of([*RECONCILE, "--help"])
        version_time = median_of([*RECONCILE, "--version"])
        applies, raws = [], []
        for turn in range(turns):
            ours, raw = apply_turn(tmp, spec, streams, per, turn)
            print(f"  turn {turn}: reconcile apply {ours:7.3f} s   raw creates {raw:7.3f} s")
            applies.append(ours)
            raws.append(raw)
        with EmbeddedServer(tmp / "plan") as server:
            process_seconds([*RECONCILE, "apply", str(spec), "--server", server.url, "--yes"])
            took = plan_turns(spec, server.url, tmp / "spec-cache", turns)
        for name, seconds in took.items():
            shown = ", ".join(f"{s:.3f}" for s in seconds)
            print(f"  {name:<18} median {statistics.median(seconds):7.3f} s  ({shown})")
        print(f"  python -c pass     median {start:7.3f} s (subtracted from every process)")
        print()
        ratio_line("apply from nothing / raw creates", applies, raws, start, "<= 1.3x")
        ratio_line("re-plan / raw paged list", took["plan"], took["raw list"], start, "<= 4x")
        ratio_line(
            "re-plan, cache warm / raw list",
            took["plan, cache warm"],
            took["raw list"],
            start,
            "<= 4x",
        )
        ratio_line("export / re-plan", took["export"], took["plan"], start, "<= 1.5x")
        print(f"{'reconcile --help':<34}: {help_time:5.3f} s  (goal < 0.3 s; median of 7)")
        print(f"{'reconcile --version':<34}: {version_time:5.3f} s  (goal < 0.3 s; median of 7)")


if __name__ == "__main__":
    main()
