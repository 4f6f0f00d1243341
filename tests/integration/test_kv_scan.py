"""A declared bucket that applications fill (sessions, a cache): a plan finds this owner's
entries among thousands of keys it does not manage, on a real server of every supported
release, and shows what it showed when it read every key on its own.

The bucket holds keys of this owner (declared, and no longer declared: orphans), of
another owner (foreign), written by an application, deleted, purged, taken over by an
application, and keys whose headers try to pass for another key or for the marker.
``test_a_bucket_full_of_other_keys_plans_as_when_every_key_was_read`` encodes the plan the
tool made before batched reads (it passes on that code too); the tests after it prove the
batches (fewer requests, keys changed while a bucket is read, the fallbacks, a read-only
user)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import Cluster, NatsServer, delete_all_streams, options, run, write

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions
from reconciler.planning.entries import MANAGED_HEADER, marker_headers
from reconciler.planning.steps import Plan
from reconciler.specs.spec import DEFAULT_OWNER, MANAGED_VALUE

pytestmark = pytest.mark.integration

BUCKET = "sessions"
SECRET = "s3ss10n-Secret-never-print"
OLD_SECRET = "0ld-Secret-never-print-either"
SPECS = f"""
kind: KeyValue
name: {BUCKET}
history: 2
---
kind: KeyValueEntry
bucket: {BUCKET}
key: feature.a
value: "on"
---
kind: KeyValueEntry
bucket: {BUCKET}
key: feature.b
value: {SECRET}
secret: true
---
kind: KeyValueEntry
bucket: {BUCKET}
key: feature.c
value: "c"
"""
APP_KEYS = 2000
MANAGED = marker_headers(DEFAULT_OWNER)
TEAM_B = marker_headers("team-b")
#: This owner's entries no spec declares: what a plan lists as orphans.
ORPHANS = [f"old.{i:03d}" for i in range(40)] + ["old.secret", "forged.1"]
FOREIGN = [f"team.{i:03d}" for i in range(20)]


def app_value(index: int) -> bytes:
    return f"app-value-{index}".encode()


async def _put(js: Any, writes: list[tuple[str, bytes, dict[str, str] | None]]) -> None:
    """Each write acknowledged, 256 at a time."""
    for start in range(0, len(writes), 256):
        part = writes[start : start + 256]
        await asyncio.gather(
            *(js.publish(f"$KV.{BUCKET}.{key}", value, headers=h) for key, value, h in part)
        )


async def fill(url: str) -> None:
    """The bucket as applications and other owners left it (the tool applied first)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        writes: list[tuple[str, bytes, dict[str, str] | None]] = [
            (f"app.{i:05d}", app_value(i), None) for i in range(APP_KEYS)
        ]
        writes += [(key, f"old-{key}".encode(), MANAGED) for key in ORPHANS[:40]]
        writes.append(
            ("old.secret", OLD_SECRET.encode(), marker_headers(DEFAULT_OWNER, secret=True))
        )
        # its own headers name another key and sequence: the server's lines win
        forged = {**MANAGED, "Nats-Subject": f"$KV.{BUCKET}.feature.a", "Nats-Sequence": "1"}
        writes.append(("forged.1", b"forged", forged))
        # the marker's name in another case: not the tool's marker (read exactly as before)
        writes.append(("cased.1", b"cased", {MANAGED_HEADER.lower(): MANAGED_VALUE}))
        writes += [(key, b"theirs", TEAM_B) for key in FOREIGN]
        writes += [(f"gone.{i:03d}", b"was ours", MANAGED) for i in range(100)]
        writes += [(f"purged.{i:03d}", b"was ours", MANAGED) for i in range(50)]
        writes += [(f"taken.{i:03d}", b"was ours", MANAGED) for i in range(10)]
        await _put(js, writes)
        after: list[tuple[str, bytes, dict[str, str] | None]] = [
            (f"gone.{i:03d}", b"", {"KV-Operation": "DEL"}) for i in range(100)
        ]
        after += [
            (f"purged.{i:03d}", b"", {"KV-Operation": "PURGE", "Nats-Rollup": "sub"})
            for i in range(50)
        ]
        after += [(f"taken.{i:03d}", b"an application's now", None) for i in range(10)]
        after.append(("feature.c", b"", {"KV-Operation": "DEL"}))  # declared, deleted
        await _put(js, after)
    finally:
        await nc.close()


