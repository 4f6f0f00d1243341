"""Migrations keep every message: real servers, messages counted and compared.

Every test publishes messages with headers and ``Nats-Msg-Id`` s, migrates through the
engine (``apply --migrate``), and compares the complete message list before and after:
subject, payload, headers (but the ``Nats-Stream-Source`` header a copy adds) and order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from migration_helpers import api, dump, dump_exact, publish_many
from servers import NatsServer, options, run, write

from reconciler.errors import RefusedPlan, SpecError
from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.model.migration import temp_name
from reconciler.planning.steps import Migrate, Replace


def migrate(paths: list[Path], server: NatsServer, **kw: Any) -> engine.ApplyResult:
    return run(engine.apply(paths, options(server), migrate=True, **kw))


def plan(paths: list[Path], server: NatsServer, **kw: Any) -> Any:
    return run(engine.plan(paths, options(server), **kw))


def streams(server: NatsServer) -> list[str]:
    async def go() -> list[str]:
        async with open_client(options(server)) as client:
            return sorted(await client.stream_names())

    return run(go())


STREAM = """
kind: Stream
name: ORDERS
subjects: ["orders.>"]
{extra}
"""

#: (before, after) of every immutable stream field a migration can change; the minimum
#: server release that knows the field.
FIELD_CHANGES: dict[str, tuple[str, str, tuple[int, int, int]]] = {
    "storage file to memory": ("storage: file", "storage: memory", (2, 10, 0)),
    "storage memory to file": ("storage: memory", "storage: file", (2, 10, 0)),
    "retention to workqueue": ("retention: limits", "retention: workqueue", (2, 10, 0)),
    "retention from workqueue": ("retention: workqueue", "retention: limits", (2, 10, 0)),
    "deny_delete off": ("deny_delete: true", "deny_delete: false", (2, 10, 0)),
    "deny_purge off": ("deny_purge: true", "deny_purge: false", (2, 10, 0)),
    "sealed off": ("sealed: true", "sealed: false", (2, 10, 0)),
    "allow_msg_ttl off": ("allow_msg_ttl: true", "allow_msg_ttl: false", (2, 11, 2)),
    "persist_mode": ("persist_mode: default", "persist_mode: async", (2, 12, 0)),
}


def version_of(server: NatsServer) -> tuple[int, int, int]:
    async def go() -> tuple[int, int, int]:
        async with open_client(options(server)) as client:
            return (await client.server_info()).version_tuple

    return run(go())


@pytest.mark.parametrize("change", list(FIELD_CHANGES))
def test_each_immutable_field_migrates_with_every_message_kept(
    clean_server: NatsServer, tmp_path: Path, change: str
) -> None:
    before, after, needs = FIELD_CHANGES[change]
    if version_of(clean_server) < needs:
        pytest.skip(f"{change} needs nats-server {'.'.join(map(str, needs))}")
    sealing = before == "sealed: true"
    first = write(tmp_path, STREAM.format(extra="" if sealing else before), "before.yaml")
    assert engine_apply(first, clean_server).ok
    run(publish_many(clean_server, ["orders.new", "orders.paid"], 120))
    if before != "deny_delete: true":
        run(api(clean_server, "STREAM.MSG.DELETE.ORDERS", {"seq": 7}))  # a gap
    if sealing:
        sealed = write(tmp_path, STREAM.format(extra="sealed: true"), "sealed.yaml")
        assert engine_apply(sealed, clean_server).ok
    expected = run(dump(clean_server, "ORDERS"))
    exact = run(dump_exact(clean_server, "ORDERS"))
    assert len(expected) == (120 if before == "deny_delete: true" else 119)

    spec = write(tmp_path, STREAM.format(extra=after), "after.yaml")
    planned = plan([spec], clean_server, migrate=True)
    (step,) = planned.steps
    assert isinstance(step, Migrate), step
    assert step.volume.messages == len(expected)
    assert not step.destructive
    result = migrate([spec], clean_server)
    assert result.ok

    assert run(dump(clean_server, "ORDERS")) == expected
    if version_of(clean_server) >= (2, 12, 0):
        # The copies are mirrors: sequences (gap included), timestamps, headers exact.
        assert run(dump_exact(clean_server, "ORDERS")) == exact
    assert temp_name("ORDERS") not in streams(clean_server)
    assert not plan([spec], clean_server).has_changes


def engine_apply(path: Path, server: NatsServer, **kw: Any) -> engine.ApplyResult:
    return run(engine.apply([path], options(server), **kw))


def test_without_migrate_the_plan_is_a_replace_that_names_the_way_out(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    assert engine_apply(
        write(tmp_path, STREAM.format(extra="storage: file"), "a.yaml"), clean_server
    ).ok
    run(publish_many(clean_server, ["orders.new"], 5))
    spec = write(tmp_path, STREAM.format(extra="storage: memory"), "b.yaml")
    (step,) = plan([spec], clean_server).steps
    assert isinstance(step, Replace)
    assert "apply --migrate keeps its messages" in step.reasons
    with pytest.raises(RefusedPlan):
        engine_apply(spec, clean_server)
    assert run(dump(clean_server, "ORDERS")) and len(run(dump(clean_server, "ORDERS"))) == 5


def test_a_mirror_cannot_migrate_and_the_plan_says_why(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = """
    kind: Stream
    name: ORIGIN
    subjects: ["origin.>"]
    ---
    kind: Stream
    name: COPY
    mirror: {{name: ORIGIN}}
    {extra}
    """
    assert engine_apply(
        write(tmp_path, specs.format(extra="storage: file"), "a.yaml"), clean_server
    ).ok
    spec = write(tmp_path, specs.format(extra="storage: memory"), "b.yaml")
    (step,) = plan([spec], clean_server, migrate=True).steps
    assert isinstance(step, Replace)
    assert any(
        reason.startswith("cannot migrate: the stream is a mirror") for reason in step.reasons
    )


CONSUMERS = """
kind: Stream
name: ORDERS
subjects: ["orders.>"]
{extra}
---
kind: Consumer
stream: ORDERS
name: BILLING
ack_policy: explicit
---
kind: Consumer
stream: ORDERS
name: AUDIT
ack_policy: all
filter_subject: orders.paid
---
kind: Consumer
stream: ORDERS
name: LATEST
deliver_policy: new
ack_policy: none
"""


async def consume(server: NatsServer, stream: str, consumer: str, count: int) -> list[bytes]:
    """Fetch ``count`` messages and acknowledge each; their payloads."""
    nc = await nats.connect(server.url)
    got = []
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        body = json.dumps({"batch": count, "expires": 2_000_000_000}).encode()
        await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", body, reply=inbox)
        while len(got) < count:
            msg = await sub.next_msg(timeout=3)
            if not msg.data and msg.headers:
                continue  # a status message
            got.append(msg.data)
            if msg.reply:
                await nc.request(msg.reply, b"+ACK", timeout=2)
    finally:
        await nc.close()
    return got


def positions(server: NatsServer) -> dict[str, tuple[int, int]]:
    """Each consumer's (pending, ack floor) of ORDERS."""

    async def go() -> dict[str, tuple[int, int]]:
        async with open_client(options(server)) as client:
            out = {}
            for consumer in await client.list_consumers("ORDERS"):
                out[consumer["name"]] = (
                    int(consumer["num_pending"]),
                    int(consumer["ack_floor"]["stream_seq"]),
                )
            return out

    return run(go())


