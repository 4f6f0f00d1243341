"""Re-plan over a slow link: the server behind a loopback proxy adding 10 ms each way.

    python bench/bench_wan.py [--streams 1000] [--consumers-per-stream 20] [--delay-ms 10]

The proxy (in this process, on 127.0.0.1) holds every chunk for ``--delay-ms`` in each
direction, in order, so a request/reply costs at least twice the delay, as on a WAN link
with that latency. Through the same proxy, in one run, it prints:
- the raw paged LIST of every stream and consumer (nats-py, 32 consumer lists in flight);
- a no-change ``reconcile plan`` (in-process);
- a per-resource INFO refresh with 10 in flight, as a Terraform-style provider refreshes.
Targets (issue: real accounts at full size): plan >= 10x faster than the INFO refresh,
and a re-plan <= 1.5x the raw paged list. A re-plan plans files planned before: with
``RECONCILE_SPEC_CACHE`` kept (as documented for CI) they are not loaded and validated
again. A first plan (cold) must load and validate every file before it sends a request
(the product's contract), so it cannot take less than that time plus the read: the
"floor" line prints that bound from the same run. Figures only: nothing here asserts a
time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_plan_apply import info_refresh, raw_lists, write_specs

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions, EmbeddedServer
from reconciler.specs.cache import CACHE_ENV
from reconciler.specs.validate import load_specs


class DelayProxy:
    """A TCP proxy that delivers every chunk ``delay`` seconds late, in order."""

    def __init__(self, target_host: str, target_port: int, delay: float) -> None:
        self.target = (target_host, target_port)
        self.delay = delay
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        await asyncio.gather(
            self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer)
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    writer.close()
                    return
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        try:
            while chunk := await reader.read(65536):
                queue.put_nowait((loop.time() + self.delay, chunk))
        finally:
            queue.put_nowait((loop.time() + self.delay, b""))
            await sender


async def validated(spec: Path) -> None:
    """What a first plan does before its first request: load and validate every file
    (in the same garbage-collection regime as a run)."""
    with engine.fewer_collections():
        load_specs([spec])


def timed(label: str, work: Callable[[], Coroutine[Any, Any, Any]], best_of: int = 1) -> float:
    """Seconds the best of ``best_of`` runs of ``work()`` takes."""
    runs = []
    for _ in range(best_of):
        start = time.perf_counter()
        asyncio.run(work())
        runs.append(time.perf_counter() - start)
    took = min(runs)
    shown = f"{label} (best of {best_of})" if best_of > 1 else label
    print(f"  {shown:<52} {took:8.3f} s")
    return took


async def serve_proxy(target: str, delay: float) -> None:
    """``--proxy HOST:PORT``: run only the proxy (in its own process, so the client's
    work never delays its forwarding) and print its port."""
    host, port = target.rsplit(":", 1)
    proxy = DelayProxy(host, int(port), delay)
    print(await proxy.start(), flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--consumers-per-stream", type=int, default=20)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--proxy", metavar="HOST:PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    delay = args.delay_ms / 1000
    if args.proxy:
        asyncio.run(serve_proxy(args.proxy, delay))
        return
    streams, per = args.streams, args.consumers_per_stream
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "store") as server:
        target = server.url.removeprefix("nats://")
        argv = [sys.executable, __file__, "--proxy", target, "--delay-ms", str(args.delay_ms)]
        proxy = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        try:
            assert proxy.stdout is not None
            proxied = f"nats://127.0.0.1:{int(proxy.stdout.readline())}"
            spec = write_specs(Path(tmp), streams, per)
            direct = ConnectionOptions(servers=server.url, timeout=60)
            asyncio.run(engine.apply([spec], direct, concurrency=64))
            print(f"{streams} streams, {streams * per} consumers; {args.delay_ms:g} ms each way")
            options = ConnectionOptions(servers=proxied, timeout=60)
            os.environ.pop(CACHE_ENV, None)  # the first plan is cold, whatever the caller set
            raw = timed("raw paged LIST through the proxy", lambda: raw_lists(proxied), 3)
            load = timed("load and validate the files (no server)", lambda: validated(spec), 3)
            plan = timed(
                "reconcile plan, no changes, through the proxy",
                lambda: engine.plan([spec], options),
                3,
            )
            os.environ[CACHE_ENV] = str(Path(tmp) / "cache")
            asyncio.run(engine.plan([spec], options))  # fills the cache
            warm = timed(
                "the same, RECONCILE_SPEC_CACHE warm", lambda: engine.plan([spec], options), 3
            )
            del os.environ[CACHE_ENV]
            refresh = timed(
                "per-resource INFO refresh, 10 in flight",
                lambda: info_refresh(proxied, streams, per),
            )
        finally:
            proxy.terminate()
        print()
        print(f"INFO refresh / first plan     : {refresh / plan:6.2f}x  (target >= 10x)")
        print(f"re-plan (cache) / raw list    : {warm / raw:6.2f}x  (target <= 1.5x)")
        print(f"first plan / raw list         : {plan / raw:6.2f}x  (no target; floor below)")
        print(f"  floor: (validation + raw) / raw {(load + raw) / raw:6.2f}x  (validation first)")


if __name__ == "__main__":
    main()
