"""Backup attacked (issue 39, by an attacker of the landed fixes; a careless user's
mistakes), on real servers, messages counted by a raw client: a backup into the folder
of an earlier one never removes that backup's copy of a stream it was asked for and
could not take."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cli_runner import cleaned_environ, reconcile, started
from servers import NatsServer, run
from test_lifecycle import _edit, _messages, _publish, _request
from test_restore_holes import _apply, _backup

from reconciler.execution import lock
from reconciler.execution.lock import Holder
from reconciler.jetstream import ConnectionOptions, open_client

pytestmark = pytest.mark.integration

STREAMS = (
    "kind: Stream\nname: ORDERS\nsubjects: [orders.>]\n---\n"
    "kind: Stream\nname: AUDIT\nsubjects: [audit.>]\n"
)


def _filled(server: NatsServer, tmp_path: Path) -> tuple[Path, Path]:
    """ORDERS (7 messages) and AUDIT (3) applied and backed up; (specs, backup folder)."""
    specs = _apply(server, tmp_path, STREAMS)
    run(_publish(server.url, "orders.new", 7))
    run(_publish(server.url, "audit.new", 3))
    return specs, _backup(server, tmp_path, specs)


def _restores_orders(out: Path, target: NatsServer) -> None:
    """The folder still restores ORDERS with its 7 messages on a fresh server."""
    args = ("restore", str(out), "--stream", "ORDERS", "--server", target.url, "--yes")
    done = reconcile(*args, cwd=out.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _messages(target.url, "ORDERS") == 7


def test_a_mistyped_stream_never_removes_the_earlier_backup(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    """``backup --all --stream ORDRES --out DIR`` (a typo) into the folder of last
    night's backup: the stream is not on the server; it said 'Backup complete: 0
    stream(s)', exit 0, and had removed last night's ORDERS and AUDIT. Now refused,
    naming the stream, nothing in the folder changed."""
    _, out = _filled(clean_server, tmp_path)
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    args = ("backup", "--all", "--stream", "ORDRES", "--out", str(out))
    done = reconcile(*args, "--server", clean_server.url, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ORDRES" in done.stderr and "Traceback" not in done.stderr
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    _restores_orders(out, server_factory())


def test_a_declared_stream_lost_on_the_server_keeps_its_earlier_backup(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    """The specs declare ORDERS and AUDIT, backed up every night into one folder. Someone
    deletes ORDERS on the server; the next night's backup warned and removed the only
    copy of its 7 messages (exit 0). Now refused, naming ORDERS, and the earlier backup
    still restores it."""
    specs, out = _filled(clean_server, tmp_path)
    assert "error" not in run(_request(clean_server.url, "$JS.API.STREAM.DELETE.ORDERS"))
    done = reconcile(
        "backup", str(specs), "--out", str(out), "--server", clean_server.url, cwd=tmp_path
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ORDERS" in done.stderr and "Traceback" not in done.stderr
    assert (out / "ORDERS" / "stream.tar.s2").is_file()
    _restores_orders(out, server_factory())


TWINS = (
    "kind: Stream\nname: ORDERS\nsubjects: [up.>]\n---\n"
    "kind: Stream\nname: orders\nsubjects: [low.>]\n---\n"
    "kind: Stream\nname: TICKS\nsubjects: [ticks.>]\nstorage: memory\n"
)


def test_a_case_twin_lost_after_a_failed_backup_keeps_its_copy(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    """The specs declare ORDERS and orders (folders ORDERS and orders~<hash>, kept apart
    in case) and a memory stream; one night's backup fails half-way (a stream in the way
    of the memory stream's temporary mirror) and leaves its journal, no manifest. Then
    orders is deleted on the server: the next backup refused for ORDERS, a name whose
    folder is itself, but for orders it looked in ``orders/`` only, found nothing of the
    journal's there, and removed ``orders~<hash>/``, the only copy of its 9 messages
    (exit 0). Now refused, naming orders; the copy restores."""
    url = clean_server.url
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "streams.yaml").write_text(TWINS)
    for name, subject, storage, count in (
        ("ORDERS", "up", "file", 5),
        ("orders", "low", "file", 9),
        ("TICKS", "ticks", "memory", 2),
    ):
        body = {"name": name, "subjects": [f"{subject}.>"], "storage": storage}
        assert "error" not in run(_request(url, f"$JS.API.STREAM.CREATE.{name}", body))
        run(_publish(url, f"{subject}.in", count))
    out = tmp_path / "backup"
    args = ("backup", str(specs), "--out", str(out), "--server", url)
    assert reconcile(*args, cwd=tmp_path).returncode == 0
    twin = next(p.name for p in out.iterdir() if p.name.startswith("orders~"))

    blocker = "RECONCILE_BACKUP_TICKS"  # not a mirror of TICKS: its backup fails
    body = {"name": blocker, "subjects": ["blocker.>"]}
    assert "error" not in run(_request(url, f"$JS.API.STREAM.CREATE.{blocker}", body))
    failed = reconcile(*args, cwd=tmp_path)
    assert failed.returncode == 1 and "TICKS" in failed.stderr, failed.stderr
    assert (out / "backup-in-progress.json").is_file() and not (out / "manifest.json").exists()
    for name in (blocker, "orders"):
        assert "error" not in run(_request(url, f"$JS.API.STREAM.DELETE.{name}"))

    done = reconcile(*args, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "orders" in done.stderr and "Traceback" not in done.stderr
    assert (out / twin / "stream.tar.s2").is_file()
    (out / "backup-in-progress.json").unlink()  # as restore says: its complete folders
    target = server_factory()
    restored = reconcile(
        "restore", str(out), "--stream", "orders", "--server", target.url, "--yes", cwd=tmp_path
    )
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert _messages(target.url, "orders") == 9
    assert _messages(url, "ORDERS") == 5


def test_all_says_which_stream_named_like_a_temporary_mirror_it_leaves_out(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``RECONCILE_BACKUP_`` names are the tool's own (a backup's temporary mirror), so
    ``--all`` leaves them out; a stream someone made under such a name (3 messages) was
    left out without a word while the backup said complete. Now the backup names it."""
    url = clean_server.url
    body = {"name": "RECONCILE_BACKUP_NOTES", "subjects": ["notes.>"]}
    assert "error" not in run(_request(url, "$JS.API.STREAM.CREATE.RECONCILE_BACKUP_NOTES", body))
    run(_publish(url, "notes.new", 3))
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "RECONCILE_BACKUP_NOTES" in done.stderr and "not backed up" in done.stderr
    assert not (out / "RECONCILE_BACKUP_NOTES").exists()
    assert _messages(url, "RECONCILE_BACKUP_NOTES") == 3


