"""This hour's changes attacked on real nats-server processes: KeyValue keys read in
batches (``KeyValueCalls.kv_scan``), a key whose last revision may have been deleted
checked against the leader's deleted sequences."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats
import pytest
from servers import Cluster, delete_all_streams, run, write

from reconciler.errors import RequestTimeout, ServerError
from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.planning.entries import MANAGED_HEADER, marker_headers
from reconciler.specs.spec import DEFAULT_OWNER

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

SHRUNK = "shrunk"
#: An application's keys whose messages are deleted one by one while a replica sleeps:
#: steps of the stream's log that move no sequence, for the replica to apply after.
APP_KEYS = 3000


def _state(node: Any, stream: str) -> dict[str, Any]:
    """``node``'s replica of ``stream``: its state (the server's own monitoring)."""
    details = node.monitor("jsz?streams=true").get("account_details") or []
    streams = [one for account in details for one in account.get("stream_detail") or []]
    return next((one["state"] for one in streams if one["name"] == stream), {})


async def _answering(node: Any, stream: str) -> None:
    """Wait until ``node`` subscribes to ``stream``'s direct gets."""
    test = f"subsz?subs=1&test=%24JS.API.DIRECT.GET.{stream}"
    for _ in range(200):
        subs = node.monitor(test).get("subscriptions_list") or []
        if any(sub.get("qgroup") for sub in subs):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{node.name} takes no direct gets of {stream}")


