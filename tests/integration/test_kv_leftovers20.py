"""KeyValue entries read by a plan (``KeyValueCalls.kv_scan``, ``kv_entry``), on real
nats-server processes: a marker the server writes itself is read as the official
clients read it; a key found by the tool's marker is taken from a batch as fresh as a
declared key's must be; and a replica behind a delete of a key's last revision is not
taken for the leader."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import nats
import pytest
from replicas import answering, api_request, filled, replica_state
from servers import Cluster, NatsServer, delete_all_streams, options, run, write

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.planning.entries import MANAGED_HEADER, marker_headers
from reconciler.planning.steps import Create
from reconciler.specs.spec import DEFAULT_OWNER

pytestmark = pytest.mark.integration

EXPIRING = "expiring"
SECRET = "exp1red-Secret-never-print"


def _bucket(direct: bool) -> str:
    allow = "" if direct else "allow_direct: false\n"
    return f"kind: KeyValue\nname: {EXPIRING}\nlimit_marker_ttl: 1h\n{allow}"


ENTRIES = f"""
---
kind: KeyValueEntry
bucket: {EXPIRING}
key: feature
value: "on"
---
kind: KeyValueEntry
bucket: {EXPIRING}
key: db.password
value: {SECRET}
secret: true
"""


async def _expire_into_markers(server: NatsServer) -> None:
    """Write both keys as an apply would, with a per-message TTL of a second (a client's
    ``Create`` with a TTL, ADR-48), and wait until the server has replaced each by its
    own marker (``Nats-Marker-Reason: MaxAge``, which lives the bucket's
    ``limit_marker_ttl``)."""
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        for key, value, secret in (("feature", b"on", False), ("db.password", b"old", True)):
            headers = {**marker_headers(DEFAULT_OWNER, secret=secret), "Nats-TTL": "1s"}
            await js.publish(f"$KV.{EXPIRING}.{key}", value, headers=headers)
    finally:
        await nc.close()
    async with open_client(options(server)) as client:
        for _ in range(300):
            read = [await client.kv_entry(EXPIRING, key) for key in ("feature", "db.password")]
            if all(e is not None and "Nats-Marker-Reason" in e.headers for e in read):
                return
            await asyncio.sleep(0.1)
    raise AssertionError("the server wrote no marker in place of the expired keys")


@pytest.mark.parametrize("direct", [True, False], ids=["batched", "leader"])
def test_a_key_expired_into_the_servers_marker_is_created(
    clean_server: NatsServer, tmp_path: Path, direct: bool
) -> None:
    """A declared key whose value expired (a TTL, or the bucket's ``ttl``) on a bucket
    with ``limit_marker_ttl``: its last message is the server's marker, with
    ``Nats-Marker-Reason: MaxAge`` and no ``KV-Operation``. Both reads (batched, and
    each key on its own from the leader where the bucket takes no direct gets) took it
    for a value "": the plan showed an update from "" instead of a create. Now it is a
    PURGE, as nats.go reads it: the plan creates, the apply writes, the next plan is
    empty."""
    bucket = write(tmp_path, _bucket(direct), "bucket.yaml")
    assert run(engine.apply([bucket], options(clean_server))).ok
    run(_expire_into_markers(clean_server))

    async def entries() -> dict[str, str]:
        async with open_client(options(clean_server)) as client:
            found = await client.kv_scan({EXPIRING: {"feature", "db.password"}}, "x")
            alone = [await client.kv_entry(EXPIRING, k) for k in ("feature", "db.password")]
        assert all(e is not None and e.operation == "PURGE" for e in alone), alone
        return {key: entry.operation for (_, key), entry in found.items()}

    spec = write(tmp_path, _bucket(direct) + ENTRIES)
    plan = run(engine.plan([spec], options(clean_server)))
    assert sorted(step.label for step in plan.steps if isinstance(step, Create)) == [
        f"KeyValueEntry {EXPIRING}/db.password",
        f"KeyValueEntry {EXPIRING}/feature",
    ], [(type(step).__name__, step.label) for step in plan.steps]
    assert SECRET not in repr(plan.steps)
    assert run(entries()) == {"feature": "PURGE", "db.password": "PURGE"}
    assert run(engine.apply([spec], options(clean_server))).ok
    assert not run(engine.plan([spec], options(clean_server))).has_changes


class Asked:
    """The requests a client sent, counted by kind at its connection's publish (nats-py's
    request publishes too), as ``test_kv_declared.py`` counts them."""

    def __init__(self, nc: Any) -> None:
        self.counts: Counter[str] = Counter()
        publish = nc.publish

        async def counted(subject: str, *args: Any, **kwargs: Any) -> Any:
            kind = next((k for k in KINDS if f".{k}." in subject), subject)
            self.counts[kind] += 1
            return await publish(subject, *args, **kwargs)

        nc.publish = counted


KINDS = ("STREAM.MSG.GET", "DIRECT.GET", "STREAM.INFO")
OWNED = "owned"
#: This owner's entries no spec declares (found by their marker), among an application's.
MARKED = [f"old.{i:03d}" for i in range(300)]


def _behind(nc: Any) -> None:
    """Every batched reply ends saying it was answered at sequence 1 (a replica or a
    mirror behind the leader's listing)."""
    process = nc._process_msg

    async def late(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes):
        if sid in nc.raw_replies and headers and b"Nats-UpTo-Sequence" in headers:
            at = headers.rfind(b"\r\nNats-UpTo-Sequence:")
            end = headers.index(b"\r\n", at + 2)
            headers = headers[:at] + b"\r\nNats-UpTo-Sequence: 1" + headers[end:]
        await process(sid, subject, reply, data, headers)

    nc._process_msg = late


@pytest.mark.parametrize("replies", ["fresh", "behind"])
def test_marked_keys_are_taken_from_a_fresh_batch(
    clean_server: NatsServer, tmp_path: Path, replies: str
) -> None:
    """300 of this owner's entries no spec declares, among 1,500 of an application's
    keys: each was found by its marker in a batch, then read again on its own from the
    leader (300 STREAM.MSG.GETs). A batch answered as fresh as a declared key's must be
    is now taken as it is; one behind the leader's listing still sends its marked keys
    to the leader. Either way each is what a read of it on its own says."""
    spec = write(tmp_path, f"kind: KeyValue\nname: {OWNED}\nhistory: 3\n")
    assert run(engine.apply([spec], options(clean_server))).ok

    async def fill() -> None:
        nc = await nats.connect(clean_server.url)
        try:
            js = nc.jetstream()
            managed = marker_headers(DEFAULT_OWNER)
            writes = [(key, key.encode(), managed) for key in MARKED]
            writes += [(f"app.{i:04d}", b"an application's", None) for i in range(1500)]
            writes += [("old.000", b"again", managed)]
            for start in range(0, len(writes), 250):
                await asyncio.gather(
                    *(
                        js.publish(f"$KV.{OWNED}.{key}", value, headers=headers)
                        for key, value, headers in writes[start : start + 250]
                    )
                )
        finally:
            await nc.close()

    run(fill())

    async def scan() -> tuple[dict[str, Any], Counter[str], dict[str, Any]]:
        async with open_client(options(clean_server)) as client:
            if replies == "behind":
                _behind(client.nc)
            asked = Asked(client.nc)
            found = await client.kv_scan({OWNED: set()}, MANAGED_HEADER)
            counts = Counter(asked.counts)
            alone = {key: await client.kv_entry(OWNED, key) for key in MARKED}
        return {key: entry for (_, key), entry in found.items()}, counts, alone

    found, counts, alone = run(scan())
    assert found == alone
    assert found["old.000"].value == b"again"
    if replies == "fresh":
        assert counts["STREAM.MSG.GET"] == 0, counts
    else:
        assert counts["STREAM.MSG.GET"] == len(MARKED), counts
    assert 0 < counts["DIRECT.GET"] <= 4, counts


BEHIND = "behind"


@pytest.mark.cluster
@pytest.mark.slow
def test_a_replica_behind_a_delete_is_not_taken_for_the_leader(
    cluster: Cluster, tmp_path: Path, lagging_replica_alone: None
) -> None:
    """A bucket of history 5: a declared key and an undeclared one of this owner's each
    lose their last revision to STREAM.MSG.DELETE (``nats stream rmm``), their older
    one left, while a replica sleeps. A delete moves no sequence, and the key
    keeps its older revision (still listed): that replica, woken and still applying the
    deletes, answered a batch with the deleted revision at the leader's last sequence,
    and the scan took it. Now a key of a stream with deleted sequences that holds fewer
    messages than the bucket's history is taken from a batch only when the leader's
    deleted sequences (STREAM.INFO ``deleted_details``) do not hold its revision."""
    spec = write(
        tmp_path, f"kind: KeyValue\nname: {BEHIND}\nreplicas: 3\nhistory: 5\ndeny_delete: false\n"
    )
    connect = ConnectionOptions(servers=cluster.urls, timeout=15)
    assert run(engine.apply([spec], connect)).ok
    stream = f"KV_{BEHIND}"
    try:

        async def scenario() -> tuple[list[Any], dict[str, int], dict[str, Any]]:
            nc = await nats.connect(servers=[n.url for n in cluster.nodes])
            try:
                kept, deleting, app = await filled(nc, BEHIND)
                info = await api_request(nc, f"$JS.API.STREAM.INFO.{stream}", {})
                leader = info["cluster"]["leader"]
                last = info["state"]["last_seq"]
                follower = next(n for n in cluster.nodes if n.name != leader)
                # the follower answers direct gets of its own, and a client's direct get
                # goes to the replica of the server it is connected to
                await answering(follower, stream)
                while int(replica_state(follower, stream).get("last_seq") or 0) < last:
                    await asyncio.sleep(0.05)
                at_leader = next(n for n in cluster.nodes if n.name == leader)
                await nc.close()
                nc = await nats.connect(at_leader.url)
                remove = f"$JS.API.STREAM.MSG.DELETE.{stream}"
                async with open_client(
                    ConnectionOptions(servers=follower.url, timeout=15)
                ) as client:
                    follower.pause()
                    try:
                        for start in range(0, len(app), 250):
                            await asyncio.gather(
                                *(
                                    api_request(nc, remove, {"seq": seq})
                                    for seq in app[start:][:250]
                                )
                            )
                        for seq in deleting:  # the keys' last revisions, last of all
                            assert (await api_request(nc, remove, {"seq": seq})).get("success")
                    finally:
                        follower.resume()
                    # scans while the replica applies the deletes
                    everything = len(app) + len(deleting)
                    found = []
                    while len(found) < 200:
                        if (
                            int(replica_state(follower, stream).get("num_deleted") or 0)
                            >= everything
                        ):
                            break
                        found.append(await client.kv_scan({BEHIND: {"cfg.k"}}, MANAGED_HEADER))
                    leaders = {key: await client.kv_entry(BEHIND, key) for key in kept}
                return found, kept, leaders
            finally:
                await nc.close()

        found, kept, leaders = run(scenario())
        assert {key: entry.revision for key, entry in leaders.items()} == kept
        assert found  # read while the replica was behind
        read = [{key: entry.revision for (_, key), entry in one.items()} for one in found]
        assert all(one == kept for one in read), read
    finally:
        run(delete_all_streams(cluster.url))


@pytest.mark.parametrize("details", ["asked", "too many"])
def test_keys_that_may_have_lost_their_last_revision_are_checked_against_the_leader(
    clean_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, details: str
) -> None:
    """A bucket of history 5 whose stream has a deleted sequence (a key's last revision
    removed, its first left): any declared key may be behind such a delete on a replica
    (cfg.full too, its whole history held: the history may have been lowered since,
    ``test_attacks20.py``). The leader's deleted sequences are asked once (one more
    STREAM.INFO) and the batch is still taken; with more deleted sequences than
    :data:`kv.DELETED_DETAILS`, those keys are read from the leader. The same keys
    either way."""
    from reconciler.jetstream import kv

    if details == "too many":
        monkeypatch.setattr(kv, "DELETED_DETAILS", 0)
    spec = write(tmp_path, f"kind: KeyValue\nname: {OWNED}\nhistory: 5\ndeny_delete: false\n")
    assert run(engine.apply([spec], options(clean_server))).ok
    keys = [f"cfg.{i:03d}" for i in range(100)]

    async def fill() -> None:
        nc = await nats.connect(clean_server.url)
        try:
            js = nc.jetstream()
            managed = marker_headers(DEFAULT_OWNER)
            await asyncio.gather(*(js.publish(f"$KV.{OWNED}.{k}", b"1") for k in keys))
            for value in (b"1", b"2", b"3", b"4", b"5"):  # cfg.full: its whole history
                await js.publish(f"$KV.{OWNED}.cfg.full", value, headers=managed)
            last = await js.publish(f"$KV.{OWNED}.cfg.000", b"2")
            remove = f"$JS.API.STREAM.MSG.DELETE.KV_{OWNED}"
            done = await api_request(nc, remove, {"seq": last.seq})
            assert done.get("success") is True, done
        finally:
            await nc.close()

    run(fill())
    named = [*keys, "cfg.full"]

    async def scan() -> tuple[dict[str, Any], Counter[str], dict[str, Any]]:
        async with open_client(options(clean_server)) as client:
            asked = Asked(client.nc)
            found = await client.kv_scan({OWNED: set(named)}, MANAGED_HEADER)
            counts = Counter(asked.counts)
            alone = {key: await client.kv_entry(OWNED, key) for key in named}
        return {key: entry for (_, key), entry in found.items()}, counts, alone

    found, counts, alone = run(scan())
    assert found == alone
    assert found["cfg.000"].value == b"1"
    if details == "asked":
        assert counts["STREAM.MSG.GET"] == 0, counts
        assert counts["STREAM.INFO"] == 2, counts
    else:  # each key
        assert counts["STREAM.MSG.GET"] == len(named), counts
        assert counts["STREAM.INFO"] == 1, counts
