"""Declared KeyValue keys are read in batched direct gets (``KeyValueCalls.kv_scan``), on
real servers: a project declaring thousands of entries makes a few requests a plan, not
one a key, and reads each key as one read of it on its own would.

Every read is checked against ``kv_entry`` (STREAM.MSG.GET, the stream's leader) after
the scan; the requests are counted at the connection (``nc.publish``, which each
request goes through). Without batches, each declared key was
one STREAM.MSG.GET. Where batches are not answered (2.10, ``allow_direct: false``, a user
who may not use direct gets), each key is still read on its own, with the same result."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, delete_all_streams, options, run, write

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.jetstream.kv import KvEntry
from reconciler.planning.entries import MANAGED_HEADER, marker_headers
from reconciler.specs.spec import DEFAULT_OWNER

pytestmark = pytest.mark.integration

BUCKET = "decl"
BUCKET_SPEC = f"kind: KeyValue\nname: {BUCKET}\nhistory: 2\n"
MANAGED = marker_headers(DEFAULT_OWNER)
SECRET = "d3clared-Secret-never-print"
LIVE_SECRET = "l1ve-Secret-never-print-either"
#: Keys a project declares: written (0-1999), deleted (2000-2099), purged (2100-2149),
#: secrets (2150-2199), never written (2200-2499), and one whose own headers pass for
#: the server's lines of another key and stream.
DECLARED = [f"cfg.{i:04d}" for i in range(2500)] + ["cfg.forged"]
APP_KEYS = 1500
#: A second bucket, read in the same scan.
OPEN = "open"
OPEN_SPEC = f"kind: KeyValue\nname: {OPEN}\nhistory: 2\n"
BOTH = (BUCKET, OPEN)


def value(i: int) -> bytes:
    return f"v{i}".encode()


async def _put(
    js: Any, writes: list[tuple[str, bytes, dict[str, str] | None]], bucket: str = BUCKET
) -> None:
    for start in range(0, len(writes), 256):
        part = writes[start : start + 256]
        await asyncio.gather(
            *(js.publish(f"$KV.{bucket}.{key}", data, headers=h) for key, data, h in part)
        )


async def fill(url: str, app_keys: int = APP_KEYS, bucket: str = BUCKET) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        secret = marker_headers(DEFAULT_OWNER, secret=True)
        writes: list[tuple[str, bytes, dict[str, str] | None]] = [
            (f"cfg.{i:04d}", value(i), MANAGED) for i in range(2150)
        ]
        writes += [(f"cfg.{i:04d}", LIVE_SECRET.encode(), secret) for i in range(2150, 2200)]
        forged = {
            **MANAGED,
            "Nats-Stream": "KV_other",
            "Nats-Subject": f"$KV.{BUCKET}.cfg.0001",
            "Nats-Sequence": "1",
        }
        writes.append(("cfg.forged", b"forged", forged))
        writes += [(f"app.{i:05d}", b"an application's", None) for i in range(app_keys)]
        await _put(js, writes, bucket)
        after: list[tuple[str, bytes, dict[str, str] | None]] = [
            (f"cfg.{i:04d}", b"", {"KV-Operation": "DEL"}) for i in range(2000, 2100)
        ]
        after += [
            (f"cfg.{i:04d}", b"", {"KV-Operation": "PURGE", "Nats-Rollup": "sub"})
            for i in range(2100, 2150)
        ]
        await _put(js, after, bucket)
    finally:
        await nc.close()


class Asked:
    """The requests a client sent, counted by kind at its connection's publish (nats-py's
    request publishes too)."""

    def __init__(self, nc: Any) -> None:
        self.counts: Counter[str] = Counter()
        publish = nc.publish

        async def counted(subject: str, *args: Any, **kwargs: Any) -> Any:
            self.counts[self.kind(subject)] += 1
            return await publish(subject, *args, **kwargs)

        nc.publish = counted

    @staticmethod
    def kind(subject: str) -> str:
        for kind in ("STREAM.MSG.GET", "DIRECT.GET", "STREAM.INFO"):
            if f".{kind}." in subject:
                return kind
        return subject


Scan = dict[tuple[str, str], KvEntry]


async def scan_and_check(
    connect: ConnectionOptions,
    named: list[str],
    *,
    tamper: Callable[[Any], None] | None = None,
    buckets: tuple[str, ...] = (BUCKET,),
) -> tuple[Scan, Counter[str]]:
    """The scan of ``named`` in ``buckets`` (the requests it sent), each key checked
    against one read of it on its own afterwards (the buckets unchanged meanwhile)."""
    keys = [(bucket, key) for bucket in buckets for key in named]
    async with open_client(connect) as client:
        if tamper is not None:
            tamper(client.nc)
        asked = Asked(client.nc)
        found = await client.kv_scan({b: set(named) for b in buckets}, MANAGED_HEADER)
        counts = Counter(asked.counts)
        alone = await asyncio.gather(*(client.kv_entry(*one) for one in keys))
    expected = {one: entry for one, entry in zip(keys, alone, strict=True) if entry}
    assert {k: v for k, v in found.items() if k in set(keys)} == expected
    return found, counts


def check_states(found: Scan) -> None:
    """What the filled bucket's declared keys hold."""
    assert found[(BUCKET, "cfg.0007")].value == b"v7"
    assert found[(BUCKET, "cfg.0007")].headers == MANAGED
    assert found[(BUCKET, "cfg.2001")].operation == "DEL"
    assert found[(BUCKET, "cfg.2101")].operation == "PURGE"
    assert found[(BUCKET, "cfg.2160")].value == LIVE_SECRET.encode()
    assert (BUCKET, "cfg.2300") not in found  # never written
    forged = found[(BUCKET, "cfg.forged")]  # its own headers kept as its own, the server's not
    assert forged.value == b"forged" and forged.headers["Nats-Stream"] == "KV_other"
    assert forged.revision != 1


