"""What the apply lock costs a Pulumi change (figures, never assertions; docs/pulumi.md).

Run: ``python bench/bench_pulumi_lock.py [TURNS]`` (default 21).

One nats-server on loopback, one stream. Each turn, in alternating order, runs the
provider's ``operations.converge`` (an update: ``max_age`` toggled) as the provider
does (a connection opened for the call) twice: under the apply lock (the default,
``lock_timeout=60``) and without it (``lock_timeout=None``, the raw baseline in the
same run). Printed: the medians, the lock's cost per change (the difference of
medians) and its ratio, next to their goals.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from servers import NatsServer

from pulumi_provider import operations
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.specs.loader import load_documents
from reconciler.specs.spec import Spec
from reconciler.specs.validate import validate_documents

#: Goals: a change under the lock at most this much slower than the same change without.
GOAL_RATIO = 1.5
GOAL_MS = 10.0


def spec(folder: Path, hours: int) -> Spec:
    path = folder / "s.yaml"
    path.write_text(f"kind: Stream\nname: BENCH\nsubjects: [bench.>]\nmax_age: {hours}h\n")
    (found,) = validate_documents(load_documents([path]))
    return found


async def change(options: ConnectionOptions, wanted: Spec, lock_timeout: float | None) -> float:
    started = time.perf_counter()
    async with open_client(options) as client:
        await operations.converge(client, wanted, lock_timeout=lock_timeout)
    return time.perf_counter() - started


def main(turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp) / "nats").start()
        try:
            options = ConnectionOptions(servers=server.url)
            folder = Path(tmp)
            asyncio.run(change(options, spec(folder, 1), 60.0))  # the stream and lock bucket
            locked: list[float] = []
            raw: list[float] = []
            hours = 1
            for turn in range(turns):
                order = [(60.0, locked), (None, raw)]
                if turn % 2:
                    order.reverse()
                for timeout, into in order:
                    hours = 3 - hours  # 1 <-> 2: every call is an update
                    into.append(asyncio.run(change(options, spec(folder, hours), timeout)))
        finally:
            server.stop()
    with_lock, without = statistics.median(locked), statistics.median(raw)
    cost_ms = (with_lock - without) * 1000
    print(f"turns: {turns} (interleaved, alternating order)")
    print(f"converge, no lock (baseline): median {without * 1000:.1f} ms")
    print(f"converge, under the lock:      median {with_lock * 1000:.1f} ms")
    print(f"ratio: {with_lock / without:.2f} (goal <= {GOAL_RATIO})")
    print(f"the lock's cost per change: {cost_ms:.1f} ms (goal <= {GOAL_MS:g} ms)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 21)