def labels(notes: Any) -> list[str]:
    return sorted(note.label for note in notes)


def entry_labels(keys: list[str]) -> list[str]:
    return sorted(f"KeyValueEntry {BUCKET}/{key}" for key in keys)


def check(plan: Plan, pruned: Plan) -> None:
    """The plans reading every key on its own made of the filled bucket."""
    assert labels(plan.orphans) == entry_labels(ORPHANS)
    assert labels(plan.foreign) == entry_labels(FOREIGN)
    assert [(s.action, s.label) for s in plan.steps] == [
        ("create", f"KeyValueEntry {BUCKET}/feature.c")
    ]
    assert labels(plan.unchanged) == [
        f"KeyValue {BUCKET}",
        *entry_labels(["feature.a", "feature.b"]),
    ]
    deletes = sorted(s.label for s in pruned.steps if s.action == "delete")
    assert deletes == entry_labels(ORPHANS)
    revisions = {s.name: s.live["revision"] for s in pruned.steps if s.action == "delete"}
    assert all(isinstance(r, int) and r > 0 for r in revisions.values())
    assert labels(pruned.foreign) == entry_labels(FOREIGN)


@pytest.fixture
def filled(versioned_server: NatsServer, tmp_path: Path) -> Any:
    spec = write(tmp_path, SPECS)
    assert run(engine.apply([spec], options(versioned_server))).ok
    run(fill(versioned_server.url))
    yield versioned_server, spec
    run(delete_all_streams(versioned_server.url))


def test_a_bucket_full_of_other_keys_plans_as_when_every_key_was_read(filled: Any) -> None:
    server, spec = filled
    plan = run(engine.plan([spec], options(server)))
    pruned = run(engine.plan([spec], options(server), prune=True))
    check(plan, pruned)

    outputs = [
        reconcile("plan", spec.name, "--server", server.url, *flags, cwd=spec.parent)
        for flags in ((), ("--prune",), ("--prune", "--format", "json"))
    ]
    for done in outputs:
        assert done.returncode == 0, done.stderr
        said = done.stdout + done.stderr
        assert SECRET not in said and OLD_SECRET not in said
        assert "app-value-" not in said  # an application's values are never shown
    assert "old.secret" in outputs[1].stdout


# --- the batches --------------------------------------------------------------------------


def _received(server: NatsServer) -> int:
    """The messages the server received from clients so far (each request is one)."""
    return int(server.monitor("varz")["in_msgs"])


def test_a_plan_asks_for_batches_not_for_each_key(server_factory: Any, tmp_path: Path) -> None:
    """Reading each key on its own sent over 2,000 requests here."""
    server = server_factory()
    spec = write(tmp_path, SPECS)
    assert run(engine.apply([spec], options(server))).ok
    run(fill(server.url))
    before = _received(server)
    done = reconcile("plan", spec.name, "--server", server.url, "--prune", cwd=tmp_path)
    sent = _received(server) - before
    assert done.returncode == 0, done.stderr
    assert "delete KeyValueEntry sessions/old.000" in done.stdout
    # 2,232 keys: a listing, three batches, the 42 orphans, 20 foreign and the marked
    # look-alikes, the three declared keys, and the plan's own reads (73 when written;
    # 2,230 before batches)
    assert sent < 200, sent


Hook = Callable[[str], Awaitable[None]]


