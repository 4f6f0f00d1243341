"""A failover of N standby pairs under load (figures, never assertions; docs/dr.md).

Run: ``python bench/bench_failover.py [PAIRS] [RATE] [TURNS]`` (defaults 100 pairs, 10
messages a second per stream, 3 turns).

Each turn, on fresh servers, once with the tool and once with the raw baseline (in turns,
each starting every other turn):

1. Two JetStream domains on loopback, west a leafnode of east; a project with both as
   environments and PAIRS streams (each with one consumer) declaring west as standby;
   ``reconcile apply`` on both.
2. One publisher per stream (on east's server) publishes RATE messages a second, each
   retried until acknowledged (``Nats-Msg-Id`` set); every acknowledgement is timed.
3. While they publish, the failover: ``reconcile failover --from east --to west --yes``
   as a subprocess, or the **raw baseline**: a subprocess doing the same steps with plain
   JetStream API requests and nothing else (fence each origin, wait until its mirror has
   the last sequence, promote it, create its consumer at the ack floor + 1; 16 pairs at a
   time, as the tool), no lock, no judgement, no check of the other side's messages.
4. Printed per turn, then the medians and the tool's ratio to the baseline: the total time
   (goal: 60 s at 100 pairs); per stream, the longest time between two acknowledgements
   while it ran (the write-unavailable window as the publishers saw it: median and p99);
   and the acknowledged messages that are not on the promoted side (goal 0) or are there
   twice.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from servers import NatsServer, joined_domains


def project(root: Path, east: NatsServer, west: NatsServer, pairs: int) -> None:
    (root / "specs").mkdir(parents=True)
    documents = []
    for n in range(pairs):
        documents.append(
            f"kind: Stream\nname: S{n:03d}\nsubjects: ['s{n:03d}.>']\n"
            "standby: {primary: east, environment: west}\n"
        )
        documents.append(f"kind: Consumer\nstream: S{n:03d}\nname: worker\nack_policy: explicit\n")
    (root / "specs" / "streams.yaml").write_text("---\n".join(documents), encoding="utf-8")
    (root / "reconcile.yaml").write_text(
        "owner: bench\nspecs: [specs]\nenvironments:\n"
        f"  east: {{servers: '{east.url}', domain: east}}\n"
        f"  west: {{servers: '{west.url}', domain: west}}\n",
        encoding="utf-8",
    )


def reconcile(root: Path, *args: str) -> tuple[int, str, float]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        cwd=root,
        env=environ | {"NO_COLOR": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


class Load:
    """One publisher per stream, each message retried until acknowledged."""

    def __init__(self, url: str, pairs: int, rate: float) -> None:
        self.url, self.pairs, self.rate = url, pairs, rate
        self.acks: dict[str, list[tuple[float, str]]] = {f"S{n:03d}": [] for n in range(pairs)}
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        nc = await nats.connect(self.url, max_reconnect_attempts=-1)
        try:
            await asyncio.gather(*(self._one(nc, n) for n in range(self.pairs)))
        finally:
            await nc.close()

    async def _one(self, nc: Any, n: int) -> None:
        stream, index = f"S{n:03d}", 0
        while not self.stopping.is_set():
            payload = f"{stream}-{index}"
            while not await self._acked(nc, f"s{n:03d}.m", payload, stream):
                await asyncio.sleep(0.005)
            self.acks[stream].append((time.monotonic(), payload))
            index += 1
            await asyncio.sleep(1 / self.rate)

    @staticmethod
    async def _acked(nc: Any, subject: str, payload: str, stream: str) -> bool:
        try:
            reply = await nc.request(
                subject, payload.encode(), timeout=1, headers={"Nats-Msg-Id": payload}
            )
        except Exception:  # no responders while fenced, a timeout: again
            return False
        answer = json.loads(reply.data or b"{}")
        return "error" not in answer and answer.get("stream") == stream


async def stored(url: str, stream: str) -> list[str]:
    nc = await nats.connect(url)
    try:
        info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=10)).data)
        found: list[str] = []
        last = int(info["state"]["last_seq"])
        for start in range(1, last + 1, 200):

            async def one(seq: int) -> str | None:
                body = json.dumps({"seq": seq}).encode()
                answer = json.loads(
                    (await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", body, timeout=10)).data
                )
                message = answer.get("message")
                return None if message is None else base64.b64decode(message["data"]).decode()

            chunk = await asyncio.gather(
                *(one(s) for s in range(start, min(start + 200, last + 1)))
            )
            found += [p for p in chunk if p is not None]
        return found
    finally:
        await nc.close()


async def raw_failover(east_url: str, west_url: str, pairs: int) -> None:
    """The baseline: each pair failed over with plain API requests, 16 at a time."""
    east, west = await nats.connect(east_url), await nats.connect(west_url)
    limit = asyncio.Semaphore(16)

    async def call(nc: Any, subject: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else b""
        answer = json.loads((await nc.request(f"$JS.API.{subject}", data, timeout=10)).data)
        if "error" in answer:
            raise SystemExit(f"{subject}: {answer['error']}")
        return answer

    async def one(name: str) -> None:
        async with limit:
            config = (await call(east, f"STREAM.INFO.{name}"))["config"]
            fenced = {**config, "subjects": [f"_fenced.{name}"]}
            last = (await call(east, f"STREAM.UPDATE.{name}", fenced))["state"]["last_seq"]
            while (mirror := await call(west, f"STREAM.INFO.{name}"))["state"]["last_seq"] < last:
                await asyncio.sleep(0.05)
            promoted = {k: v for k, v in mirror["config"].items() if k != "mirror"}
            await call(west, f"STREAM.UPDATE.{name}", {**promoted, "subjects": config["subjects"]})
            floor = (await call(east, f"CONSUMER.INFO.{name}.worker"))["ack_floor"]["stream_seq"]
            made = {"durable_name": "worker", "ack_policy": "explicit"}
            made |= {"deliver_policy": "by_start_sequence", "opt_start_seq": floor + 1}
            body = {"stream_name": name, "config": made, "action": "create"}
            await call(west, f"CONSUMER.CREATE.{name}.worker", body)

    try:
        await asyncio.gather(*(one(f"S{n:03d}") for n in range(pairs)))
    finally:
        await east.close()
        await west.close()


def raw(root: Path, east: NatsServer, west: NatsServer, pairs: int) -> tuple[int, str, float]:
    """The baseline as a subprocess of its own, as the tool runs."""
    started = time.monotonic()
    args = [sys.executable, __file__, "--raw", east.url, west.url, str(pairs)]
    done = subprocess.run(args, cwd=root, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


Figures = tuple[float, float, float, int, int, int]  # total, median, p99, lost, twice, acked


async def measure(
    root: Path, east: NatsServer, west: NatsServer, pairs: int, rate: float, kind: str
) -> Figures:
    load = Load(east.url, pairs, rate)
    publishing = asyncio.ensure_future(load.run())
    await asyncio.sleep(2)
    began = time.monotonic()
    if kind == "tool":
        code, said, seconds = await asyncio.to_thread(
            reconcile, root, "failover", "--from", "east", "--to", "west", "--yes"
        )
    else:
        code, said, seconds = await asyncio.to_thread(raw, root, east, west, pairs)
    ended = time.monotonic()
    await asyncio.sleep(1)
    load.stopping.set()
    await publishing
    if code != 0:
        print(said[-3000:])
        raise SystemExit(f"failover exited {code}")
    windows = []
    for times in load.acks.values():
        during = [t for t, _ in times if began - 1 <= t <= ended + 1]
        gaps = [b - a for a, b in itertools.pairwise(during)]
        windows.append(max(gaps, default=ended - began))
    lost = twice = acked = 0
    for stream, times in load.acks.items():
        payloads = await stored(west.url, stream)
        acked += len(times)
        lost += len({p for _, p in times} - set(payloads))
        twice += len(payloads) - len(set(payloads))
    windows.sort()
    p99 = windows[min(len(windows) - 1, int(len(windows) * 0.99))]
    median = statistics.median(windows)
    print(
        f"  {kind:>4}: total {seconds:.2f} s, window median {median:.2f} s, p99 {p99:.2f} s, "
        f"acknowledged {acked}, lost {lost}, stored twice {twice}"
    )
    return seconds, median, p99, lost, twice, acked


def one_turn(pairs: int, rate: float, kind: str) -> Figures:
    """Fresh servers, both environments applied, then one failover of ``kind``."""
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        started: list[NatsServer] = []

        def start(**kwargs: Any) -> NatsServer:
            server = NatsServer(base / f"server{len(started)}", **kwargs)
            started.append(server)
            return server.start()

        try:
            east, west = joined_domains(start)
            root = base / "project"
            project(root, east, west, pairs)
            for env in ("east", "west"):
                code, said, _ = reconcile(root, "apply", "--env", env, "--yes")
                if code != 0:
                    raise SystemExit(said[-3000:])
            return asyncio.run(measure(root, east, west, pairs, rate, kind))
        finally:
            for server in started:
                server.stop()


def main() -> None:
    if sys.argv[1:2] == ["--raw"]:
        asyncio.run(raw_failover(sys.argv[2], sys.argv[3], int(sys.argv[4])))
        return
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    turns = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    print(f"pairs: {pairs}, load: {rate:g} msg/s per stream, {turns} turns")
    found: dict[str, list[Figures]] = {"tool": [], "raw": []}
    for turn in range(turns):
        print(f"turn {turn + 1}")
        for kind in ("tool", "raw") if turn % 2 == 0 else ("raw", "tool"):
            found[kind].append(one_turn(pairs, rate, kind))

    def median(kind: str, index: int) -> float:
        return statistics.median(figures[index] for figures in found[kind])

    tool_total, raw_total = median("tool", 0), median("raw", 0)
    print(f"failover total: {tool_total:.2f} s (goal <= 60 s); raw baseline {raw_total:.2f} s: "
          f"{tool_total / raw_total:.2f}x")  # fmt: skip
    for index, what in ((1, "median"), (2, "p99")):
        ours, base = median("tool", index), median("raw", index)
        print(f"write-unavailable window {what}: {ours:.2f} s; raw baseline {base:.2f} s: "
              f"{ours / base:.2f}x")  # fmt: skip
    lost = sum(figures[3] for figures in found["tool"])
    twice = sum(figures[4] for figures in found["tool"])
    acked = sum(figures[5] for figures in found["tool"])
    print(f"acknowledged messages lost: {lost} (goal 0), stored twice: {twice}, of {acked}")


if __name__ == "__main__":
    main()
