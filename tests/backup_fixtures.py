"""What the backup tests share: streams with data and consumers part-way through their
work, exact dumps of messages and consumer positions, and a folder written the way the
nats CLI writes one (natscli v0.4.0, jsm.go snapshots.go)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats
from migration_helpers import dump_exact
from servers import NatsServer, options

from reconciler.jetstream import open_client
from reconciler.jetstream.snapshots import snapshot_stream

SPECS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
---
kind: Consumer
stream: ORDERS
name: worker
ack_policy: explicit
---
kind: Consumer
stream: ORDERS
name: idle
ack_policy: explicit
---
kind: Stream
name: LOGS
subjects: ["logs.>"]
compression: s2
---
kind: Stream
name: FAST
subjects: ["fast.>"]
storage: memory
---
kind: KeyValue
name: settings
history: 5
"""


async def _publish(nc: Any, subject: str, count: int, tag: str) -> None:
    js = nc.jetstream()
    for i in range(count):
        headers = {"X-Tag": tag, "X-Index": str(i), "Nats-Msg-Id": f"{tag}-{i}"}
        await js.publish(subject.format(i=i % 4), f"{tag}-{i}".encode() * 3, headers=headers)


async def fill(server: NatsServer) -> None:
    """Data in every stream of SPECS (applied before): headers on every message; the
    ``worker`` consumer has 10 delivered, 6 of them acked (4 pending); ``idle`` none."""
    nc = await nats.connect(server.url)
    try:
        await _publish(nc, "orders.{i}", 120, "o")
        await _publish(nc, "logs.{i}", 300, "l")
        await _publish(nc, "fast.{i}", 20, "f")
        js = nc.jetstream()
        for i in range(12):
            await js.publish(f"$KV.settings.key{i % 5}", f"value-{i}".encode())
        sub = await js.pull_subscribe_bind("worker", "ORDERS")
        messages = await sub.fetch(10, timeout=5)
        assert len(messages) == 10
        for message in messages[:6]:
            await message.ack_sync()
        await nc.flush()
    finally:
        await nc.close()


def _seqs(position: dict[str, Any]) -> tuple[int, int]:
    return int(position["consumer_seq"]), int(position["stream_seq"])


async def consumer_positions(server: NatsServer, stream: str) -> dict[str, tuple[Any, ...]]:
    async with open_client(options(server)) as client:
        listed = await client.list_consumers(stream)
    return {
        str(c["name"]): (
            _seqs(c["delivered"]),
            _seqs(c["ack_floor"]),
            c["num_ack_pending"],
            c["num_pending"],
        )
        for c in listed
    }


async def everything(server: NatsServer, streams: list[str]) -> dict[str, Any]:
    """Per stream: every message exactly (sequence, time, subject, data, headers), the
    state, and each consumer's positions."""
    out: dict[str, Any] = {}
    async with open_client(options(server)) as client:
        states = {s: (await client.stream_info(s))["state"] for s in streams}
    for stream in streams:
        state = {k: states[stream][k] for k in ("messages", "bytes", "first_seq", "last_seq")}
        out[stream] = (
            await dump_exact(server, stream),
            state,
            await consumer_positions(server, stream),
        )
    return out


async def natscli_folder(server: NatsServer, stream: str, folder: Path) -> None:
    """``folder/backup.json`` and ``folder/stream.tar.s2`` as jsm.go's SnapshotToDirectory
    writes them: the SNAPSHOT reply's config and state, indented by two spaces, and the
    chunks appended as they come (consumers included, as ``nats account backup`` asks)."""
    folder.mkdir(parents=True, exist_ok=True)
    async with open_client(options(server)) as client:
        with open(folder / "stream.tar.s2", "wb") as data:
            snap = await snapshot_stream(client, stream, data.write)
    meta = {"config": snap.config, "state": snap.state}
    (folder / "backup.json").write_text(json.dumps(meta, indent=2))