async def _request(nc: Any, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request(subject, json.dumps(body).encode(), timeout=10)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


async def _fill(nc: Any) -> tuple[dict[str, int], list[int], list[int]]:
    """A declared key and an undeclared one of this owner's, each written twice, and an
    application's keys: (the keys' first revisions, their last ones, the application's)."""
    js = nc.jetstream()
    managed = marker_headers(DEFAULT_OWNER)
    kept: dict[str, int] = {}
    deleting: list[int] = []
    for key in ("cfg.k", "old.m"):
        kept[key] = (await js.publish(f"$KV.{SHRUNK}.{key}", b"1", headers=managed)).seq
        deleting.append((await js.publish(f"$KV.{SHRUNK}.{key}", b"2", headers=managed)).seq)
    app: list[int] = []
    for start in range(0, APP_KEYS, 500):
        acks = await asyncio.gather(
            *(
                js.publish(f"$KV.{SHRUNK}.app.{i}", b"x")
                for i in range(start, min(start + 500, APP_KEYS))
            )
        )
        app += [ack.seq for ack in acks]
    return kept, deleting, app


async def _delete_then_shrink(
    nc: Any, config: dict[str, Any], app: list[int], deleting: list[int]
) -> None:
    """The application's messages deleted one by one, then the keys' last revisions, then
    the bucket's history set to 1: none of it moves the stream's last sequence."""
    stream = config["name"]
    remove = f"$JS.API.STREAM.MSG.DELETE.{stream}"
    for start in range(0, len(app), 250):
        await asyncio.gather(*(_request(nc, remove, {"seq": seq}) for seq in app[start:][:250]))
    for seq in deleting:
        assert (await _request(nc, remove, {"seq": seq})).get("success")
    update = f"$JS.API.STREAM.UPDATE.{stream}"
    done = await _request(nc, update, {**config, "max_msgs_per_subject": 1})
    assert done.get("config", {}).get("max_msgs_per_subject") == 1, done


Revisions = dict[str, int]


async def _read(client: Any, named: set[str]) -> tuple[Revisions, Revisions] | None:
    """A scan of ``named`` (and the keys marked) and, right after, each key read from the
    leader: their revisions by key; None when the cluster did not answer (a replica
    catching up, a leader elected)."""
    try:
        scan = await client.kv_scan({SHRUNK: named}, MANAGED_HEADER)
        keys = {*named, "old.m"}
        leader = {key: await client.kv_entry(SHRUNK, key) for key in sorted(keys)}
    except (RequestTimeout, ServerError):
        return None
    return (
        {key: entry.revision for (_, key), entry in scan.items()},
        {key: entry.revision for key, entry in leader.items() if entry is not None},
    )


async def _caught_up(
    client: Any, nc: Any, follower: Any, stream: str
) -> list[tuple[Revisions, Revisions]]:
    """A key written and taken by the replica (after every delete, in its log's order),
    then 20 reads of it and the declared key (more asked where one is not answered)."""
    live = await nc.jetstream().publish(f"$KV.{SHRUNK}.live", b"1")
    while int(_state(follower, stream).get("last_seq") or 0) < live.seq:
        await asyncio.sleep(0.05)
    reads = []
    for _ in range(300):  # the cluster may elect a leader meanwhile
        if (read := await _read(client, {"cfg.k", "live"})) is not None:
            reads.append(read)
        if len(reads) == 20:
            break
    return reads


@pytest.mark.cluster
def test_a_replica_behind_a_delete_before_the_history_shrank_is_not_taken(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A bucket of history 2: a declared key and an undeclared one of this owner's each
    lose their last revision to STREAM.MSG.DELETE while a replica sleeps, their first
    left; then the bucket's history is set to 1 (its stream's
    ``max_msgs_per_subject``). Each key now holds as many messages as the history, so
    the scan took it for one whose last revision could not have been deleted, and took
    the woken replica's answer: the deleted revision, at the leader's last sequence (a
    delete moves no sequence, nor does a config update). The plan saw the declared key
    holding the value it declares (no change) where the leader holds the older one."""
    spec = write(
        tmp_path, f"kind: KeyValue\nname: {SHRUNK}\nreplicas: 3\nhistory: 2\ndeny_delete: false\n"
    )
    connect = ConnectionOptions(servers=cluster.urls, timeout=15)
    assert run(engine.apply([spec], connect)).ok
    stream = f"KV_{SHRUNK}"
    try:

        async def scenario() -> tuple[list[Any], list[Any], dict[str, int]]:
            nc = await nats.connect(servers=[n.url for n in cluster.nodes])
            try:
                kept, deleting, app = await _fill(nc)
                info = await _request(nc, f"$JS.API.STREAM.INFO.{stream}", {})
                leader, config = info["cluster"]["leader"], info["config"]
                last = info["state"]["last_seq"]
                meta = cluster.nodes[0].monitor("jsz").get("meta_cluster", {}).get("leader")
                # the sleeper is neither the stream's leader nor the cluster's (the
                # history's update needs the latter)
                follower = next(n for n in cluster.nodes if n.name not in (leader, meta))
                await _answering(follower, stream)
                while int(_state(follower, stream).get("last_seq") or 0) < last:
                    await asyncio.sleep(0.05)
                at_leader = next(n for n in cluster.nodes if n.name == leader)
                await nc.close()
                nc = await nats.connect(at_leader.url)
                at_follower = ConnectionOptions(servers=follower.url, timeout=15)
                async with open_client(at_follower) as client:
                    follower.pause()
                    try:
                        await _delete_then_shrink(nc, config, app, deleting)
                    finally:
                        follower.resume()
                    # reads while the replica applies the deletes (it ends holding the
                    # leader's two messages, or none: it trims them to the history first)
                    found = []
                    while len(found) < 200:
                        if int(_state(follower, stream).get("messages") or 0) <= len(kept):
                            break
                        if (read := await _read(client, {"cfg.k"})) is not None:
                            found.append(read)
                    after = await _caught_up(client, nc, follower, stream)
                return found, after, kept
            finally:
                await nc.close()

        found, after, kept = run(scenario())
        assert found  # read while the replica was behind
        assert found[0][1] == kept  # the leader's: each key's first revision
        assert all(scan == leader for scan, leader in found), found
        assert after  # read once the replica took every delete
        assert all(scan == leader for scan, leader in after), after
    finally:
        run(delete_all_streams(cluster.url))