def test_durable_consumers_come_back_at_their_positions(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    if version_of(clean_server) < (2, 14, 0):
        pytest.skip("keeping positions needs CONSUMER.RESET (nats-server 2.14)")
    first = write(tmp_path, CONSUMERS.format(extra="storage: file"), "a.yaml")
    assert engine_apply(first, clean_server).ok
    run(publish_many(clean_server, ["orders.new", "orders.paid"], 60))
    assert run(consume(clean_server, "ORDERS", "BILLING", 25)) == [
        f"m{i}".encode() for i in range(25)
    ]
    paid = run(consume(clean_server, "ORDERS", "AUDIT", 10))
    assert paid == [f"m{i}".encode() for i in range(1, 20, 2)]
    before = positions(clean_server)
    spec = write(tmp_path, CONSUMERS.format(extra="storage: memory"), "b.yaml")
    (step, *rest) = plan([spec], clean_server, migrate=True).steps
    assert isinstance(step, Migrate) and not rest
    assert {fate.name: fate.position for fate in step.consumers} == {
        "AUDIT": True,
        "BILLING": True,
        "LATEST": False,  # deliver_policy new: the server cannot reset it
    }
    assert migrate([spec], clean_server).ok
    after = positions(clean_server)
    assert after["BILLING"] == before["BILLING"] == (35, 25)
    assert after["AUDIT"][1] == before["AUDIT"][1] == 20  # the ack floor (a stream sequence)
    assert after["LATEST"][0] == 0  # created at the end: nothing pending
    # The next messages are the ones after the acknowledged ones.
    assert run(consume(clean_server, "ORDERS", "BILLING", 2)) == [b"m25", b"m26"]
    assert run(consume(clean_server, "ORDERS", "AUDIT", 1)) == [b"m21"]
    assert not plan([spec], clean_server).has_changes


def test_a_concurrent_publisher_loses_nothing_it_was_told_was_stored(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    assert engine_apply(
        write(tmp_path, STREAM.format(extra="storage: file"), "a.yaml"), clean_server
    ).ok
    run(publish_many(clean_server, ["orders.new"], 2000, tag="old"))
    spec = write(tmp_path, STREAM.format(extra="storage: memory"), "b.yaml")

    async def scenario() -> tuple[list[bytes], int]:
        acked: list[bytes] = []
        refused = 0
        stop = asyncio.Event()
        nc = await nats.connect(clean_server.url)

        async def publisher() -> None:
            nonlocal refused
            i = 0
            while not stop.is_set():
                data = f"live{i}".encode()
                i += 1
                try:
                    reply = await nc.request("orders.live", data, timeout=1)
                except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                    refused += 1
                    continue
                if "error" in json.loads(reply.data):
                    refused += 1
                    continue
                acked.append(data)

        task = asyncio.ensure_future(publisher())
        await asyncio.sleep(0.2)
        result = await engine.apply([spec], options(clean_server), migrate=True)
        assert result.ok
        await asyncio.sleep(0.2)
        stop.set()
        await task
        await nc.close()
        return acked, refused

    acked, _refused = run(scenario())
    final = run(dump(clean_server, "ORDERS"))
    old = [m for m in final if m[0] == "orders.new"]
    live = [m[1] for m in final if m[0] == "orders.live"]
    assert len(old) == 2000
    assert final[:2000] == old  # the old messages first, in order
    assert live == acked  # every acknowledged publish, in order, and nothing else
    assert len(acked) > 0


KV = """
kind: KeyValue
name: settings
history: 5
{extra}
"""


def test_a_key_value_bucket_keeps_every_revision_of_every_key(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    assert engine_apply(
        write(tmp_path, KV.format(extra="storage: file"), "a.yaml"), clean_server
    ).ok

    async def fill() -> None:
        nc = await nats.connect(clean_server.url)
        kv = await nc.jetstream().key_value("settings")
        for round_ in range(4):
            for key in ("a", "b", "c.d"):
                await kv.put(key, f"{key}={round_}".encode())
        await kv.delete("b")
        await kv.purge("c.d")
        await nc.close()

    run(fill())
    expected = run(dump(clean_server, "KV_settings"))
    spec = write(tmp_path, KV.format(extra="storage: memory"), "b.yaml")
    (step,) = plan([spec], clean_server, migrate=True).steps
    assert isinstance(step, Migrate) and step.kind == "KeyValue"
    assert migrate([spec], clean_server).ok
    assert run(dump(clean_server, "KV_settings")) == expected

    async def read() -> dict[str, Any]:
        nc = await nats.connect(clean_server.url)
        kv = await nc.jetstream().key_value("settings")
        out = {"a": (await kv.get("a")).value, "history": len(await kv.history("a"))}
        await nc.close()
        return out

    assert run(read()) == {"a": b"a=3", "history": 4}
    assert not plan([spec], clean_server).has_changes


OBJ = """
kind: ObjectStore
name: files
{extra}
"""


def test_an_object_store_keeps_every_object_readable_and_identical(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    assert engine_apply(
        write(tmp_path, OBJ.format(extra="storage: file"), "a.yaml"), clean_server
    ).ok
    blobs = {f"blob{i}": bytes(range(256)) * (200 * (i + 1)) for i in range(3)}

    async def put() -> None:
        nc = await nats.connect(clean_server.url)
        store = await nc.jetstream().object_store("files")
        for name, data in blobs.items():
            await store.put(name, data)
        await nc.close()

    async def get() -> dict[str, bytes]:
        nc = await nats.connect(clean_server.url)
        store = await nc.jetstream().object_store("files")
        out = {name: (await store.get(name)).data for name in blobs}
        await nc.close()
        return out

    run(put())
    spec = write(tmp_path, OBJ.format(extra="storage: memory"), "b.yaml")
    assert migrate([spec], clean_server).ok
    assert run(get()) == blobs
    assert not plan([spec], clean_server).has_changes


def test_refused_with_the_numbers_when_the_account_has_no_room(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    server = server_factory(
        config={
            "accounts": {
                "LIMITED": {
                    "jetstream": {"max_file": 3 * 1024 * 1024, "max_mem": 64 * 1024 * 1024},
                    "users": [{"user": "team", "password": "s3cret-pw"}],
                }
            }
        }
    )
    conn = ConnectionOptions(servers=server.url, user="team", password="s3cret-pw")
    first = write(tmp_path, STREAM.format(extra="storage: file"), "a.yaml")
    assert run(engine.apply([first], conn, lock_timeout=None)).ok

    async def fill() -> None:
        nc = await nats.connect(server.url, user="team", password="s3cret-pw")
        for i in range(1500):
            await nc.request("orders.new", b"x" * 1000 + str(i).encode(), timeout=5)
        await nc.close()

    run(fill())
    spec = write(tmp_path, STREAM.format(extra="retention: workqueue"), "b.yaml")
    with pytest.raises(SpecError) as refused:
        run(engine.plan([spec], conn, migrate=True))
    message = str(refused.value)
    assert message.startswith(f"{spec}:")
    assert "needs 1.7 MiB of file storage for its copies" in message, message
    assert "the account has 1.5 MiB free (limit 3.0 MiB, 1.5 MiB used)" in message, message
    # Apply refuses the same way, before any change.
    with pytest.raises(SpecError):
        run(engine.apply([spec], conn, migrate=True, lock_timeout=None))

    async def count() -> tuple[int, list[str]]:
        async with open_client(conn) as client:
            info = await client.stream_info("ORDERS")
            return int(info["state"]["messages"]), sorted(await client.stream_names())

    assert run(count()) == (1500, ["ORDERS"])


def test_repeated_msg_ids_outside_the_window_survive_a_migration(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The origin stores a repeated Nats-Msg-Id published outside its duplicate window; a
    sourcing stream with a window would drop the repeats (the server fact is checked
    first), the migration's copies have none and keep them."""
    spec = STREAM.format(extra="duplicate_window: 200ms")
    assert engine_apply(write(tmp_path, spec, "a.yaml"), clean_server).ok

    async def repeat() -> None:
        nc = await nats.connect(clean_server.url)
        for i in range(3):
            await nc.request("orders.x", f"again{i}".encode(), headers={"Nats-Msg-Id": "A"})
            await asyncio.sleep(0.3)
        await nc.close()

    run(repeat())
    expected = run(dump(clean_server, "ORDERS"))
    assert len(expected) == 3
    windowed = {
        "name": "WINDOWED",
        "sources": [{"name": "ORDERS"}],
        "duplicate_window": 60_000_000_000,
    }
    run(api(clean_server, "STREAM.CREATE.WINDOWED", windowed))

    async def settled() -> int:
        for _ in range(50):
            info = await api(clean_server, "STREAM.INFO.WINDOWED")
            if not (info.get("sources") or [{}])[0].get("lag", 1):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        info = await api(clean_server, "STREAM.INFO.WINDOWED")
        return int(info["state"]["messages"])

    assert run(settled()) == 1  # the server fact: two of three dropped, silently
    run(api(clean_server, "STREAM.DELETE.WINDOWED"))
    migrated = STREAM.format(extra="duplicate_window: 200ms\nstorage: memory")
    assert migrate([write(tmp_path, migrated, "b.yaml")], clean_server).ok
    assert run(dump(clean_server, "ORDERS")) == expected


@pytest.mark.parametrize("version", ["2.10.26", "2.12.8"])
def test_older_servers_migrate_and_say_consumers_restart(
    server_factory: Callable[..., NatsServer], tmp_path: Path, version: str
) -> None:
    """Before 2.14 there is no CONSUMER.RESET: the plan says each consumer restarts from
    its deliver policy, and the messages are all kept."""
    server = server_factory(version=version)
    first = write(tmp_path, CONSUMERS.format(extra="storage: file"), "a.yaml")
    assert engine_apply(first, server).ok
    run(publish_many(server, ["orders.new", "orders.paid"], 40))
    run(api(server, "STREAM.MSG.DELETE.ORDERS", {"seq": 3}))
    expected = run(dump(server, "ORDERS"))
    spec = write(tmp_path, CONSUMERS.format(extra="storage: memory"), "b.yaml")
    (step,) = plan([spec], server, migrate=True).steps
    assert isinstance(step, Migrate)
    assert not any(fate.position for fate in step.consumers)
    assert any("keeping positions needs nats-server 2.14" in r for r in step.reasons)
    assert migrate([spec], server).ok
    assert run(dump(server, "ORDERS")) == expected
    assert positions(server)["BILLING"] == (39, 0)  # from the start again
    assert not plan([spec], server).has_changes
