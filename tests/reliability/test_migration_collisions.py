"""Names and neighbours turned against a migration (the attacker's review, round 16).

Each test publishes first and counts after, on a real nats-server, and failed on the
code before the fix it names.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nats
import pytest
from migration_helpers import api, dump, killed_migration_script, publish_many
from servers import NatsServer, options, run, write
from test_migration_trust import TEMP, count, interrupted, names, orders, still_takes_publishes

from reconciler.errors import ReconcileError, SpecError
from reconciler.execution import migrate as migration
from reconciler.execution import run as engine
from reconciler.jetstream import open_client
from reconciler.model.migration import RECORD_KEY
from reconciler.planning.steps import Migrate

pytestmark = pytest.mark.integration

#: A spec naming the temporary stream of ORDERS's migration.
TEMP_SPEC = f"""
kind: Stream
name: {TEMP}
subjects: ["other.>"]
"""


def test_a_spec_declaring_the_temporary_stream_is_refused_and_the_migration_keeps_it(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """ORDERS's migration is killed in phase refill: MIGRATING_ORDERS alone holds every
    message and takes ORDERS's publishes. A spec then declares a stream of that name.
    Before, it was planned as an update of the temporary stream (adopted: its record
    and its subjects taken away). Applied (one step at a time), publishes to orders.>
    got "no responders", the migration failed (err 10052, a mirror cycle), and the next
    plan no longer knew of it. Now plan and apply refuse at the spec's line, nothing
    moves, and apply --migrate still finishes with every message."""
    _, expected = interrupted(clean_server, tmp_path, "refill")
    memory = orders(tmp_path, "memory", name="m.yaml")
    both = write(tmp_path, memory.read_text() + "---" + TEMP_SPEC, "both.yaml")
    with pytest.raises(SpecError, match=r"both\.yaml:\d+: name: stream MIGRATING_ORDERS"):
        run(engine.plan([both], options(clean_server), migrate=True))
    with pytest.raises(SpecError, match="no spec may declare it"):
        run(engine.apply([both], options(clean_server), migrate=True, concurrency=1))
    temp = run(api(clean_server, f"STREAM.INFO.{TEMP}"))["config"]
    assert RECORD_KEY in temp["metadata"] and temp["subjects"] == ["orders.>"]
    assert count(clean_server, TEMP) == len(expected) == 300
    assert still_takes_publishes(clean_server, "orders.a")  # lands in MIGRATING_ORDERS
    assert run(engine.apply([memory], options(clean_server), migrate=True)).ok
    assert names(clean_server) == ["ORDERS"]
    assert run(dump(clean_server, "ORDERS")) == [*expected, ("orders.a", b"probe", ())]
    info = run(api(clean_server, "STREAM.INFO.ORDERS"))
    assert info["config"]["storage"] == "memory"
    billing = run(api(clean_server, "CONSUMER.INFO.ORDERS.BILLING"))
    assert billing["ack_floor"]["stream_seq"] == 40, json.dumps(billing)


async def _ack_all_but(server: NatsServer, batch: int, skip: int) -> None:
    """BILLING is delivered ``batch`` messages and acknowledges all but the ``skip``-th."""
    nc = await nats.connect(server.url)
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        body = json.dumps({"batch": batch, "expires": 2_000_000_000}).encode()
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ORDERS.BILLING", body, reply=inbox)
        for i in range(batch):
            message = await sub.next_msg(timeout=3)
            if i != skip:
                await nc.request(message.reply, b"+ACK", timeout=2)
    finally:
        await nc.close()


async def _next(server: NatsServer, batch: int) -> list[bytes]:
    """What BILLING delivers next (up to ``batch``)."""
    nc = await nats.connect(server.url)
    got: list[bytes] = []
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        body = json.dumps({"batch": batch, "expires": 1_000_000_000}).encode()
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ORDERS.BILLING", body, reply=inbox)
        with contextlib.suppress(TimeoutError, nats.errors.TimeoutError):
            while len(got) < batch:
                message = await sub.next_msg(timeout=2)
                if message.data:
                    got.append(message.data)
    finally:
        await nc.close()
    return got


def test_acknowledgements_past_the_ack_floor_are_said_to_be_delivered_again(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """BILLING has acknowledged messages 1-4 and 6-10 of 20, not 5 (ack floor 4). A
    consumer moves to its ack floor: 6-10 are delivered again after the migration, which
    no API can prevent (a reset moves a position; acknowledgements cannot be carried).
    Before, the plan said only "consumer BILLING keeps its position" and docs/migrate.md
    that unacknowledged messages are delivered again; now both say that those it
    acknowledged out of order past its floor are too. Every message is kept."""
    spec = orders(tmp_path)
    assert run(engine.apply([spec], options(clean_server))).ok
    run(publish_many(clean_server, ["orders.a"], 20))
    run(_ack_all_but(clean_server, 10, skip=4))
    expected = run(dump(clean_server, "ORDERS"))
    memory = orders(tmp_path, "memory", name="m.yaml")
    [step] = run(engine.plan([memory], options(clean_server), migrate=True)).steps
    assert isinstance(step, Migrate)
    [note] = [r for r in step.reasons if "consumer BILLING" in r]
    assert "acknowledged out of order" in note and "delivered again" in note
    assert run(engine.apply([memory], options(clean_server), migrate=True)).ok
    assert run(dump(clean_server, "ORDERS")) == expected
    billing = run(api(clean_server, "CONSUMER.INFO.ORDERS.BILLING"))
    assert billing["ack_floor"]["stream_seq"] == 4
    assert run(_next(clean_server, 10)) == [f"m{i}".encode() for i in range(4, 14)]


LIMITED = """
kind: Stream
name: ORDERS
subjects: ["orders.>"]
storage: {storage}
max_msgs: 300
discard: new
"""
CHILD = killed_migration_script("ORDERS")


async def _publish_counted(server: NatsServer, count: int) -> list[bytes]:
    """Publish ``count`` messages to orders.a; the payloads the server said it stored."""
    nc = await nats.connect(server.url)
    stored = []
    try:
        for i in range(count):
            reply = await nc.request("orders.a", f"late{i}".encode(), timeout=5)
            if "error" not in json.loads(reply.data):
                stored.append(f"late{i}".encode())
    finally:
        await nc.close()
    return stored


def test_publishes_during_a_migration_meet_the_streams_discard_new_limit(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """ORDERS (max_msgs 300, discard new) holds 200 messages; its migration to memory is
    killed once the temporary stream takes the publishes. Before, that stream had no
    limit: all 200 later publishes were stored (the stream refuses 100 of them), and the
    copy back stalled at 300 for good (measured with a live publisher: 21,951 accepted
    past the limit, apply failed 'stopped at sequence 3000', and so would every next
    one). Now the temporary stream refuses what the stream would: 100 are stored,
    and apply --migrate finishes with exactly the 300 the publishers were told of."""
    spec = write(tmp_path, LIMITED.format(storage="file"))
    assert run(engine.apply([spec], options(clean_server))).ok
    run(publish_many(clean_server, ["orders.a", "orders.b"], 200))
    before = run(dump(clean_server, "ORDERS"))
    memory = write(tmp_path, LIMITED.format(storage="memory"), "m.yaml")
    [step] = run(engine.plan([memory], options(clean_server), migrate=True)).steps
    assert isinstance(step, Migrate) and not step.blocked
    child = subprocess.run(
        [sys.executable, "-c", CHILD, clean_server.url, json.dumps(dict(step.config)), "serving"],
        check=False,
        capture_output=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    stored = run(_publish_counted(clean_server, 200))
    assert len(stored) == 100
    assert count(clean_server, TEMP) == 300
    assert run(engine.apply([memory], options(clean_server), migrate=True)).ok
    assert names(clean_server) == ["ORDERS"]
    assert run(dump(clean_server, "ORDERS")) == [*before, *(("orders.a", s, ()) for s in stored)]


def _killed_at(server: NatsServer, step: Migrate, boundary: str) -> None:
    """The migration of ``step`` run in a child process killed -9 at ``boundary``."""
    child = subprocess.run(
        [sys.executable, "-c", CHILD, server.url, json.dumps(dict(step.config)), boundary],
        check=False,
        capture_output=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()


def _stored_bytes(server: NatsServer, stream: str) -> int:
    return int(run(api(server, f"STREAM.INFO.{stream}"))["state"]["bytes"])


BYTES = """
kind: Stream
name: ORDERS
subjects: ["orders.>"]
storage: {storage}
max_bytes: 20000
discard: new
"""


@pytest.mark.parametrize(
    ("version", "old", "new"),
    [(None, "memory", "file"), ("2.11.11", "file", "memory")],
    ids=["mirrors-memory-to-file", "sources-file-to-memory"],
)
def test_publishes_during_a_migration_meet_max_bytes_as_the_new_stream_counts_them(
    server_factory: Callable[..., NatsServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    version: str | None,
    old: str,
    new: str,
) -> None:
    """ORDERS (max_bytes 20,000, discard new) holds 100 messages; its migration is killed
    once the temporary stream takes the publishes, and 600 more are published. The new
    stream counts each message more than the temporary stream does: a file stream 14 or
    18 bytes more than a memory one, and before 2.12 (sources) the copy back adds a
    Nats-Stream-Source header. Before, the temporary stream took publishes past what the
    new stream holds (in memory: all 600, no byte limit at all), and the copy back
    stalled for good. Now it refuses them before that: the copy completes with exactly
    the messages the publishers were told were stored."""
    monkeypatch.setitem(migration.migrate.__kwdefaults__, "stall_seconds", 5.0)
    server = server_factory(version=version)
    assert run(engine.apply([write(tmp_path, BYTES.format(storage=old))], options(server))).ok
    run(publish_many(server, ["orders.a", "orders.b"], 100))
    before = run(dump(server, "ORDERS"))
    target = write(tmp_path, BYTES.format(storage=new), "t.yaml")
    [step] = run(engine.plan([target], options(server), migrate=True)).steps
    assert isinstance(step, Migrate) and not step.blocked
    [note] = [r for r in step.reasons if "temporary stream takes the publishes" in r]
    assert "max_msgs" in note and "before max_bytes 20000 is full" in note
    _killed_at(server, step, "serving")
    stored = run(_publish_counted(server, 600))
    assert 0 < len(stored) < 600
    assert run(engine.apply([target], options(server), migrate=True)).ok
    assert names(server) == ["ORDERS"]
    assert run(dump(server, "ORDERS")) == [*before, *(("orders.a", s, ()) for s in stored)]
    assert _stored_bytes(server, "ORDERS") <= 20_000


PER_SUBJECT = """
kind: Stream
name: ORDERS
subjects: ["orders.>"]
storage: {storage}
max_msgs_per_subject: 5
{extra}
"""
DISCARD_NEW_PER_SUBJECT = "discard: new\ndiscard_new_per_subject: true"


def test_publishes_during_a_migration_meet_max_msgs_per_subject(
    clean_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ORDERS (max_msgs_per_subject 5, discard_new_per_subject) holds 3 messages on each
    of three subjects; its migration to memory is killed once the temporary stream takes
    the publishes, and 10 more are published to orders.a. Before, the temporary stream
    took all 10 (orders.a: 13 where 5 fit), and the copy back stalled at the sixth for
    good. Now it refuses what the stream would: 2 are stored, and the copy completes."""
    monkeypatch.setitem(migration.migrate.__kwdefaults__, "stall_seconds", 5.0)
    per = PER_SUBJECT.format(storage="file", extra=DISCARD_NEW_PER_SUBJECT)
    assert run(engine.apply([write(tmp_path, per)], options(clean_server))).ok
    run(publish_many(clean_server, ["orders.a", "orders.b", "orders.c"], 9))
    before = run(dump(clean_server, "ORDERS"))
    memory = PER_SUBJECT.format(storage="memory", extra=DISCARD_NEW_PER_SUBJECT)
    target = write(tmp_path, memory, "m.yaml")
    [step] = run(engine.plan([target], options(clean_server), migrate=True)).steps
    assert isinstance(step, Migrate) and not step.blocked
    assert any("max_msgs_per_subject 5, as the stream" in r for r in step.reasons)
    _killed_at(clean_server, step, "serving")
    stored = run(_publish_counted(clean_server, 10))
    assert stored == [b"late0", b"late1"]
    assert run(engine.apply([target], options(clean_server), migrate=True)).ok
    assert names(clean_server) == ["ORDERS"]
    assert run(dump(clean_server, "ORDERS")) == [*before, *(("orders.a", s, ()) for s in stored)]


