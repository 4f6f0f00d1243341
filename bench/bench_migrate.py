"""Migration speed against the server's own raw copy rate, in one run.

    python bench/bench_migrate.py [--messages 1000000] [--size 16]

For memory and file storage, on the embedded nats-server:
1. a stream of ``--messages`` small messages (``--size`` bytes each) is published;
2. raw baseline: a plain mirror of it is created and timed until it holds every message
   (what the server's own copying costs), then deleted;
3. the stream is migrated (retention limits → workqueue, an immutable change) through the
   engine's plan and executor, timed from the plan to the end;
4. it prints messages per second of both, their ratio, and the two handover windows in
   milliseconds (how long publishes were refused).

A migration copies every message twice (out to the temporary stream and back), so about
2x the raw mirror's time is its floor. Target (issue: data-preserving replace): within
1.5x of the raw mirror rate, handovers under one second at any size. Figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nats

from reconciler.execution import run as engine
from reconciler.execution.migrate import migrate
from reconciler.jetstream import ConnectionOptions, EmbeddedServer, open_client
from reconciler.planning.steps import Migrate

SPEC = """kind: Stream
name: BENCH
subjects: ["bench.>"]
storage: {storage}
retention: {retention}
"""


async def publish(url: str, count: int, size: int) -> None:
    """Publish without waiting for each ack, then wait until the stream holds them all."""
    nc = await nats.connect(url)
    payload = b"x" * size
    for i in range(count):
        await nc.publish(f"bench.{i % 16}", payload)
        if i % 10_000 == 0:
            await nc.flush()
    await nc.flush()
    await nc.close()
    await until_count(url, "BENCH", count)


async def until_count(url: str, stream: str, count: int) -> None:
    async with open_client(ConnectionOptions(servers=url, timeout=30)) as client:
        while True:
            info = await client.stream_info(stream)
            if int(info["state"]["messages"]) >= count:
                return
            await asyncio.sleep(0.01)


async def raw_mirror(url: str, storage: str, count: int) -> float:
    """Seconds for a plain mirror of BENCH to hold every message."""
    async with open_client(ConnectionOptions(servers=url, timeout=30)) as client:
        started = time.perf_counter()
        await client.create_stream({"name": "RAW", "storage": storage, "mirror": {"name": "BENCH"}})
        while True:
            info = await client.stream_info("RAW")
            if int(info["state"]["messages"]) >= count:
                break
            await asyncio.sleep(0.005)
        seconds = time.perf_counter() - started
        await client.delete_stream("RAW")
        return seconds


async def migration(url: str, spec: Path) -> tuple[float, list[float], int]:
    """Seconds to plan and migrate, the handover windows, messages in the end."""
    options = ConnectionOptions(servers=url, timeout=30)
    started = time.perf_counter()
    plan = await engine.plan([spec], options, migrate=True)
    (step,) = plan.steps
    assert isinstance(step, Migrate), step
    async with open_client(options) as client:
        progress = await migrate(client, "BENCH", step.config)
    return time.perf_counter() - started, progress.windows_ms, progress.copied


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=16)
    args = parser.parse_args()
    count = args.messages
    print(f"{count:,} messages of {args.size} bytes")
    for storage in ("memory", "file"):
        with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "s") as server:
            url = server.url
            before = Path(tmp) / "before.yaml"
            before.write_text(SPEC.format(storage=storage, retention="limits"))
            after = Path(tmp) / "after.yaml"
            after.write_text(SPEC.format(storage=storage, retention="workqueue"))
            assert asyncio.run(engine.apply([before], ConnectionOptions(servers=url))).ok
            asyncio.run(publish(url, count, args.size))
            raw = asyncio.run(raw_mirror(url, storage, count))
            seconds, windows, copied = asyncio.run(migration(url, after))
            assert copied == count, (copied, count)
            raw_rate, rate = count / raw, count / seconds
            shown = " + ".join(f"{w:.1f} ms" for w in windows)
            print(
                f"{storage:6}  raw mirror {raw_rate:12,.0f} msg/s ({raw:6.2f} s)   "
                f"migrate {rate:12,.0f} msg/s ({seconds:6.2f} s)   "
                f"raw/migrate rate {raw_rate / rate:4.2f}x "
                f"(per copy {raw_rate / (2 * rate):4.2f}x)   handovers {shown}"
            )


if __name__ == "__main__":
    main()
