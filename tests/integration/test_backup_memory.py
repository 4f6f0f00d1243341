"""Memory streams (nats-server cannot snapshot memory storage) back up through a
temporary file mirror and restore through one: every message (sequence, time, subject,
payload, headers) comes back, consumers at their ack floors, and no temporary stream
stays behind."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from pathlib import Path
from typing import Any

import nats
from backup_fixtures import consumer_positions
from cli_runner import reconcile
from migration_helpers import dump_exact
from nats.js.api import DeliverPolicy
from servers import NatsServer, options, run
from test_lifecycle import _project, _publish, _request

from reconciler.errors import ReconcileError
from reconciler.execution import lock
from reconciler.identity import BACKUP_PREFIX, INTERNAL_STREAMS
from reconciler.jetstream import open_client


async def _memory_stream(server: NatsServer) -> None:
    """FAST (memory, headers on every message, a gap where one was deleted): ``worker``
    has 10 delivered and 6 acked, ``audit`` 5 delivered and all acked, ``latest`` (deliver
    policy ``new``) none."""
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="FAST", subjects=["fast.>"], storage="memory")
        for i in range(40):
            headers = {"X-Index": str(i), "Nats-Msg-Id": f"f-{i}"}
            await js.publish(f"fast.{i % 3}", f"payload-{i}".encode() * 2, headers=headers)
        await js.delete_msg("FAST", 20)
        await js.add_consumer("FAST", durable_name="worker", ack_policy="explicit")
        await js.add_consumer(
            "FAST", durable_name="audit", ack_policy="explicit", filter_subject="fast.1"
        )
        await js.add_consumer(  # a reset refuses its policy: made as it is
            "FAST", durable_name="latest", ack_policy="explicit", deliver_policy=DeliverPolicy.NEW
        )
        worker = await js.pull_subscribe_bind("worker", "FAST")
        taken = await worker.fetch(10, timeout=5)
        for message in taken[:6]:
            await message.ack_sync()
        audit = await js.pull_subscribe_bind("audit", "FAST")
        for message in await audit.fetch(5, timeout=5):
            await message.ack_sync()
        await nc.flush()
    finally:
        await nc.close()


async def _streams(server: NatsServer) -> list[str]:
    """The server's streams but the apply lock's bucket (a restore takes the lock)."""
    async with open_client(options(server)) as client:
        return sorted(set(await client.stream_names()) - INTERNAL_STREAMS)


async def _state(server: NatsServer, stream: str) -> dict[str, Any]:
    async with open_client(options(server)) as client:
        info = await client.stream_info(stream)
    keep = ("messages", "bytes", "first_seq", "last_seq", "first_ts", "last_ts", "num_deleted")
    return {"storage": info["config"]["storage"], **{k: info["state"].get(k) for k in keep}}


def test_a_memory_stream_backs_up_and_restores_every_message_and_consumer(
    server_factory: Any, tmp_path: Path
) -> None:
    source, target = server_factory(), server_factory()
    run(_memory_stream(source))
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run(_streams(source)) == ["FAST"]  # the temporary mirror is gone
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["skipped"] == []
    (record,) = manifest["streams"]
    assert record["config"]["storage"] == "memory" and record["config"]["subjects"] == ["fast.>"]
    assert record["mirror_config"]["storage"] == "file"
    consumers = {c["name"]: c for c in record["consumers"]}
    assert sorted(consumers) == ["audit", "latest", "worker"]
    assert consumers["worker"]["positions"]["ack_floor.stream_seq"] == 6
    assert consumers["worker"]["positions"]["delivered.stream_seq"] == 10
    assert consumers["audit"]["config"]["filter_subject"] == "fast.1"

    restored = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert "1 stream(s) restored and verified" in restored.stdout
    assert run(_streams(target)) == ["FAST"]
    messages = run(dump_exact(target, "FAST"))
    assert messages == run(dump_exact(source, "FAST"))
    assert len(messages) == 39 and messages[-1][0] == 40
    assert all(dict(m[4])["X-Index"] == str(m[0] - 1) for m in messages)
    assert run(_state(target, "FAST")) == run(_state(source, "FAST"))
    assert run(_state(target, "FAST"))["storage"] == "memory"
    after = run(consumer_positions(target, "FAST"))
    # at their ack floors (stream sequences; CONSUMER.RESET starts consumer sequences
    # again): what was delivered and not acked is delivered again
    assert after["worker"][1][1] == run(consumer_positions(source, "FAST"))["worker"][1][1]
    assert after["worker"][1][1] == after["worker"][0][1] == 6
    assert after["worker"][3] == 39 - 6 + 1 - 1  # 33 to come (seq 20 is gone)
    assert after["audit"][1][1] == run(consumer_positions(source, "FAST"))["audit"][1][1]

    # and the restored consumers work: the worker gets message 7 next
    async def next_one() -> int:
        nc = await nats.connect(target.url)
        try:
            sub = await nc.jetstream().pull_subscribe_bind("worker", "FAST")
            (message,) = await sub.fetch(1, timeout=5)
            return int(message.metadata.sequence.stream)
        finally:
            await nc.close()

    assert run(next_one()) == 7


def test_restoring_a_memory_stream_on_a_server_before_2_14_is_refused(
    server_factory: Any, tmp_path: Path
) -> None:
    source = server_factory()
    run(_memory_stream(source))
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    old = server_factory(version="2.12.8")
    refused = reconcile("restore", str(out), "--server", old.url, "--yes", cwd=tmp_path)
    assert refused.returncode == 1
    assert "FAST: a memory stream" in refused.stderr and "2.14" in refused.stderr
    assert run(_streams(old)) == []


def test_the_temporary_mirror_is_never_planned_or_exported(
    server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory()
    run(_memory_stream(server))

    async def leave_a_mirror() -> None:
        async with open_client(options(server)) as client:
            await client.create_stream(
                {"name": BACKUP_PREFIX + "FAST", "storage": "file", "mirror": {"name": "FAST"}}
            )

    run(leave_a_mirror())
    exported = reconcile("export", "--all-owners", "--server", server.url, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert "FAST" in exported.stdout and BACKUP_PREFIX not in exported.stdout
    # a killed backup's mirror is replaced by the next backup, then deleted
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", server.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run(_streams(server)) == ["FAST"]


def _backed_up(server_factory: Any, tmp_path: Path) -> tuple[NatsServer, NatsServer, Path, Any]:
    """A source holding FAST (:func:`_memory_stream`) backed up by the CLI, an empty
    target, the backup folder and its contents as the restore reads them."""
    from reconciler.backup.manifest import read_contents

    source, target = server_factory(), server_factory()
    run(_memory_stream(source))
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return source, target, out, read_contents(out)


def test_a_memory_restore_interrupted_midway_finishes_when_run_again(
    server_factory: Any, tmp_path: Path
) -> None:
    """What a restore killed between its steps leaves (the snapshot back under the
    temporary name, the memory stream a mirror of it carrying the restore's marker, no
    consumers yet): the re-run finishes without flags and leaves no temporary stream."""
    from reconciler.backup.layout import chunks
    from reconciler.backup.memory import caught_up, restoring, temp_config
    from reconciler.backup.restore_checks import marker, with_marker
    from reconciler.jetstream.snapshots import restore_stream

    source, target, out, contents = _backed_up(server_factory, tmp_path)
    (record,) = contents.streams

    async def half_done() -> None:
        async with open_client(options(target)) as client:
            data = chunks(out / "FAST" / "stream.tar.s2", 64 * 1024)
            mark = marker(contents, record)
            await restore_stream(client, with_marker(temp_config(record), mark), record.state, data)
            await client.create_stream(with_marker(restoring(record), mark))
            await caught_up(client, "FAST", BACKUP_PREFIX + "FAST", 40)

    run(half_done())
    assert run(_streams(target)) == ["FAST", BACKUP_PREFIX + "FAST"]
    again = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "interrupted restore" in again.stdout
    assert run(_streams(target)) == ["FAST"]
    assert run(dump_exact(target, "FAST")) == run(dump_exact(source, "FAST"))
    assert run(_state(target, "FAST")) == run(_state(source, "FAST"))


def test_a_memory_streams_mirror_is_made_only_under_the_apply_lock(
    server_factory: Any, tmp_path: Path
) -> None:
    """The temporary mirror is a change to the server: while another run holds the apply
    lock, the backup waits --lock-timeout, names the holder, makes no stream and writes no
    manifest; a backup of file streams only takes no lock; once the lock is free the
    backup runs and lets the lock go."""
    source = server_factory()
    run(_memory_stream(source))
    base = ("backup", "--server", source.url, "--lock-timeout", "1")

    async def while_held() -> tuple[Any, Any, list[str]]:
        nc = await nats.connect(source.url)
        created: list[str] = []

        async def seen(message: Any) -> None:
            created.append(message.subject)

        await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.CREATED.>", cb=seen)
        await nc.flush()
        try:
            async with (
                open_client(options(source)) as client,
                lock.hold(client, timeout=5, holder=lock.Holder.current("someone-applying")),
            ):
                await client.create_stream({"name": "FILED", "subjects": ["filed.>"]})
                memory = await asyncio.to_thread(
                    reconcile, *base, "--stream", "FAST", "--out", str(tmp_path / "m"),
                    cwd=tmp_path,
                )  # fmt: skip
                filed = await asyncio.to_thread(
                    reconcile, *base, "--stream", "FILED", "--out", str(tmp_path / "f"),
                    cwd=tmp_path,
                )  # fmt: skip
            await nc.flush()
            return memory, filed, created
        finally:
            await nc.close()

    memory, filed, created = run(while_held())
    assert memory.returncode == 1, memory.stdout + memory.stderr
    assert "someone-applying" in memory.stderr, memory.stderr
    assert not (tmp_path / "m" / "manifest.json").exists()
    assert "$JS.EVENT.ADVISORY.STREAM.CREATED.FILED" in created
    assert [s for s in created if BACKUP_PREFIX in s] == []  # no mirror was made
    assert filed.returncode == 0, filed.stderr  # no memory stream: no lock taken
    assert (tmp_path / "f" / "manifest.json").exists()
    assert run(_streams(source)) == ["FAST", "FILED"]

    done = reconcile(*base, "--stream", "FAST", "--out", str(tmp_path / "m"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert [s["name"] for s in manifest["streams"]] == ["FAST"]
    assert run(_streams(source)) == ["FAST", "FILED"]

    async def free() -> None:  # the backup let the lock go
        async with (
            open_client(options(source)) as client,
            lock.hold(client, timeout=1, holder=lock.Holder.current("next")),
        ):
            pass

    run(free())


def test_a_stream_under_the_temporary_name_that_no_restore_of_this_backup_left_is_kept(
    server_factory: Any, tmp_path: Path
) -> None:
    """Anyone can make a stream under the reserved name with the snapshot's config and
    the backup's sequences: without this backup's restore marker, or with the marker
    but other messages, it is someone's, never deleted, and the restore stops before it
    deletes the stream it would replace."""
    from reconciler.backup.memory import temp_config
    from reconciler.backup.restore_checks import marker, with_marker

    _, target, out, contents = _backed_up(server_factory, tmp_path)
    (record,) = contents.streams
    temp = BACKUP_PREFIX + "FAST"

    async def lookalike(config: dict[str, Any]) -> None:
        """The snapshot's config, 40 messages of someone's, the 20th deleted: the
        backup's sequences, count and gap."""
        async with open_client(options(target)) as client:
            with contextlib.suppress(ReconcileError):
                await client.delete_stream(temp)
            await client.create_stream(config)
        nc = await nats.connect(target.url)
        try:
            js = nc.jetstream()
            for i in range(40):
                await js.publish(temp, f"theirs-{i}".encode())
            await js.delete_msg(temp, 20)
        finally:
            await nc.close()

    async def theirs_in_the_way() -> None:  # the user's FAST, which a replace would delete
        nc = await nats.connect(target.url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="FAST", subjects=["fast.>"], storage="memory")
            for i in range(7):
                await js.publish(f"fast.{i}", b"kept")
        finally:
            await nc.close()

    run(theirs_in_the_way())
    flags = ("--replace-existing", "--allow-replace", "--allow-data-loss", "--yes")
    forged = with_marker(temp_config(record), marker(contents, record))
    for config in (temp_config(record), forged):
        run(lookalike(config))
        refused = reconcile("restore", str(out), "--server", target.url, *flags, cwd=tmp_path)
        assert refused.returncode != 0, refused.stdout + refused.stderr
        assert f"stream {temp} exists and is not this restore's" in refused.stdout + refused.stderr
        kept = run(dump_exact(target, temp))
        assert len(kept) == 39 and base64.b64decode(kept[0][3]) == b"theirs-0"
        assert len(run(dump_exact(target, "FAST"))) == 7  # not replaced