async def _wait_count(server: NatsServer, stream: str, messages: int) -> None:
    for _ in range(500):
        info = await api(server, f"STREAM.INFO.{stream}")
        if int(info["state"]["messages"]) >= messages:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{stream} never held {messages} messages")


def _stopped_at_the_handover(server: NatsServer, tmp_path: Path) -> Path:
    """ORDERS (file, the last 5 messages of each subject) migrating to memory with
    max_msgs_per_subject 5 and discard_new_per_subject (``m.yaml``), stopped at the
    handover: 3 messages published to orders.a during the copy leave ORDERS 5 there and
    the copy 8. Returns ORDERS's own spec."""
    spec = write(tmp_path, PER_SUBJECT.format(storage="file", extra=""))
    assert run(engine.apply([spec], options(server))).ok
    run(publish_many(server, ["orders.a"], 5))
    memory = PER_SUBJECT.format(storage="memory", extra=DISCARD_NEW_PER_SUBJECT)
    target = write(tmp_path, memory, "m.yaml")
    [step] = run(engine.plan([target], options(server), migrate=True)).steps
    assert isinstance(step, Migrate) and not step.blocked

    async def go() -> None:
        async def hook(label: str) -> None:
            if label == "copy":  # publishes during the copy
                await _wait_count(server, TEMP, 5)
                await publish_many(server, ["orders.a"], 3, tag="n")
                await _wait_count(server, TEMP, 8)

        async with open_client(options(server)) as client:
            await migration.migrate(client, "ORDERS", step.config, on_phase=hook, stall_seconds=3)

    with pytest.raises(ReconcileError, match=r"orders\.a.* 8 "):
        run(go())
    return spec


