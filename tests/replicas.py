"""A replica of a KeyValue bucket's stream put behind its leader, for the tests of the
batched reads (``KeyValueCalls.kv_scan``): what a node's own monitoring says of its
replica, when it answers direct gets, and a bucket filled with an application's keys
beside this owner's, whose steps the replica applies late."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from reconciler.planning.entries import marker_headers
from reconciler.specs.spec import DEFAULT_OWNER

#: An application's keys written beside this owner's: removed one by one while a replica
#: sleeps, each removal a step of the stream's log that moves no sequence.
APP_KEYS = 3000


def replica_state(node: Any, stream: str) -> dict[str, Any]:
    """``node``'s replica of ``stream``: its state (the server's own monitoring)."""
    details = node.monitor("jsz?streams=true").get("account_details") or []
    streams = [one for account in details for one in account.get("stream_detail") or []]
    return next((one["state"] for one in streams if one["name"] == stream), {})


async def answering(node: Any, stream: str) -> None:
    """Wait until ``node`` subscribes to ``stream``'s direct gets."""
    test = f"subsz?subs=1&test=%24JS.API.DIRECT.GET.{stream}"
    for _ in range(200):
        subs = node.monitor(test).get("subscriptions_list") or []
        if any(sub.get("qgroup") for sub in subs):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{node.name} takes no direct gets of {stream}")


async def api_request(nc: Any, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    """One JetStream API request on ``nc``, its JSON answer."""
    reply = await nc.request(subject, json.dumps(body).encode(), timeout=10)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


async def app_keys(nc: Any, bucket: str, start: int = 0) -> list[int]:
    """:data:`APP_KEYS` application keys ``app.N`` written to ``bucket``: their sequences."""
    js = nc.jetstream()
    app: list[int] = []
    for first in range(start, start + APP_KEYS, 500):
        acks = await asyncio.gather(
            *(
                js.publish(f"$KV.{bucket}.app.{i}", b"x")
                for i in range(first, min(first + 500, start + APP_KEYS))
            )
        )
        app += [ack.seq for ack in acks]
    return app


async def filled(nc: Any, bucket: str) -> tuple[dict[str, int], list[int], list[int]]:
    """``bucket`` with a declared key and an undeclared one of this owner's, each written
    twice, and an application's keys: (the keys' first revisions, their last ones, the
    application's sequences)."""
    js = nc.jetstream()
    managed = marker_headers(DEFAULT_OWNER)
    kept: dict[str, int] = {}
    deleting: list[int] = []
    for key in ("cfg.k", "old.m"):
        kept[key] = (await js.publish(f"$KV.{bucket}.{key}", b"1", headers=managed)).seq
        deleting.append((await js.publish(f"$KV.{bucket}.{key}", b"2", headers=managed)).seq)
    return kept, deleting, await app_keys(nc, bucket)