def test_keys_changed_while_a_bucket_is_read_are_read_as_they_are_then(
    clean_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two batches an application deletes, purges, removes and takes keys that a
    batch read already and keys no batch read yet, and writes new ones: the plan shows
    each key as the server held it when it was read, and none is an error."""
    from reconciler.jetstream import kv

    spec = write(tmp_path, SPECS)
    assert run(engine.apply([spec], options(clean_server))).ok
    run(fill(clean_server.url))
    monkeypatch.setattr(kv, "BATCH_KEYS", 50)
    monkeypatch.setattr(kv, "BATCHES_AT_ONCE", 1)
    calls: list[str] = []

    async def meanwhile(bucket: str) -> None:
        calls.append(bucket)
        if len(calls) != 1:
            return
        nc = await nats.connect(clean_server.url)
        try:
            js = nc.jetstream()
            await _put(
                js,
                [
                    ("cased.1", b"x", MANAGED),  # read already: marked now, still its key
                    ("forged.1", b"", {"KV-Operation": "DEL"}),  # read already
                    ("old.000", b"", {"KV-Operation": "DEL"}),  # not read yet
                    ("old.001", b"", {"KV-Operation": "PURGE", "Nats-Rollup": "sub"}),
                    ("old.002", b"an application's now", None),
                    ("app.01999", b"ours now", MANAGED),  # not read yet: marked now
                    ("zzz.new", b"after the listing", MANAGED),  # listed by no one
                ],
            )
            # old.003 gone altogether: no message at all, not even a delete marker
            body = json.dumps({"filter": f"$KV.{BUCKET}.old.003"}).encode()
            reply = await nc.request(f"$JS.API.STREAM.PURGE.KV_{BUCKET}", body, timeout=5)
            assert json.loads(reply.data).get("success") is True
        finally:
            await nc.close()

    monkeypatch.setattr(kv, "between_batches", meanwhile)
    plan = run(engine.plan([spec], options(clean_server)))

    assert len(calls) > 40  # 2,232 keys, 50 a batch
    gone = {"forged.1", "old.000", "old.001", "old.002", "old.003"}
    now = [key for key in ORPHANS if key not in gone] + ["cased.1", "app.01999"]
    assert labels(plan.orphans) == entry_labels(now)
    assert labels(plan.foreign) == entry_labels(FOREIGN)


def test_replies_cut_short_or_refused_as_too_many_are_asked_again(
    clean_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch over the server's 1,024 subjects (``413``) is asked in halves; a reply the
    server stops at ``max_bytes`` is asked again for the keys it did not answer."""
    from reconciler.jetstream import kv

    spec = write(tmp_path, SPECS)
    assert run(engine.apply([spec], options(clean_server))).ok
    run(fill(clean_server.url))
    expected = (
        run(engine.plan([spec], options(clean_server))),
        run(engine.plan([spec], options(clean_server), prune=True)),
    )
    check(*expected)
    for name, value in (("BATCH_KEYS", 3000), ("BATCH_BYTES", 2000)):
        with monkeypatch.context() as patched:
            patched.setattr(kv, name, value)
            check(
                run(engine.plan([spec], options(clean_server))),
                run(engine.plan([spec], options(clean_server), prune=True)),
            )


def test_the_scan_keeps_only_named_and_marked_keys(clean_server: NatsServer, tmp_path: Path):
    """No application's value is held: what the scan returns is the keys named and the
    keys carrying the marker (as each reads now, from the stream's leader)."""
    from reconciler.jetstream import open_client

    spec = write(tmp_path, SPECS)
    assert run(engine.apply([spec], options(clean_server))).ok
    run(fill(clean_server.url))

    async def scan() -> dict[tuple[str, str], Any]:
        async with open_client(options(clean_server)) as client:
            named = {BUCKET: {"feature.a", "app.00007", "nowhere"}}
            found = await client.kv_scan(named, "No-Such-Marker")
            marked = await client.kv_scan({BUCKET: set()}, MANAGED_HEADER)
            assert not client._no_multi_last
            return {**found, **{("marked", k): e for (_, k), e in marked.items()}}

    found = run(scan())
    assert sorted(k for b, k in found if b == BUCKET) == ["app.00007", "feature.a"]
    marked = {k: e for (b, k), e in found.items() if b == "marked"}
    # delete and purge markers carry no marker; the taken keys are an application's now
    assert sorted(marked) == sorted([*ORPHANS, *FOREIGN, "cased.1", "feature.a", "feature.b"])
    assert marked["forged.1"].value == b"forged" and marked["old.secret"].revision > 0


@pytest.mark.cluster
def test_a_replicated_bucket_read_from_its_replicas_plans_the_same(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Three replicas answer the batches (a direct get goes to any of them); the keys
    found marked are read again from the leader: the plan is the one of every key read."""
    spec = write(tmp_path, SPECS.replace("history: 2", "history: 2\nreplicas: 3"))
    connect = ConnectionOptions(servers=cluster.urls, timeout=15)
    assert run(engine.apply([spec], connect)).ok
    try:
        run(fill(cluster.url))
        check(run(engine.plan([spec], connect)), run(engine.plan([spec], connect, prune=True)))
    finally:
        run(delete_all_streams(cluster.url))


# --- fallbacks ----------------------------------------------------------------------------


def test_a_bucket_without_direct_gets_is_read_key_by_key(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    spec = write(tmp_path, SPECS.replace("history: 2", "history: 2\nallow_direct: false"))
    assert run(engine.apply([spec], options(clean_server))).ok
    run(fill(clean_server.url))
    check(
        run(engine.plan([spec], options(clean_server))),
        run(engine.plan([spec], options(clean_server), prune=True)),
    )


READ_ONLY = [
    "$JS.API.INFO",
    "$JS.API.STREAM.LIST",
    "$JS.API.STREAM.NAMES",
    "$JS.API.STREAM.INFO.>",
    "$JS.API.CONSUMER.LIST.>",
    "$JS.API.CONSUMER.NAMES.>",
    "$JS.API.CONSUMER.INFO.>",
    "$JS.API.STREAM.MSG.GET.>",
]


def _user(name: str, publish: list[str]) -> dict[str, Any]:
    return {
        "user": name,
        "password": "pw",
        "permissions": {"publish": {"allow": publish}, "subscribe": {"allow": ["_INBOX.>"]}},
    }


def test_a_read_only_user_plans_with_batches_or_without_them(
    server_factory: Any, tmp_path: Path
) -> None:
    """A plan needs only reads: a user allowed the API's reads plans the bucket with
    batched direct gets (reads too), and one that may not use direct gets plans it key by
    key (and is told nothing: the same plan)."""
    admin = _user("admin", [">"])
    reader = _user("reader", [*READ_ONLY, "$JS.API.DIRECT.GET.>"])
    no_direct = _user("nodirect", READ_ONLY)
    server = server_factory(users=[admin, reader, no_direct])
    spec = write(tmp_path, SPECS)
    as_admin = ("--user", "admin", "--password", "pw")
    done = reconcile("apply", "-y", spec.name, "--server", server.url, *as_admin, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run(fill(server.url.replace("nats://", "nats://admin:pw@")))
    for user in ("reader", "nodirect"):
        done = reconcile(
            "plan",
            spec.name,
            "--server",
            server.url,
            "--user",
            user,
            "--password",
            "pw",
            "--prune",
            "--format",
            "json",
            cwd=tmp_path,
        )
        assert done.returncode == 0, (user, done.stderr)
        plan = json.loads(done.stdout)
        deleted = sorted(c["name"] for c in plan["changes"] if c["action"] == "delete")
        assert deleted == sorted(ORPHANS), user
        assert "permission" not in done.stderr.lower()
