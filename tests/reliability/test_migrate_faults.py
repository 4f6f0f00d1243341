"""A migration killed anywhere is finished by the next apply, and loses nothing.

The reconciler runs in a child process that kills itself with SIGKILL at one phase
boundary of the migration (every boundary is tried); then ``reconcile plan`` must show
the interrupted migration and ``apply --migrate`` (the consent the migration started
with: a plain apply refuses, tests/reliability/test_migration_trust.py) must finish it,
with every message and each consumer's position kept.
A server killed -9 in the middle of the copy back, then restarted, is the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from migration_helpers import dump, killed_migration_script, publish_many
from servers import NatsServer, options, run, write

from reconciler.execution import run as engine
from reconciler.identity import INTERNAL_STREAMS
from reconciler.jetstream import open_client
from reconciler.model.migration import temp_name
from reconciler.planning.drift import from_plan
from reconciler.planning.steps import Migrate

pytestmark = pytest.mark.integration

SPECS = """
kind: Stream
name: ORDERS
subjects: ["orders.>"]
storage: {storage}
---
kind: Consumer
stream: ORDERS
name: BILLING
ack_policy: explicit
"""

#: Every boundary ``reconciler.execution.migrate`` announces, in order.
BOUNDARIES = [
    "copy",
    "handover",
    "retired",
    "serving",
    "remembered",
    "deleted",
    "created",
    "restored",
    "refill",
    "cutover",
    "final",
]

CHILD = killed_migration_script("ORDERS")


async def ack_some(server: NatsServer, count: int) -> None:
    async with open_client(options(server)) as client:
        await client.request(
            "CONSUMER.CREATE.ORDERS.BILLING",
            {
                "stream_name": "ORDERS",
                "config": {
                    "durable_name": "BILLING",
                    "ack_policy": "explicit",
                    "metadata": {"io.jetstream-gitops/managed-by": "reconcile"},
                },
            },
        )
    import nats

    nc = await nats.connect(server.url)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    body = json.dumps({"batch": count, "expires": 2_000_000_000}).encode()
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ORDERS.BILLING", body, reply=inbox)
    for _ in range(count):
        msg = await sub.next_msg(timeout=3)
        await nc.request(msg.reply, b"+ACK", timeout=2)
    await nc.close()


def ack_floor(server: NatsServer) -> int:
    async def go() -> int:
        async with open_client(options(server)) as client:
            info = await client.consumer_info("ORDERS", "BILLING")
            return int(info["ack_floor"]["stream_seq"])

    return run(go())


def stream_names(server: NatsServer) -> list[str]:
    async def go() -> list[str]:
        async with open_client(options(server)) as client:
            return sorted(n for n in await client.stream_names() if n not in INTERNAL_STREAMS)

    return run(go())


def prepare(server: NatsServer, tmp_path: Path) -> tuple[Path, list, dict]:
    before = write(tmp_path, SPECS.format(storage="file"), "before.yaml")
    assert run(engine.apply([before], options(server))).ok
    run(publish_many(server, ["orders.a", "orders.b"], 300))
    run(ack_some(server, 40))
    expected = run(dump(server, "ORDERS"))
    after = write(tmp_path, SPECS.format(storage="memory"), "after.yaml")
    step = run(engine.plan([after], options(server), migrate=True)).steps[0]
    assert isinstance(step, Migrate)
    return after, expected, dict(step.config)


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_kill_9_of_the_reconciler_at_each_boundary_then_apply_finishes(
    clean_server: NatsServer, tmp_path: Path, boundary: str, figures
) -> None:
    after, expected, target = prepare(clean_server, tmp_path)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, clean_server.url, json.dumps(target), boundary],
        check=False,
        capture_output=True,
        timeout=120,
        env={**os.environ},
    )
    assert child.returncode == -9, child.stderr.decode()
    assert temp_name("ORDERS") in stream_names(clean_server)  # the migration is unfinished

    interrupted = run(engine.plan([after], options(clean_server)))
    (step,) = [s for s in interrupted.steps if s.stream_name == "ORDERS"]
    assert isinstance(step, Migrate) and step.phase is not None
    assert f"interrupted in phase {step.phase}" in step.reasons[0]
    drift = from_plan(interrupted)
    (orders,) = [r for r in drift.resources if r.name == "ORDERS"]
    assert orders.status == "drifted"
    assert "apply --migrate finishes the migration" in orders.reasons[0]
    assert [r.name for r in drift.resources if r.name.startswith("MIGRATING")] == []

    assert run(engine.apply([after], options(clean_server), migrate=True)).ok
    assert run(dump(clean_server, "ORDERS")) == expected
    assert stream_names(clean_server) == ["ORDERS"]
    assert ack_floor(clean_server) == 40
    assert not run(engine.plan([after], options(clean_server))).has_changes
    figures.add("migration_crashes")
    figures.add("migration_messages", len(expected))


def test_a_server_killed_during_the_copy_back_loses_nothing(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    server = server_factory()
    before = write(tmp_path, SPECS.format(storage="file"), "before.yaml")
    assert run(engine.apply([before], options(server))).ok
    run(publish_many(server, ["orders.a"], 3000))
    expected = run(dump(server, "ORDERS"))
    # retention to workqueue: both copies are on disk, so a server crash keeps them
    workqueue = SPECS.format(storage="file").replace("storage: file", "retention: workqueue")
    after = write(tmp_path, workqueue, "after.yaml")
    target = dict(run(engine.plan([after], options(server), migrate=True)).steps[0].config)

    async def crash() -> None:
        from reconciler.execution.migrate import migrate

        async with open_client(options(server)) as client:

            async def hook(label: str) -> None:
                if label == "refill":
                    server.kill()

            with pytest.raises(Exception):  # noqa: B017 - whatever the broken connection says
                await migrate(client, "ORDERS", target, on_phase=hook)

    run(crash())
    server.start()
    assert run(engine.apply([after], options(server), migrate=True)).ok
    assert run(dump(server, "ORDERS")) == expected
    assert stream_names(server) == ["ORDERS"]


def test_a_lost_lease_stops_a_migration_at_a_boundary_and_the_next_apply_finishes(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The apply lock's fence is confirmed at every phase boundary: once the lease is lost
    the migration stops there (a second apply may own the server now)."""
    from reconciler.errors import ApplyFailed, LockError
    from reconciler.execution.apply import apply_plan

    after, expected, _ = prepare(clean_server, tmp_path)
    calls = 0

    async def guard() -> None:
        nonlocal calls
        calls += 1
        if calls > 3:  # before the step, then the copy and handover boundaries
            raise LockError("lease lost: taken over by another apply")

    async def go() -> None:
        plan = await engine.plan([after], options(clean_server), migrate=True)
        async with open_client(options(clean_server)) as client:
            await apply_plan(plan, client, guard=guard)

    with pytest.raises(ApplyFailed, match="lease lost"):
        run(go())
    assert temp_name("ORDERS") in stream_names(clean_server)
    assert run(engine.apply([after], options(clean_server), migrate=True)).ok
    assert run(dump(clean_server, "ORDERS")) == expected
    assert stream_names(clean_server) == ["ORDERS"]