@pytest.fixture
def bucket(clean_server: NatsServer, tmp_path: Path) -> Iterator[NatsServer]:
    assert run(engine.apply([write(tmp_path, BUCKET_SPEC)], options(clean_server))).ok
    run(fill(clean_server.url))
    yield clean_server


def test_declared_keys_are_read_in_batches(bucket: NatsServer) -> None:
    """2,501 keys declared: a few batches, no key read on its own (2,501 reads before)."""
    found, counts = run(scan_and_check(options(bucket), DECLARED))
    check_states(found)
    # 4,001 keys listed: one STREAM.INFO, 2 batches of the others, 3 of the declared keys;
    # and one STREAM.INFO of the stream's deleted sequences (the purged keys' older
    # messages: a key of history 2 holding one message may have lost its last to a delete)
    assert counts["STREAM.MSG.GET"] == 0, counts
    assert counts["DIRECT.GET"] <= 8, counts
    assert counts["STREAM.INFO"] == 2, counts


def test_declared_keys_read_as_each_alone_on_every_release(
    versioned_server: NatsServer, tmp_path: Path
) -> None:
    """2.10 knows no batched get: each key on its own, as before; 2.11 on in batches."""
    assert run(engine.apply([write(tmp_path, BUCKET_SPEC)], options(versioned_server))).ok
    try:
        run(fill(versioned_server.url, app_keys=10))
        found, counts = run(scan_and_check(options(versioned_server), DECLARED))
        check_states(found)
        # 2.10: each declared key and each of the 10 others on its own
        alone = len(DECLARED) + 10 if versioned_server.version == "2.10.26" else 0
        assert counts["STREAM.MSG.GET"] == alone, counts
    finally:
        run(delete_all_streams(versioned_server.url))


