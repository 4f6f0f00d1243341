"""This hour's changes attacked on real nats-server processes: declared KeyValue keys
read in batches (``KeyValueCalls.kv_scan``), taken from a replica only as fresh as the
leader's listing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import nats
import pytest
from replicas import APP_KEYS, answering, api_request, app_keys, replica_state
from servers import Cluster, delete_all_streams, run, write

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.planning.entries import MANAGED_HEADER, marker_headers
from reconciler.specs.spec import DEFAULT_OWNER

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

BUCKET = "stale"


def _holds(node: Any, stream: str) -> bool:
    return bool(replica_state(node, stream).get("messages"))


def _last(node: Any, stream: str) -> int:
    return int(replica_state(node, stream).get("last_seq") or 0)


@pytest.mark.cluster
def test_a_replica_behind_a_purge_is_not_taken_for_the_leader(
    cluster: Cluster, tmp_path: Path, lagging_replica_alone: None
) -> None:
    """A declared key is purged away (STREAM.PURGE with its subject, as ``nats stream
    purge --subject`` does) while one replica sleeps; a purge moves no sequence, so that
    replica, woken and still applying the purges, answers the batch with the key's old
    message at the leader's last sequence. The scan took it: the plan saw the key holding
    its value (no change) where the leader holds none (to create). A key the leader's
    listing did not hold, answered by a batch, is now read from the leader."""
    spec = write(tmp_path, f"kind: KeyValue\nname: {BUCKET}\nreplicas: 3\n")
    connect = ConnectionOptions(servers=cluster.urls, timeout=15)
    assert run(engine.apply([spec], connect)).ok
    stream = f"KV_{BUCKET}"
    try:

        async def scenario() -> tuple[Any, Any]:
            nc = await nats.connect(servers=[n.url for n in cluster.nodes])
            try:
                js = nc.jetstream()
                managed = marker_headers(DEFAULT_OWNER)
                await js.publish(f"$KV.{BUCKET}.cfg.k", b"v1", headers=managed)
                await app_keys(nc, BUCKET)
                info = await api_request(nc, f"$JS.API.STREAM.INFO.{stream}", {})
                leader = info["cluster"]["leader"]
                last = info["state"]["last_seq"]
                follower = next(n for n in cluster.nodes if n.name != leader)
                # the follower answers direct gets of its own (a follower joins the
                # stream's direct gets once current, checked every two seconds), and a
                # client's direct get goes to the replica of the server it is connected to
                await answering(follower, stream)
                while _last(follower, stream) < last:  # and holds every message
                    await asyncio.sleep(0.05)
                # the purges through the leader, the scan's connection to the follower alone
                at_leader = next(n for n in cluster.nodes if n.name == leader)
                await nc.close()
                nc = await nats.connect(at_leader.url)
                async with open_client(
                    ConnectionOptions(servers=follower.url, timeout=15)
                ) as client:
                    follower.pause()
                    try:
                        purge = f"$JS.API.STREAM.PURGE.{stream}"
                        for start in range(0, APP_KEYS, 250):
                            await asyncio.gather(
                                *(
                                    api_request(nc, purge, {"filter": f"$KV.{BUCKET}.app.{i}"})
                                    for i in range(start, min(start + 250, APP_KEYS))
                                )
                            )
                        done = await api_request(nc, purge, {"filter": f"$KV.{BUCKET}.cfg.k"})
                        assert done.get("success") is True, done
                    finally:
                        follower.resume()
                    # scans while the replica applies the purges: none may hold the key
                    found = []
                    while len(found) < 200 and _holds(follower, stream):
                        found.append(await client.kv_scan({BUCKET: {"cfg.k"}}, MANAGED_HEADER))
                    leaders = await client.kv_entry(BUCKET, "cfg.k")
                return found, leaders
            finally:
                await nc.close()

        found, leaders = run(scenario())
        assert leaders is None  # the leader holds no message of it
        assert found  # read while the replica was behind
        assert all((BUCKET, "cfg.k") not in one for one in found), found
    finally:
        run(delete_all_streams(cluster.url))