def test_an_observed_environment_never_gets_a_backups_temporary_mirror(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Hole: ``mode: observe`` says an environment is read and reported, never written,
    yet a backup with ``--env`` made a memory stream's temporary file mirror there (and
    took the apply lock for it). Refused now before anything is written, naming the
    stream and the project file's line: no mirror, no lock bucket, no file in the folder,
    the stream's messages as they were. The file streams of the same environment back up
    as any."""
    run(_memory_stream(clean_server))
    orders = {"name": "ORDERS", "subjects": ["orders.>"], "storage": "file"}
    run(_request(clean_server.url, "$JS.API.STREAM.CREATE.ORDERS", orders))
    run(_publish(clean_server.url, "orders.new", 5))
    (tmp_path / "specs").mkdir()
    _project(tmp_path, clean_server.url, "{mode: observe}")
    before = run(_state(clean_server, "FAST"))
    out = tmp_path / "backup"

    refused = reconcile("backup", "--env", "prod", "--all", "--out", str(out), cwd=tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "FAST" in refused.stderr and "reconcile.yaml:" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr

    async def every_stream() -> list[str]:
        async with open_client(options(clean_server)) as client:
            return sorted(await client.stream_names())

    assert run(every_stream()) == ["FAST", "ORDERS"]  # no mirror, no lock bucket
    assert run(_state(clean_server, "FAST")) == before
    assert not out.exists() or not any(out.iterdir())

    files = ("backup", "--env", "prod", "--all", "--stream", "ORDERS", "--out", str(out))
    taken = reconcile(*files, cwd=tmp_path)
    assert taken.returncode == 0, taken.stdout + taken.stderr
    assert (out / "manifest.json").is_file() and run(every_stream()) == ["FAST", "ORDERS"]


def test_a_memory_stream_with_what_no_mirror_may_have_restores_with_it(
    server_factory: Any, tmp_path: Path
) -> None:
    """A memory stream restores through a mirror of its snapshot, which may not carry
    atomic or batch publishing nor message schedules (the server refuses each: 10198,
    10209, 10186). The backup's list of what a mirror cannot have was a second copy of
    the standby's, missing those three: such a stream's restore failed making its mirror.
    One list now (``model.standby.NOT_ON_A_MIRROR``), and the flags come back with the
    stream's own config."""
    source, target = server_factory(), server_factory()
    flags = {"allow_atomic": True, "allow_msg_schedules": True, "allow_batched": True}

    async def made() -> None:
        nc = await nats.connect(source.url)
        try:
            config = {"name": "FLAGS", "subjects": ["flags.>"], "storage": "memory", **flags}
            reply = await nc.request("$JS.API.STREAM.CREATE.FLAGS", json.dumps(config).encode())
            assert "error" not in json.loads(reply.data), reply.data
            js = nc.jetstream()
            for i in range(12):
                await js.publish(f"flags.{i % 2}", f"m-{i}".encode())
        finally:
            await nc.close()

    run(made())
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    restored = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert run(dump_exact(target, "FLAGS")) == run(dump_exact(source, "FLAGS"))

    async def config() -> dict[str, Any]:
        async with open_client(options(target)) as client:
            return dict((await client.stream_info("FLAGS"))["config"])

    got = run(config())
    assert got["storage"] == "memory"
    assert {field: got.get(field) for field in flags} == flags
