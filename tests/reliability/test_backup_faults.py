"""Backups and restores interrupted, damaged or forged: nothing looks complete that is not,
a re-run finishes, a damaged snapshot is refused before anything is sent."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import nats
import pytest
from backup_fixtures import everything
from cli_runner import reconcile, started
from servers import NatsServer, options, run

from reconciler.backup.take import Selection, take_backup
from reconciler.errors import ReconcileError
from reconciler.jetstream import open_client

BIG = ["BIG1", "BIG2", "BIG3"]
MIB = 1024 * 1024


async def _big_streams(server: NatsServer, names: list[str], mib: int) -> None:
    """Streams of ``mib`` MiB of incompressible data each (64 KiB messages with headers),
    and a consumer on each with some work acked."""
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        for name in names:
            await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
            for i in range(mib * 16):
                await js.publish(f"{name.lower()}.x", os.urandom(64 * 1024), headers={"I": str(i)})
            await js.add_consumer(name, durable_name="c", ack_policy="explicit")
            sub = await js.pull_subscribe_bind("c", name)
            for message in await sub.fetch(3, timeout=5):
                await message.ack_sync()
    finally:
        await nc.close()


def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return started(*args, cwd=cwd)


def _kill_when(process: subprocess.Popen[str], ready: Any, limit: float = 60.0) -> None:
    """kill -9 ``process`` as soon as ``ready()`` holds (polled, bounded)."""
    deadline = time.monotonic() + limit
    while not ready():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the moment to kill never came"
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def _partials(out: Path) -> list[Path]:
    return list(out.glob("*/.stream.tar.s2.partial"))


def _complete_looking(out: Path) -> list[str]:
    """Stream folders a restore would take as complete: a backup.json beside the data."""
    return sorted(p.parent.name for p in out.glob("*/backup.json"))


def test_backup_killed_mid_snapshot_leaves_nothing_that_looks_complete(
    server_factory: Any, tmp_path: Path
) -> None:
    source = server_factory()
    run(_big_streams(source, BIG, 24))
    out = tmp_path / "backup"
    # a complete backup first: the interrupted one must not leave its manifest behind
    args = ["backup", "--all", "--out", str(out), "--server", source.url, "--parallel", "1"]
    assert reconcile(*args, cwd=tmp_path).returncode == 0
    assert (out / "manifest.json").is_file()
    run(_big_streams_more(source))

    process = _start(args, tmp_path)
    _kill_when(process, lambda: bool(_partials(out)))
    assert not (out / "manifest.json").exists()
    for partial in _partials(out):  # the stream being written has no backup.json
        assert not (partial.parent / "backup.json").exists()
    verified = reconcile("backup", "verify", str(out), cwd=tmp_path)
    assert verified.returncode == 1

    # a re-run finishes and everything restores exactly
    assert reconcile(*args, cwd=tmp_path).returncode == 0
    assert not _partials(out)
    target = server_factory()
    done = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run(everything(target, BIG)) == run(everything(source, BIG))


async def _big_streams_more(server: NatsServer) -> None:
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        for name in BIG:
            await js.publish(f"{name.lower()}.x", b"later", headers={"I": "later"})
    finally:
        await nc.close()


def test_server_killed_mid_snapshot_fails_the_backup_without_a_manifest(
    server_factory: Any, tmp_path: Path
) -> None:
    source = server_factory()
    run(_big_streams(source, BIG, 24))
    out = tmp_path / "backup"

    async def interrupted() -> None:
        task = asyncio.ensure_future(
            take_backup(options(source), out, Selection(everything=True), parallel=1)
        )
        deadline = time.monotonic() + 60
        while not _partials(out):
            assert not task.done() and time.monotonic() < deadline
            await asyncio.sleep(0.002)
        source.kill()
        with pytest.raises(ReconcileError, match=r"backup incomplete|connection"):
            await task

    run(interrupted())
    assert not (out / "manifest.json").exists()
    assert not _partials(out)  # discarded
    source.start()
    result = run(take_backup(options(source), out, Selection(everything=True)))
    assert sorted(s.name for s in result.manifest.streams) == BIG
    assert reconcile("backup", "verify", str(out), cwd=tmp_path).returncode == 0


def test_restore_killed_midway_can_be_run_again_and_finishes(
    server_factory: Any, tmp_path: Path
) -> None:
    source = server_factory()
    run(_big_streams(source, BIG, 24))
    out = tmp_path / "backup"
    assert (
        reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    ).returncode == 0
    target = server_factory()
    args = ["restore", str(out), "--server", target.url, "--yes", "--parallel", "1"]

    async def streams() -> list[str]:
        async with open_client(options(target)) as client:
            return await client.stream_names()

    process = _start(args, tmp_path)
    _kill_when(process, lambda: len(run(streams())) >= 1)
    assert len(run(streams())) < len(BIG)
    # nats-server keeps the part of a stream an interrupted restore received: the
    # re-run recognises it as its own leftover and finishes without any flag
    done = reconcile(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run(everything(target, BIG)) == run(everything(source, BIG))


def test_a_lookalike_stream_holding_other_data_is_still_refused(
    server_factory: Any, tmp_path: Path
) -> None:
    """Same name, same config, same first sequence and fewer messages than the backup
    (what an interrupted restore leaves), but other messages: never deleted without the
    flags, and every one of its messages is still there."""
    source = server_factory()
    run(_big_streams(source, ["ONE"], 1))
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = json.loads((out / "manifest.json").read_text())["streams"][0]["config"]
    target = server_factory()

    async def lookalike() -> None:
        async with open_client(options(target)) as client:
            await client.create_stream({**config, "metadata": {}})
        nc = await nats.connect(target.url)
        try:
            js = nc.jetstream()
            for i in range(5):
                await js.publish("one.x", b"someone else's %d" % i, headers={"I": str(i)})
        finally:
            await nc.close()

    run(lookalike())
    before = run(everything(target, ["ONE"]))
    assert before["ONE"][1]["messages"] == 5
    args = ["restore", str(out), "--server", target.url, "--yes"]
    done = reconcile(*args, cwd=tmp_path)
    assert done.returncode == 1
    assert "refusing to restore" in done.stderr and "ONE" in done.stderr, done.stderr
    assert run(everything(target, ["ONE"])) == before
    done = reconcile(*args, "--replace-existing", "--allow-replace", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run(everything(target, ["ONE"])) == run(everything(source, ["ONE"]))


def _backup(server: NatsServer, tmp_path: Path) -> Path:
    run(_big_streams(server, ["ONE", "TWO"], 1))
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", server.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("damage", ["truncate", "flip", "drop-manifest-and-truncate"])
def test_damaged_snapshot_is_refused_with_the_file_named_before_anything_is_sent(
    server_factory: Any, tmp_path: Path, damage: str
) -> None:
    source = server_factory()
    out = _backup(source, tmp_path)
    data = out / "TWO" / "stream.tar.s2"
    body = data.read_bytes()
    if damage == "flip":
        data.write_bytes(body[:1000] + bytes([body[1000] ^ 0xFF]) + body[1001:])
    else:
        data.write_bytes(body[: len(body) // 2])
    if damage.startswith("drop-manifest"):
        (out / "manifest.json").unlink()  # a nats CLI folder: the framing check alone
    target = server_factory()
    done = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert done.returncode == 1
    assert str(data) in done.stderr and "nothing was sent" in done.stderr
    assert "Traceback" not in done.stderr

    async def streams() -> list[str]:
        async with open_client(options(target)) as client:
            return await client.stream_names()

    assert run(streams()) == []  # not even the undamaged stream
    if not damage.startswith("drop"):
        assert reconcile("backup", "verify", str(out), cwd=tmp_path).returncode == 1


def test_forged_manifest_names_cannot_escape_the_folder(
    server_factory: Any, tmp_path: Path
) -> None:
    source = server_factory()
    out = _backup(source, tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["streams"][0]["name"] = "../../etc"
    manifest["streams"][0]["config"]["name"] = "../../etc"
    (out / "manifest.json").write_text(json.dumps(manifest))
    done = reconcile("backup", "verify", str(out), cwd=tmp_path)
    assert done.returncode == 1
    assert "no valid stream name" in done.stderr and "Traceback" not in done.stderr


def test_credentials_never_reach_the_manifest(server_factory: Any, tmp_path: Path) -> None:
    secret = "pa55-w0rd-in-url"
    source = server_factory(users=[{"user": "admin", "password": secret}])
    url = source.url.replace("nats://", f"nats://admin:{secret}@")
    run(_fill_with_auth(url))
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for path in out.rglob("*.json"):
        assert secret not in path.read_text()
    assert secret not in done.stdout + done.stderr


async def _fill_with_auth(url: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="AUTH", subjects=["auth.>"])
        await js.publish("auth.x", b"data", headers={"H": "1"})
    finally:
        await nc.close()


def test_backup_memory_stays_bounded(server_factory: Any, tmp_path: Path) -> None:
    """A 96 MiB stream backs up and restores with the client's peak RSS far below it."""
    source = server_factory()
    run(_big_streams(source, ["HUGE"], 96))
    out = tmp_path / "backup"
    for args in (
        ["backup", "--all", "--out", str(out), "--server", source.url],
        ["restore", str(out), "--server", server_factory().url, "--yes"],
    ):
        process = _start(args, tmp_path)
        peak = 0
        while process.poll() is None:
            try:
                status = Path(f"/proc/{process.pid}/status").read_text()
            except FileNotFoundError:
                break
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
            time.sleep(0.01)
        _, err_text = process.communicate()
        assert process.returncode == 0, err_text
        assert 0 < peak < 90 * MIB, peak


def test_a_receiver_that_stalls_gets_an_error_not_a_short_snapshot(
    server_factory: Any, tmp_path: Path
) -> None:
    """The server gives up on a receiver that acks nothing for 5 s (408 No Flow Response):
    the snapshot is an error, never a short file taken for a whole one."""
    from reconciler.jetstream.snapshots import SnapshotFailed, snapshot_stream

    source = server_factory()
    run(_big_streams(source, ["SLOW"], 12))
    received: list[int] = []

    def stalled(chunk: bytes) -> None:
        if not received:
            time.sleep(6)  # blocks the loop: no ack reaches the server meanwhile
        received.append(len(chunk))

    async def take() -> None:
        async with open_client(options(source)) as client:
            await snapshot_stream(client, "SLOW", stalled)

    with pytest.raises(SnapshotFailed, match="408"):
        run(take())
    assert 0 < sum(received) < 12 * MIB