def test_a_bucket_without_direct_gets_reads_declared_keys_alone(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``allow_direct: false``: that bucket's keys each on its own; another bucket of the
    same plan still in batches."""
    spec = write(tmp_path, BUCKET_SPEC + "allow_direct: false\n---\n" + OPEN_SPEC)
    assert run(engine.apply([spec], options(clean_server))).ok
    run(fill(clean_server.url, app_keys=10))
    run(fill(clean_server.url, app_keys=10, bucket=OPEN))
    found, counts = run(scan_and_check(options(clean_server), DECLARED, buckets=BOTH))
    check_states(found)
    assert counts["STREAM.MSG.GET"] == len(DECLARED) + 10, counts  # the bucket's keys
    assert 0 < counts["DIRECT.GET"] <= 4, counts  # the other's: 2,511 keys


def test_a_user_without_direct_gets_reads_declared_keys_alone(
    server_factory: Any, tmp_path: Path
) -> None:
    """A user who may not use direct gets on a bucket (the first batch refused: a
    permissions violation): that bucket's keys each on its own; another bucket it may
    read so in batches."""
    reads = [
        "$JS.API.INFO",
        "$JS.API.STREAM.INFO.>",
        "$JS.API.STREAM.MSG.GET.>",
        f"$JS.API.DIRECT.GET.KV_{OPEN}",
    ]
    users = [
        {"user": "admin", "password": "pw"},
        {
            "user": "reader",
            "password": "pw",
            "permissions": {"publish": {"allow": reads}, "subscribe": {"allow": ["_INBOX.>"]}},
        },
    ]
    server = server_factory(users=users)
    admin = server.url.replace("nats://", "nats://admin:pw@")
    connect = ConnectionOptions(servers=admin)
    assert run(engine.apply([write(tmp_path, BUCKET_SPEC + "---\n" + OPEN_SPEC)], connect)).ok
    run(fill(admin, app_keys=10))
    run(fill(admin, app_keys=10, bucket=OPEN))
    reader = ConnectionOptions(servers=server.url, user="reader", password="pw")
    found, counts = run(scan_and_check(reader, DECLARED, buckets=BOTH))
    check_states(found)
    assert counts["STREAM.MSG.GET"] == len(DECLARED) + 10, counts
    assert 1 < counts["DIRECT.GET"] <= 5, counts  # the refused one and the other's


def test_declared_keys_changed_after_the_listing_are_read_as_they_are_then(
    bucket: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two batches of declared keys, keys read already and keys not read yet are
    updated, deleted, purged away altogether, and a key no listing held is written: each
    key is what the server held when its batch read it; only the key no listing held and
    the key purged away are read on their own (from the leader: a replica behind a purge
    holds a message the listing did not, ``test_attacks19b.py``, and a replica may lose a
    key the leader keeps, ``test_attacks20.py``)."""
    from reconciler.jetstream import kv

    monkeypatch.setattr(kv, "BATCH_KEYS", 100)
    monkeypatch.setattr(kv, "BATCHES_AT_ONCE", 1)
    url = bucket.url
    calls: list[str] = []

    async def meanwhile(name: str) -> None:
        calls.append(name)
        if len(calls) != 16:  # 15 batches of the 1,500 other keys, then the declared
            return
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            await _put(
                js,
                [
                    ("cfg.0010", b"new", MANAGED),  # read already
                    ("cfg.0500", b"new", MANAGED),  # not read yet
                    ("cfg.0501", b"", {"KV-Operation": "DEL"}),
                    ("cfg.0502", b"", {"KV-Operation": "PURGE", "Nats-Rollup": "sub"}),
                    ("cfg.2300", b"written after the listing", MANAGED),
                ],
            )
            body = json.dumps({"filter": f"$KV.{BUCKET}.cfg.0503"}).encode()
            reply = await nc.request(f"$JS.API.STREAM.PURGE.KV_{BUCKET}", body, timeout=5)
            assert json.loads(reply.data).get("success") is True
        finally:
            await nc.close()

    monkeypatch.setattr(kv, "between_batches", meanwhile)

    async def scan() -> tuple[Scan, Counter[str]]:
        async with open_client(options(bucket)) as client:
            asked = Asked(client.nc)
            found = await client.kv_scan({BUCKET: set(DECLARED)}, MANAGED_HEADER)
            return found, asked.counts

    found, counts = run(scan())
    assert len(calls) > 16
    assert found[(BUCKET, "cfg.0010")].value == b"v10"  # as its batch read it
    assert found[(BUCKET, "cfg.0500")].value == b"new"
    assert found[(BUCKET, "cfg.0501")].operation == "DEL"
    assert found[(BUCKET, "cfg.0502")].operation == "PURGE"
    assert (BUCKET, "cfg.0503") not in found  # no message left at all
    assert found[(BUCKET, "cfg.2300")].value == b"written after the listing"
    assert counts["STREAM.MSG.GET"] == 2, counts  # cfg.2300, cfg.0503


def _rewrite(block: bytes, name: bytes, value: bytes | None) -> bytes:
    """``block`` with the value of its last line ``name`` (the server's) set to ``value``,
    or that line left out (None)."""
    at = block.rfind(b"\r\n" + name + b":")
    end = block.index(b"\r\n", at + 2)
    line = b"" if value is None else b"\r\n" + name + b": " + value
    return block[:at] + line + block[end:]


FORGERIES: dict[str, Callable[[bytes], list[bytes]]] = {
    "a subject not asked": lambda b: [_rewrite(b, b"Nats-Subject", b"$KV.decl.zzz.none")],
    # its own message named another key the batch asked: the real one then comes too
    "another key asked": lambda b: [_rewrite(b, b"Nats-Subject", b"$KV.decl.cfg.0006")],
    "another stream (a mirror)": lambda b: [_rewrite(b, b"Nats-Stream", b"KV_mirror")],
    "no time stamp line": lambda b: [_rewrite(b, b"Nats-Time-Stamp", None)],
    "sent twice": lambda b: [b, b],
}


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_reply_is_not_taken(
    bucket: NatsServer, monkeypatch: pytest.MonkeyPatch, forgery: str
) -> None:
    """A batched reply whose message for ``cfg.0005`` is forged: no key takes another's
    message; that batch's keys are read on their own from the leader, the other batches'
    are not."""
    from reconciler.jetstream import kv

    monkeypatch.setattr(kv, "BATCH_KEYS", 100)
    target = f"\r\nNats-Subject: $KV.{BUCKET}.cfg.0005\r\n".encode()
    forge = FORGERIES[forgery]

    def tamper(nc: Any) -> None:
        process = nc._process_msg

        async def forged(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes):
            if sid in nc.raw_replies and headers and target in headers:
                for block in forge(headers):
                    await process(sid, subject, reply, data, block)
                return
            await process(sid, subject, reply, data, headers)

        nc._process_msg = forged

    found, counts = run(scan_and_check(options(bucket), DECLARED, tamper=tamper))
    assert found[(BUCKET, "cfg.0006")].value == b"v6"
    assert found[(BUCKET, "cfg.0005")].value == b"v5"
    assert 0 < counts["STREAM.MSG.GET"] <= 100, counts


def test_a_reply_behind_the_listing_is_not_taken(
    bucket: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch holding ``cfg.0005`` ends saying it was answered at sequence 1 (a
    replica or mirror behind the leader's listing): that batch's keys are read on their
    own from the leader, the other batches' are not."""
    from reconciler.jetstream import kv

    monkeypatch.setattr(kv, "BATCH_KEYS", 100)
    target = f"\r\nNats-Subject: $KV.{BUCKET}.cfg.0005\r\n".encode()

    def tamper(nc: Any) -> None:
        process = nc._process_msg
        behind: set[int] = set()

        async def late(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes):
            if sid in nc.raw_replies and headers and target in headers:
                behind.add(sid)
            elif sid in behind and headers and b"Nats-UpTo-Sequence" in headers:
                headers = _rewrite(headers, b"Nats-UpTo-Sequence", b"1")
            await process(sid, subject, reply, data, headers)

        nc._process_msg = late

    found, counts = run(scan_and_check(options(bucket), DECLARED, tamper=tamper))
    check_states(found)
    assert 0 < counts["STREAM.MSG.GET"] <= 100, counts


def test_a_plan_of_many_declared_entries_asks_for_batches(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """1,200 declared entries, one a secret changed by someone else: the plan is the
    same, in a few dozen messages to the server (1,200 reads before), and shows neither
    secret value."""
    docs = [BUCKET_SPEC]
    docs += [
        f"kind: KeyValueEntry\nbucket: {BUCKET}\nkey: cfg.{i:04d}\nvalue: v{i}\n"
        for i in range(1200)
        if i != 1100
    ]
    docs.append(
        f"kind: KeyValueEntry\nbucket: {BUCKET}\nkey: cfg.1100\nvalue: {SECRET}\nsecret: true\n"
    )
    spec = write(tmp_path, "---\n".join(docs))
    assert run(
        engine.apply([write(tmp_path, BUCKET_SPEC, "bucket.yaml")], options(clean_server))
    ).ok

    async def as_applied() -> None:
        nc = await nats.connect(clean_server.url)
        try:
            js = nc.jetstream()
            writes: list[tuple[str, bytes, dict[str, str] | None]] = [
                (f"cfg.{i:04d}", value(i), MANAGED) for i in range(1200) if i != 1100
            ]
            secret = marker_headers(DEFAULT_OWNER, secret=True)
            writes += [("cfg.1100", LIVE_SECRET.encode(), secret), ("cfg.0003", b"v-", MANAGED)]
            await _put(js, writes)
        finally:
            await nc.close()

    run(as_applied())
    before = int(clean_server.monitor("varz")["in_msgs"])
    done = reconcile("plan", spec.name, "--server", clean_server.url, cwd=tmp_path)
    sent = int(clean_server.monitor("varz")["in_msgs"]) - before
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "Plan: 0 to create, 2 to update" in done.stdout
    assert "cfg.1100" in done.stdout and "cfg.0003" in done.stdout
    assert SECRET not in said and LIVE_SECRET not in said
    assert sent < 80, sent
    run(delete_all_streams(clean_server.url))
