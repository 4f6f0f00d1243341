"""Migrations that would lose or duplicate data say so, or are refused before anything
moves (issue 30), and a plan checks declared subjects against every live stream.

Each test publishes first and counts after, on a real nats-server:
- ``workqueue -> interest`` deleted every message (100 -> 0) and was not called lossy;
- a stream sourcing the migrated one copied everything again (100 -> 200, after the
  source's retry: about a minute);
- a live worker's acknowledgements during a migration brought 28-53 jobs back;
- a smaller ``max_msg_size`` than the messages held stalled the copy for good;
- subjects another stream stores failed the apply half-way (err 10065).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from migration_helpers import api, publish_many
from servers import NatsServer, options, run, write

from reconciler.errors import RefusedPlan, SpecError
from reconciler.execution import migrate as migration
from reconciler.execution import run as engine
from reconciler.model.migration import temp_name
from reconciler.planning.steps import Migrate

pytestmark = pytest.mark.integration


async def count(server: NatsServer, stream: str) -> int:
    return int((await api(server, f"STREAM.INFO.{stream}"))["state"]["messages"])


async def config(server: NatsServer, stream: str) -> dict[str, Any]:
    return dict((await api(server, f"STREAM.INFO.{stream}"))["config"])


async def exists(server: NatsServer, stream: str) -> bool:
    names = (await api(server, "STREAM.NAMES")).get("streams") or []
    return stream in names


async def publish_plain(server: NatsServer, subject: str, count: int, size: int = 0) -> None:
    """``count`` messages without a ``Nats-Msg-Id`` (a duplicate window cannot hide a copy)."""
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        for i in range(count):
            await js.publish(subject, f"m{i}".encode().ljust(size, b"."))
    finally:
        await nc.close()


# --- a target that keeps fewer messages -------------------------------------------------


def test_workqueue_to_interest_is_lossy_says_how_many_and_needs_allow_data_loss(
    clean_server: NatsServer, tmp_path: Path, figures: Any
) -> None:
    before = write(tmp_path, "kind: Stream\nname: J\nsubjects: ['j.>']\nretention: workqueue\n")
    run(engine.apply([before], options(clean_server), lock_timeout=None))
    run(publish_many(clean_server, ["j.a"], 100))
    after = write(tmp_path, "kind: Stream\nname: J\nsubjects: ['j.>']\nretention: interest\n")
    plan = run(engine.plan([after], options(clean_server), migrate=True))
    (step,) = plan.changes
    assert isinstance(step, Migrate) and step.destructive
    assert [(loss.field, loss.messages) for loss in step.losses] == [("retention", 100)]
    for flags in ({}, {"allow_replace": True}):
        with pytest.raises(RefusedPlan, match="--allow-data-loss") as refused:
            run(
                engine.apply(
                    [after], options(clean_server), migrate=True, lock_timeout=None, **flags
                )
            )
        assert "deletes all 100" in str(refused.value)
        assert run(count(clean_server, "J")) == 100  # nothing moved
        assert not run(exists(clean_server, temp_name("J")))
    run(
        engine.apply(
            [after], options(clean_server), migrate=True, allow_data_loss=True, lock_timeout=None
        )
    )
    assert run(count(clean_server, "J")) == 0  # what the plan said: all 100 go
    assert run(config(clean_server, "J"))["retention"] == "interest"
    figures.add("messages checked", 100)


# --- streams that copy the migrated one -------------------------------------------------

SOURCED = """
kind: Stream
name: ORDERS
subjects: ['orders.>']
storage: {storage}
---
kind: Stream
name: AGG
sources: [{{name: ORDERS}}]
"""


def test_migrating_a_stream_others_source_or_mirror_is_refused_naming_them(
    clean_server: NatsServer, tmp_path: Path, figures: Any
) -> None:
    run(
        engine.apply(
            [write(tmp_path, SOURCED.format(storage="file"))],
            options(clean_server),
            lock_timeout=None,
        )
    )
    run(api(clean_server, "STREAM.CREATE.BACKUP", {"name": "BACKUP", "mirror": {"name": "ORDERS"}}))
    run(publish_plain(clean_server, "orders.a", 100))

    async def copied() -> None:
        while await count(clean_server, "AGG") < 100 or await count(clean_server, "BACKUP") < 100:
            await asyncio.sleep(0.05)

    run(asyncio.wait_for(copied(), 30))
    moved = write(tmp_path, SOURCED.format(storage="memory"))
    for call in (engine.plan, engine.apply):
        kwargs = {} if call is engine.plan else {"lock_timeout": None}
        with pytest.raises(SpecError) as refused:
            run(call([moved], options(clean_server), migrate=True, **kwargs))  # type: ignore[operator]
        text = str(refused.value)
        assert "cannot migrate Stream ORDERS" in text
        assert "'AGG' (sources it)" in text and "'BACKUP' (mirrors it)" in text
    assert not run(exists(clean_server, temp_name("ORDERS")))
    assert run(config(clean_server, "ORDERS"))["storage"] == "file"
    for stream in ("ORDERS", "AGG", "BACKUP"):
        assert run(count(clean_server, stream)) == 100
    figures.add("messages checked", 300)


# --- a work queue with a live worker ----------------------------------------------------

QUEUE = """
kind: Stream
name: JOBS
subjects: ['jobs.>']
retention: workqueue
storage: {storage}
---
kind: Consumer
stream: JOBS
name: W
ack_policy: explicit
"""


def test_a_workqueue_is_not_migrated_while_its_worker_holds_jobs_then_keeps_exactly_the_rest(
    clean_server: NatsServer, tmp_path: Path, figures: Any
) -> None:
    specs = write(tmp_path, QUEUE.format(storage="file"))
    run(engine.apply([specs], options(clean_server), lock_timeout=None))
    run(publish_plain(clean_server, "jobs.a", 100))
    moved = write(tmp_path, QUEUE.format(storage="memory"))

    async def worker_holds_ten() -> None:
        nc = await nats.connect(clean_server.url)
        try:
            sub = await nc.jetstream().pull_subscribe_bind("W", "JOBS")
            held = await sub.fetch(10, timeout=5)
            assert len(held) == 10
            with pytest.raises(SpecError) as refused:
                await engine.apply([moved], options(clean_server), migrate=True, lock_timeout=None)
            assert "cannot migrate Stream JOBS while its consumers work" in str(refused.value)
            assert "'W' (10 unacknowledged" in str(refused.value)
            assert not await exists(clean_server, temp_name("JOBS"))
            assert await count(clean_server, "JOBS") == 100
            for message in held:
                await message.ack_sync()
        finally:
            await nc.close()

    run(worker_holds_ten())
    assert run(count(clean_server, "JOBS")) == 90
    # the worker has stopped (it acknowledged last under a second ago: still refused,
    # until a second has gone by the server's clock); then the migration goes, and keeps
    # exactly the 90 jobs not done
    run(until_idle(clean_server, moved))
    run(engine.apply([moved], options(clean_server), migrate=True, lock_timeout=None))
    assert run(config(clean_server, "JOBS"))["storage"] == "memory"
    assert run(count(clean_server, "JOBS")) == 90

    async def drain() -> list[bytes]:
        nc = await nats.connect(clean_server.url)
        try:
            sub = await nc.jetstream().pull_subscribe_bind("W", "JOBS")
            done: list[bytes] = []
            while len(done) < 100:
                try:
                    batch = await sub.fetch(50, timeout=1)
                except TimeoutError:  # nats-py raises its own subclass or the builtin
                    break
                for message in batch:
                    done.append(message.data)
                    await message.ack_sync()
            return done
        finally:
            await nc.close()

    rest = run(drain())
    assert sorted(rest) == sorted(f"m{i}".encode() for i in range(10, 100))
    assert run(count(clean_server, "JOBS")) == 0
    figures.add("messages checked", 100)


async def until_idle(server: NatsServer, paths: Path) -> None:
    """Until a plan of ``paths`` no longer finds a consumer at work (10 s at most)."""
    for _ in range(100):
        try:
            await engine.plan([paths], options(server), migrate=True)
            return
        except SpecError as refused:
            assert "active" in str(refused) and "ms ago" in str(refused)
        await asyncio.sleep(0.1)
    raise AssertionError("the consumer never looked idle")


# --- max_msg_size smaller than what is held ---------------------------------------------


def test_a_smaller_max_msg_size_does_not_stall_a_migration(
    clean_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, figures: Any
) -> None:
    # today's code stalls for good; a short stall limit makes it fail in seconds
    monkeypatch.setitem(migration.migrate.__kwdefaults__, "stall_seconds", 5.0)
    run(
        engine.apply(
            [write(tmp_path, "kind: Stream\nname: BIG\nsubjects: ['big.>']\n")],
            options(clean_server),
            lock_timeout=None,
        )
    )
    run(publish_plain(clean_server, "big.a", 10, size=2000))
    moved = write(
        tmp_path,
        "kind: Stream\nname: BIG\nsubjects: ['big.>']\nstorage: memory\nmax_msg_size: 1000\n",
    )
    run(engine.apply([moved], options(clean_server), migrate=True, lock_timeout=None))
    assert run(count(clean_server, "BIG")) == 10
    final = run(config(clean_server, "BIG"))
    assert (final["storage"], final["max_msg_size"]) == ("memory", 1000)
    assert not run(exists(clean_server, temp_name("BIG")))
    with pytest.raises(nats.js.errors.BadRequestError):  # the limit holds for new messages
        run(publish_plain(clean_server, "big.a", 1, size=2000))
    assert not run(engine.plan([moved], options(clean_server))).has_changes
    figures.add("messages checked", 10)


def test_discard_new_per_subject_that_would_stall_the_copy_stays_a_replace(
    clean_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(migration.migrate.__kwdefaults__, "stall_seconds", 5.0)
    per = "kind: Stream\nname: PER\nsubjects: ['per.>']\n"
    run(engine.apply([write(tmp_path, per)], options(clean_server), lock_timeout=None))
    run(publish_plain(clean_server, "per.a", 10))
    run(publish_plain(clean_server, "per.b", 3))
    tight = (
        "storage: memory\ndiscard: new\ndiscard_new_per_subject: true\nmax_msgs_per_subject: 5\n"
    )
    moved = write(tmp_path, per + tight)
    plan = run(engine.plan([moved], options(clean_server), migrate=True))
    (step,) = plan.changes
    assert step.action == "replace"  # today: a migration that stalled at sequence 5 of 13
    assert any("discard_new_per_subject" in reason for reason in step.reasons)
    with pytest.raises(RefusedPlan):
        run(engine.apply([moved], options(clean_server), migrate=True, lock_timeout=None))
    assert not run(exists(clean_server, temp_name("PER")))
    assert run(count(clean_server, "PER")) == 13


# --- subjects another stream stores -----------------------------------------------------


def test_plan_names_a_live_stream_whose_subjects_a_spec_takes(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    run(api(clean_server, "STREAM.CREATE.OTHER", {"name": "OTHER", "subjects": ["x.>"]}))
    run(publish_plain(clean_server, "x.a", 5))
    specs = write(tmp_path, "kind: Stream\nname: MINE\nsubjects:\n  - y\n  - x.a\n")
    done = reconcile("plan", "specs.yaml", "--server", clean_server.url, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    said = "specs.yaml:5: subjects.1: subject 'x.a' overlaps 'x.>' of stream 'OTHER'"
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    with pytest.raises(SpecError, match="of stream 'OTHER' \\(on the server, unmanaged\\)"):
        run(engine.apply([specs], options(clean_server), lock_timeout=None))
    assert not run(exists(clean_server, "MINE"))
    assert run(count(clean_server, "OTHER")) == 5


def test_a_migration_to_taken_subjects_is_refused_before_anything_moves(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    mine = "kind: Stream\nname: MINE\nsubjects: ['{subject}']\nstorage: {storage}\n"
    run(
        engine.apply(
            [write(tmp_path, mine.format(subject="y.>", storage="file"))],
            options(clean_server),
            lock_timeout=None,
        )
    )
    run(api(clean_server, "STREAM.CREATE.OTHER", {"name": "OTHER", "subjects": ["x.>"]}))
    run(publish_plain(clean_server, "y.a", 100))
    moved = write(tmp_path, mine.format(subject="x.b", storage="memory"))
    with pytest.raises(SpecError, match=r"'x\.b' overlaps 'x\.>' of stream 'OTHER'"):
        run(engine.apply([moved], options(clean_server), migrate=True, lock_timeout=None))
    assert not run(exists(clean_server, temp_name("MINE")))
    assert run(config(clean_server, "MINE"))["subjects"] == ["y.>"]
    run(publish_plain(clean_server, "y.a", 1))  # publishes still find their stream
    assert run(count(clean_server, "MINE")) == 101


def test_subjects_another_stream_gives_up_in_the_same_plan_are_refused_until_it_has(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    old = "kind: Stream\nname: OLD\nsubjects: ['{subject}']\n"
    run(
        engine.apply(
            [write(tmp_path, old.format(subject="x.>"))], options(clean_server), lock_timeout=None
        )
    )
    run(publish_plain(clean_server, "x.a", 3))
    both = old.format(subject="z.>") + "---\nkind: Stream\nname: MINE\nsubjects: ['x.a']\n"
    specs = write(tmp_path, both)
    # today: the create ran first, failed with err 10065, and so did every re-run
    with pytest.raises(SpecError, match="of stream 'OLD' \\(which holds it until its own step"):
        run(engine.apply([specs], options(clean_server), lock_timeout=None))
    assert not run(exists(clean_server, "MINE"))
    # what the refusal says: OLD first, in an apply of its own; then both converge
    run(
        engine.apply(
            [write(tmp_path, old.format(subject="z.>"), name="old.yaml")],
            options(clean_server),
            lock_timeout=None,
        )
    )
    run(engine.apply([specs], options(clean_server), lock_timeout=None))
    assert run(config(clean_server, "MINE"))["subjects"] == ["x.a"]
    assert run(count(clean_server, "OLD")) == 3