def _archive_of_ticks(url: str, *, keep: int | None) -> None:
    """TICKS (memory, 12 messages) and a file mirror of it under the temporary name,
    caught up; with ``keep``, TICKS then keeps only its last ``keep``."""
    ticks = {"name": "TICKS", "subjects": ["ticks.>"], "storage": "memory"}
    assert "error" not in run(_request(url, "$JS.API.STREAM.CREATE.TICKS", ticks))
    archive = {"name": "RECONCILE_BACKUP_TICKS", "storage": "file", "mirror": {"name": "TICKS"}}
    for _ in range(100):  # a file stream made again soon after a delete: now and then the
        # server refuses it (500, err 10049) while it still removes the old files
        # (docs/jetstream-notes.md); asked again, as the executor asks again
        made = run(_request(url, "$JS.API.STREAM.CREATE.RECONCILE_BACKUP_TICKS", archive))
        if (made.get("error") or {}).get("err_code") != 10049:
            break
        run(asyncio.sleep(0.1))
    assert "error" not in made, made
    run(_publish(url, "ticks.new", 12))
    for _ in range(100):  # the mirror copies asynchronously
        if _messages(url, "RECONCILE_BACKUP_TICKS") == 12:
            break
        run(asyncio.sleep(0.05))
    if keep is not None:
        _edit(url, "TICKS", max_msgs=keep)