def test_a_subject_holding_more_than_the_new_limit_stops_the_handover_not_the_copy(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """ORDERS keeps the last 5 messages of each subject (discard old); its target refuses
    a sixth (discard_new_per_subject). The plan allows it: no subject holds more than 5.
    But the temporary stream is a mirror, which keeps what ORDERS discards: 3 messages
    published to orders.a during the copy leave ORDERS with 5 on it and the copy with 8.
    Before, the temporary stream took the publishes, ORDERS was deleted, and the copy
    back stalled at the sixth message of orders.a for good. Now the handover stops
    before ORDERS gives up its publishes, naming the subject: ORDERS keeps its config
    and every message, and --migration rollback ends the migration."""
    spec = _stopped_at_the_handover(clean_server, tmp_path)
    expected = [("orders.a", f"m{i}".encode(), ()) for i in (3, 4)]
    expected += [("orders.a", f"n{i}".encode(), ()) for i in range(3)]
    info = run(api(clean_server, "STREAM.INFO.ORDERS"))
    assert (info["config"]["subjects"], info["config"]["storage"]) == (["orders.>"], "file")
    assert [(s, d) for s, d, _ in run(dump(clean_server, "ORDERS"))] == [
        (s, d) for s, d, _ in expected
    ]
    assert still_takes_publishes(clean_server, "orders.b")  # lands in ORDERS
    assert run(engine.apply([spec], options(clean_server), migrate=True, migration="rollback")).ok
    assert names(clean_server) == ["ORDERS"]
    assert count(clean_server, "ORDERS") == 6


def test_a_migration_stopped_at_the_handover_is_refused_to_resume_not_called_a_loss(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The migration above, stopped at the handover: orders.a holds 8 messages in the
    copy, the target takes 5 on a subject (discard_new_per_subject). Before, the resumed
    plan called it a loss ('max_msgs_per_subject 5 deletes at least 3'), and apply
    --allow-data-loss stopped at the handover again: that limit refuses, it deletes
    nothing. Now plan and apply refuse to resume, naming the subject, before anything:
    ORDERS keeps its messages and its publishes. Continued to a limit the copy fits
    (8), it migrates with every message of the copy."""
    _stopped_at_the_handover(clean_server, tmp_path)
    target = tmp_path / "m.yaml"
    plan = engine.plan([target], options(clean_server), migrate=True)
    apply = engine.apply([target], options(clean_server), migrate=True, allow_data_loss=True)
    for go in (plan, apply):
        with pytest.raises(SpecError) as refused:
            run(go)
        message = str(refused.value)
        assert message.startswith(f"{target}:"), message
        assert "cannot resume the migration of Stream ORDERS (phase handover)" in message
        assert "subject 'orders.a' holds 8 messages in the copy" in message
        assert "the handover would stop there again" in message
        assert "deletes at least" not in message
    assert (count(clean_server, "ORDERS"), count(clean_server, TEMP)) == (5, 8)
    assert still_takes_publishes(clean_server, "orders.b")  # ORDERS 6, its copy 9
    eight = PER_SUBJECT.format(storage="memory", extra=DISCARD_NEW_PER_SUBJECT)
    fits = write(tmp_path, eight.replace("_subject: 5", "_subject: 8"), "e.yaml")
    way = {"migrate": True, "migration": "continue"}
    [step] = run(engine.plan([fits], options(clean_server), **way)).steps
    assert isinstance(step, Migrate) and not step.blocked and not step.losses
    assert run(engine.apply([fits], options(clean_server), **way)).ok
    assert names(clean_server) == ["ORDERS"]
    assert count(clean_server, "ORDERS") == 9


def test_a_resumed_migration_whose_subjects_fit_is_no_loss(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """ORDERS (no per-subject limit) holds 2 messages on orders.a and orders.b; its
    target takes 5 on a subject (discard_new_per_subject). The migration is killed
    during the copy, and 3 more are published on each: 5 and 5, which fit. Before, the
    resumed plan said max_msgs_per_subject 5 'deletes the older messages of every
    subject holding more than that' (apply needed --allow-data-loss): that limit refuses,
    it deletes nothing, and here nothing is refused. Now no loss is named, and apply
    --migrate finishes with all 10."""
    spec = write(
        tmp_path,
        PER_SUBJECT.format(storage="file", extra="").replace("max_msgs_per_subject: 5\n", ""),
    )
    assert run(engine.apply([spec], options(clean_server))).ok
    run(publish_many(clean_server, ["orders.a", "orders.b"], 4))
    memory = PER_SUBJECT.format(storage="memory", extra=DISCARD_NEW_PER_SUBJECT)
    target = write(tmp_path, memory, "m.yaml")
    [step] = run(engine.plan([target], options(clean_server), migrate=True)).steps
    assert isinstance(step, Migrate) and not step.blocked
    _killed_at(clean_server, step, "copy")
    run(publish_many(clean_server, ["orders.a", "orders.b"], 6, tag="n"))
    before = run(dump(clean_server, "ORDERS"))
    [step] = run(engine.plan([target], options(clean_server), migrate=True)).steps
    assert isinstance(step, Migrate) and step.phase == "copy" and not step.blocked
    assert step.losses == ()
    assert run(engine.apply([target], options(clean_server), migrate=True)).ok
    assert names(clean_server) == ["ORDERS"]
    assert run(dump(clean_server, "ORDERS")) == before


def test_a_migration_continued_to_a_limit_its_copy_exceeds_is_refused_as_a_stall(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """ORDERS (max_msgs_per_subject 5, discard_new_per_subject, 3 messages on each of
    three subjects) migrating to memory is killed once the temporary stream takes the
    publishes; orders.a fills to 5 there. The specs then lower the limit to 3. Before,
    the continued plan called it a loss ('deletes at least 2'), and apply
    --allow-data-loss made the new stream, which refused the fourth message of orders.a:
    the copy back stalled for good. Now plan and apply refuse, naming the subject, and
    the recorded target (resume) finishes with every message."""
    per = PER_SUBJECT.format(storage="file", extra=DISCARD_NEW_PER_SUBJECT)
    assert run(engine.apply([write(tmp_path, per)], options(clean_server))).ok
    run(publish_many(clean_server, ["orders.a", "orders.b", "orders.c"], 9))
    memory = PER_SUBJECT.format(storage="memory", extra=DISCARD_NEW_PER_SUBJECT)
    target = write(tmp_path, memory, "m.yaml")
    [step] = run(engine.plan([target], options(clean_server), migrate=True)).steps
    assert isinstance(step, Migrate) and not step.blocked
    _killed_at(clean_server, step, "serving")
    assert run(_publish_counted(clean_server, 10)) == [b"late0", b"late1"]
    before = run(dump(clean_server, TEMP))
    lower = write(tmp_path, memory.replace("_subject: 5", "_subject: 3"), "l.yaml")
    way = {"migrate": True, "migration": "continue"}
    plan = engine.plan([lower], options(clean_server), **way)
    apply = engine.apply([lower], options(clean_server), allow_data_loss=True, **way)
    for go in (plan, apply):
        with pytest.raises(SpecError) as refused:
            run(go)
        message = str(refused.value)
        assert "cannot continue the migration of Stream ORDERS (phase serving)" in message
        assert "subject 'orders.a' holds 5 messages in the copy" in message
        assert "the copy back would stall there for good" in message
        assert "deletes at least" not in message
    assert run(dump(clean_server, TEMP)) == before
    assert run(engine.apply([lower], options(clean_server), migrate=True, migration="resume")).ok
    assert names(clean_server) == ["ORDERS"]
    assert run(dump(clean_server, "ORDERS")) == before


TOTAL = """
kind: Stream
name: ORDERS
subjects: ["orders.>"]
storage: {storage}
{limits}
"""


@pytest.mark.parametrize(
    ("old", "new", "later"),
    [
        ("max_msgs: 5", "max_msgs: 5\ndiscard: new", 3),
        ("max_msgs: 5", "max_bytes: 1500\ndiscard: new", 25),
    ],
    ids=["max_msgs", "max_bytes"],
)
def test_a_copy_holding_more_than_the_new_limits_stops_the_handover_not_the_copy(
    clean_server: NatsServer, tmp_path: Path, old: str, new: str, later: int
) -> None:
    """As for max_msgs_per_subject, for the stream's discard-new max_msgs and max_bytes:
    ORDERS keeps its last 5 messages (discard old); its target refuses publishes past
    max_msgs 5 (or max_bytes 1500, memory counting each message 14 bytes less than
    file). The plan allows it: ORDERS holds no more. Messages published during the copy
    leave ORDERS with 5 and the copy (a mirror, which keeps what ORDERS discards) with
    more than the target takes. Before, the temporary stream took the publishes, ORDERS
    was deleted, and the copy back stalled for good ('stopped at sequence 5 of 8';
    resuming stalled again). Now the handover stops before ORDERS gives up its
    publishes, naming the limit: ORDERS keeps its config and every message, and
    --migration rollback ends the migration."""
    spec = write(tmp_path, TOTAL.format(storage="file", limits=old))
    assert run(engine.apply([spec], options(clean_server))).ok
    run(publish_many(clean_server, ["orders.a"], 5))
    target = write(tmp_path, TOTAL.format(storage="memory", limits=new), "m.yaml")
    [step] = run(engine.plan([target], options(clean_server), migrate=True)).steps
    assert isinstance(step, Migrate) and not step.blocked, step.reasons

    async def go() -> None:
        async def hook(label: str) -> None:
            if label == "copy":  # publishes during the copy
                await _wait_count(clean_server, TEMP, 5)
                await publish_many(clean_server, ["orders.a"], later, tag="n")
                await _wait_count(clean_server, TEMP, 5 + later)

        async with open_client(options(clean_server)) as client:
            await migration.migrate(client, "ORDERS", step.config, on_phase=hook, stall_seconds=3)

    limit = new.split("\n", maxsplit=1)[0].replace(": ", " ")
    with pytest.raises(ReconcileError, match=f"more than {limit} with discard new"):
        run(go())
    info = run(api(clean_server, "STREAM.INFO.ORDERS"))
    assert (info["config"]["subjects"], info["config"]["storage"]) == (["orders.>"], "file")
    published = [f"m{i}".encode() for i in range(5)] + [f"n{i}".encode() for i in range(later)]
    assert [d for _, d, _ in run(dump(clean_server, "ORDERS"))] == published[-5:]
    assert still_takes_publishes(clean_server, "orders.b")  # lands in ORDERS
    # the rollback deletes the copy's messages ORDERS had discarded: the plan counts them
    back = engine.apply(
        [spec], options(clean_server), migrate=True, migration="rollback", allow_data_loss=True
    )
    assert run(back).ok
    assert names(clean_server) == ["ORDERS"]
    assert count(clean_server, "ORDERS") == 5
