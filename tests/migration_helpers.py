"""Helpers of the migration tests: dump a stream's messages, publish with headers."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import nats
from servers import NatsServer, options

from reconciler.jetstream import open_client
from reconciler.model.migration import SOURCE_HEADER

Message = tuple[str, bytes, tuple[tuple[str, str], ...]]


async def api(server: NatsServer, op: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    async with open_client(options(server)) as client:
        return await client.request(op, body)


async def dump(server: NatsServer, stream: str) -> list[Message]:
    """Every message of ``stream`` in order: subject, payload, headers (sorted, without
    the header a copy adds)."""
    async with open_client(options(server)) as client:
        info = await client.stream_info(stream)
        state = info["state"]
        out: list[Message] = []
        seq = int(state["first_seq"])
        while seq <= int(state["last_seq"]):
            message = await client.stored_message(stream, {"seq": seq, "next_by_subj": ">"})
            if message is None:
                break
            headers = tuple(
                sorted((k, v) for k, v in message["headers"].items() if k != SOURCE_HEADER)
            )
            data = base64.b64decode(message.get("data") or "")
            out.append((str(message["subject"]), data, headers))
            seq = int(message["seq"]) + 1
        return out


async def settled_dumps(server: NatsServer, streams: list[str]) -> list[list[Message]]:
    """:func:`dump` of each of ``streams`` once two readings 0.3 s apart agree: a migration
    killed after its new stream was made leaves that stream copying on in the server
    (a loaded machine read it mid-copy, then whole). Gives up after 200 readings and
    returns the last one (the caller's comparison then says what moved)."""
    last: list[list[Message]] = []
    for _ in range(200):
        now = [await dump(server, name) for name in streams]
        if now == last:
            break
        last = now
        await asyncio.sleep(0.3)
    return last


async def publish_many(server: NatsServer, subjects: list[str], count: int, tag: str = "m") -> None:
    nc = await nats.connect(server.url)
    try:
        for i in range(count):
            subject = subjects[i % len(subjects)]
            headers = {"Nats-Msg-Id": f"{tag}-{i}", "X-Order": str(i)}
            reply = await nc.request(subject, f"{tag}{i}".encode(), headers=headers, timeout=5)
            assert "error" not in json.loads(reply.data), reply.data
    finally:
        await nc.close()


async def dump_exact(server: NatsServer, stream: str) -> list[tuple[Any, ...]]:
    """Every message with its sequence, timestamp and every header, exactly as stored."""
    async with open_client(options(server)) as client:
        info = await client.stream_info(stream)
        out: list[tuple[Any, ...]] = []
        seq = int(info["state"]["first_seq"])
        while seq <= int(info["state"]["last_seq"]):
            message = await client.stored_message(stream, {"seq": seq, "next_by_subj": ">"})
            if message is None:
                break
            headers = tuple(sorted(message["headers"].items()))
            out.append(
                (message["seq"], message["time"], message["subject"], message.get("data"), headers)
            )
            seq = int(message["seq"]) + 1
        return out


def killed_migration_script(stream: str) -> str:
    """A Python program migrating ``stream`` that kills itself with SIGKILL at a phase
    boundary: ``python -c SCRIPT URL TARGET_JSON BOUNDARY`` (the fault tests' child)."""
    return f"""
import asyncio, json, os, signal, sys
from reconciler.execution.migrate import migrate
from reconciler.jetstream import ConnectionOptions, open_client

url, target, at = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]

async def main():
    async with open_client(ConnectionOptions(servers=url)) as client:
        async def hook(label):
            if label == at:
                os.kill(os.getpid(), signal.SIGKILL)
        await migrate(client, {stream!r}, target, on_phase=hook)

asyncio.run(main())
"""