def test_a_killed_backups_temporary_mirror_is_cleared_and_the_backup_goes_on(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """What a backup killed mid-copy leaves: a file mirror of the memory stream holding
    what the stream holds. The next backup deletes it, backs the stream up, and leaves
    no temporary stream."""
    url = clean_server.url
    _archive_of_ticks(url, keep=None)
    out = tmp_path / "backup"
    done = reconcile(
        "backup", "--all", "--stream", "TICKS", "--out", str(out), "--server", url, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    gone = run(_request(url, "$JS.API.STREAM.INFO.RECONCILE_BACKUP_TICKS"))
    assert gone["error"]["err_code"] == 10059  # stream not found
    assert _messages(url, "TICKS") == 12


def test_a_users_archive_mirror_under_the_temporary_name_is_never_deleted(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A memory stream keeps its last 5 messages; a file stream mirroring it, named as a
    backup's temporary mirror (``RECONCILE_BACKUP_TICKS``), is someone's archive of all
    12. A backup took it for a killed backup's leftover (a file mirror of the stream) and
    deleted it, and 7 messages were gone for good. Now refused, naming it; the archive
    keeps its 12 messages and the memory stream its 5."""
    url = clean_server.url
    _archive_of_ticks(url, keep=5)
    assert (_messages(url, "TICKS"), _messages(url, "RECONCILE_BACKUP_TICKS")) == (5, 12)
    out = tmp_path / "backup"
    done = reconcile(
        "backup", "--all", "--stream", "TICKS", "--out", str(out), "--server", url, cwd=tmp_path
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "RECONCILE_BACKUP_TICKS" in done.stderr and "Traceback" not in done.stderr
    assert (_messages(url, "TICKS"), _messages(url, "RECONCILE_BACKUP_TICKS")) == (5, 12)


def _as_a_user(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``reconcile ARGS`` as a user the file permissions apply to: as root, without the
    capabilities that let root read any file (skipped where they cannot be dropped)."""
    if os.geteuid() != 0:
        return reconcile(*args, cwd=cwd)
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    command = [
        "setpriv",
        "--bounding-set=-dac_override,-dac_read_search",
        sys.executable,
        "-m",
        "reconciler",
        *args,
    ]
    done = subprocess.run(
        command, cwd=cwd, env=cleaned_environ(), capture_output=True, text=True, check=False
    )
    if "setpriv:" in done.stderr:
        pytest.skip(f"cannot drop capabilities here: {done.stderr!r}")
    return done


@pytest.mark.parametrize("locked", ["ORDERS/stream.tar.s2", "ORDERS"])
def test_a_backup_file_the_user_cannot_read_is_named(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path, locked: str
) -> None:
    """A backup's files are 0600 and its folders 0700, its taker's alone: taken by root
    (a cron job, a container) and restored or verified by another user, a snapshot (or
    a stream's folder) that cannot be read said 'unexpected PermissionError at
    layout.py:182 (pathlib.py:1013): a reply no NATS server sends..., or a bug', naming
    no file. Now each door names the file; nothing is restored."""
    _, out = _filled(clean_server, tmp_path)
    (out / locked).chmod(0)
    target = server_factory()
    for args in (
        ("backup", "verify", str(out)),
        ("restore", str(out), "--server", target.url, "--yes"),
    ):
        done = _as_a_user(*args, cwd=tmp_path)
        assert done.returncode == 1, done.stdout + done.stderr
        assert str(out / "ORDERS") in done.stderr, done.stderr
        assert "unexpected" not in done.stderr and "Traceback" not in done.stderr
    assert "error" in run(_request(target.url, "$JS.API.STREAM.INFO.ORDERS"))
    (out / locked).chmod(0o700 if locked == "ORDERS" else 0o600)
    _restores_orders(out, target)


def test_a_backup_into_the_folder_a_restore_reads_is_refused(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    """The nightly backup runs into the folder a restore is reading (waiting for the
    apply lock, or at its question): the restore checked the digests of 7 messages and
    showed them in its plan, then sent the new backup's 10, said 'restore incomplete',
    and left ORDERS marked so that its re-run refused it. Now the backup is refused
    while the restore holds the folder, and the restore brings what it checked."""
    _, out = _filled(clean_server, tmp_path)
    target = server_factory()
    holder = Holder("someone", "elsewhere", os.getpid(), "run")

    async def locked() -> Any:
        async with open_client(ConnectionOptions(servers=target.url)) as client:
            return await lock.acquire(client, holder, timeout=0)

    async def unlocked(lease: Any) -> None:
        async with open_client(ConnectionOptions(servers=target.url)) as client:
            await lock.release(client, lease)

    lease = run(locked())
    restoring = started(
        "restore", str(out), "--server", target.url, "--yes", "--lock-timeout", "120", cwd=tmp_path
    )
    assert restoring.stderr is not None
    with ThreadPoolExecutor(1) as reader:
        said = reader.submit(restoring.stderr.readline).result(timeout=60)
    assert "for the apply lock" in said, said
    run(_publish(clean_server.url, "orders.new", 3))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    done = reconcile(
        "backup", "--all", "--out", str(out), "--server", clean_server.url, cwd=tmp_path
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(out) in done.stderr, done.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    run(unlocked(lease))
    _, err = restoring.communicate(timeout=120)
    assert restoring.returncode == 0, said + err
    assert _messages(target.url, "ORDERS") == 7 and _messages(target.url, "AUDIT") == 3
    assert _messages(clean_server.url, "ORDERS") == 10


def test_a_manifest_the_user_cannot_read_is_named_not_taken_for_someone_elses_folder(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The nightly backup's folder, its ``manifest.json`` another user's 0600 file (or
    chmod 000): a backup into it said 'neither empty nor a backup' and named what the
    folder holds, not the file it could not read. Now it names the manifest and says it
    cannot be read; nothing in the folder changed, and ``backup verify`` says the same."""
    _, out = _filled(clean_server, tmp_path)
    manifest = out / "manifest.json"
    manifest.chmod(0)
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    for args in (
        ("backup", "--all", "--out", str(out), "--server", clean_server.url),
        ("backup", "verify", str(out)),
    ):
        done = _as_a_user(*args, cwd=tmp_path)
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"{manifest}: cannot be read" in done.stderr, done.stderr
        assert "neither empty nor a backup" not in done.stderr, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
        assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    manifest.chmod(0o600)
    done = reconcile("backup", "verify", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_a_backup_that_cannot_reach_the_server_leaves_no_folder_it_made(tmp_path: Path) -> None:
    """A backup to a wrong URL (nothing listening) failed after it had made its --out
    folder (and the folders above it): an empty folder left behind, taken next time for
    a backup that ran. Now the folders it made go with the failure; a folder that was
    there before stays, as it was."""
    url = f"nats://127.0.0.1:{_closed_port()}"
    made = tmp_path / "nightly" / "2026-11-29"
    done = reconcile("backup", "--all", "--out", str(made), "--server", url, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and url in errors[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "nightly").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    done = reconcile("backup", "--all", "--out", str(kept), "--server", url, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert kept.is_dir() and not any(kept.iterdir())


def test_ctrl_c_while_a_backup_connects_leaves_no_folder_it_made(tmp_path: Path) -> None:
    """Ctrl-C while the backup waits for a server that never answers (a listener that
    sends nothing): the folder it made goes, and it says so instead of 'the backup in
    DIR is unfinished ... run the backup again' about a folder that holds nothing."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"nats://127.0.0.1:{silent.getsockname()[1]}"
        made = tmp_path / "nightly" / "2026-11-29"
        process = started("backup", "--all", "--out", str(made), "--server", url, cwd=tmp_path)
        for _ in range(2000):  # made, then it waits for the server's INFO (a hang guard)
            if made.exists() or process.poll() is not None:
                break
            time.sleep(0.005)
        assert made.is_dir(), process.communicate(timeout=60)  # it waits 5 s for an INFO
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert str(made) in last and "unfinished" not in last, err
    assert not (tmp_path / "nightly").exists()


@pytest.mark.parametrize(
    ("typed", "wrong"),
    [(("backup",), "reconcile backup take"), (("backup", "take"), "reconcile backup verify")],
)
def test_a_backup_usage_error_names_the_command_as_typed(
    tmp_path: Path, typed: tuple[str, ...], wrong: str
) -> None:
    """``reconcile backup --all`` without --out said 'Usage: reconcile backup take ...'
    and 'Try reconcile backup take --help', a sub-command the user never typed (hidden
    from --help). Now it names ``reconcile backup`` as typed (and ``reconcile backup
    take`` when that is what was typed); exit 1, as every usage error."""
    for extra in (("--all",), ("--all", "--out", "x", "--parallel", "0"), ("--nope",)):
        done = reconcile(*typed, *extra, cwd=tmp_path)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        said = " ".join(("reconcile", *typed))
        named = {line for line in done.stderr.split("'") if line.startswith("reconcile ")}
        assert f"{said} --help" in named and wrong not in done.stderr, done.stderr
        assert not (tmp_path / "x").exists()
