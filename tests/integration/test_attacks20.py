"""This hour's changes attacked on real nats-server processes: KeyValue keys read in
batches (``KeyValueCalls.kv_scan``), a key whose last revision may have been deleted
checked against the leader's deleted sequences."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import nats
import pytest
from replicas import answering, api_request, filled, replica_state
from servers import Cluster, delete_all_streams, run, write

from reconciler.errors import RequestTimeout, ServerError
from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.planning.entries import MANAGED_HEADER

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

SHRUNK = "shrunk"


async def _delete_then_shrink(
    nc: Any, config: dict[str, Any], app: list[int], deleting: list[int]
) -> None:
    """The application's messages deleted one by one, then the keys' last revisions, then
    the bucket's history set to 1: none of it moves the stream's last sequence."""
    stream = config["name"]
    remove = f"$JS.API.STREAM.MSG.DELETE.{stream}"
    for start in range(0, len(app), 250):
        await asyncio.gather(*(api_request(nc, remove, {"seq": seq}) for seq in app[start:][:250]))
    for seq in deleting:
        assert (await api_request(nc, remove, {"seq": seq})).get("success")
    update = f"$JS.API.STREAM.UPDATE.{stream}"
    done = await api_request(nc, update, {**config, "max_msgs_per_subject": 1})
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
    while int(replica_state(follower, stream).get("last_seq") or 0) < live.seq:
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
    cluster: Cluster, tmp_path: Path, lagging_replica_alone: None
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
                kept, deleting, app = await filled(nc, SHRUNK)
                info = await api_request(nc, f"$JS.API.STREAM.INFO.{stream}", {})
                leader, config = info["cluster"]["leader"], info["config"]
                last = info["state"]["last_seq"]
                meta = cluster.nodes[0].monitor("jsz").get("meta_cluster", {}).get("leader")
                # the sleeper is neither the stream's leader nor the cluster's (the
                # history's update needs the latter)
                follower = next(n for n in cluster.nodes if n.name not in (leader, meta))
                await answering(follower, stream)
                while int(replica_state(follower, stream).get("last_seq") or 0) < last:
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
                        if int(replica_state(follower, stream).get("messages") or 0) <= len(kept):
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
