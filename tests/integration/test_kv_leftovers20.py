"""KeyValue entries read by a plan (``KeyValueCalls.kv_scan``, ``kv_entry``), on real
nats-server processes: a marker the server writes itself is read as the official
clients read it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest
from servers import NatsServer, options, run, write

from reconciler.execution import run as engine
from reconciler.jetstream import open_client
from reconciler.planning.entries import marker_headers
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
