"""Attacks on the backup folder (issue 39, "Backup"), on real servers, messages counted by
a raw client: a stream's data never collides with the backup's own files, a backup
removes only what an earlier backup of the same folder wrote, a full disk is one line,
the tool's own lock bucket is not user data, and the next holes of the same kind
(a symbolic link inside the folder, a second backup into it at the same time)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, options, run
from test_lifecycle import _messages, _publish, _request

from reconciler.backup.layout import BackupError
from reconciler.backup.take import Selection, take_backup

pytestmark = pytest.mark.integration

ORDERS = 'kind: Stream\nname: ORDERS\nsubjects: ["orders.>"]\n'


def _stream(url: str, name: str, count: int, subject: str | None = None) -> None:
    """Stream ``name`` (made with the raw API, as an application would) holding ``count``
    messages published to it."""
    subject = subject or f"{name.lower()}.in"
    config = {"name": name, "subjects": [subject], "storage": "file"}
    made = run(_request(url, f"$JS.API.STREAM.CREATE.{name}", config))
    assert "error" not in made, made
    run(_publish(url, subject, count))
    assert _messages(url, name) == count


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes (the folders as paths ending in /)."""
    found: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        found[rel + "/" if path.is_dir() and not path.is_symlink() else rel] = (
            b"" if path.is_dir() else path.read_bytes()
        )
    return found


def _error(stderr: str) -> str:
    """The error line of a run (the CLI's one line, after any notices)."""
    found = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(found) == 1, stderr
    return found[0]


def _streams(backup: Path) -> list[str]:
    manifest = json.loads((backup / "manifest.json").read_text())
    return sorted(s["name"] for s in manifest["streams"])


def test_a_stream_named_specs_keeps_its_snapshot_beside_the_spec_files(
    server_factory: object, tmp_path: Path
) -> None:
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    _stream(source.url, "specs", 20)
    _stream(source.url, "ORDERS", 3)
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _streams(out) == ["ORDERS", "specs"]
    # the nats CLI's layout: `nats stream restore DIR/specs` reads these two files
    assert (out / "specs" / "stream.tar.s2").is_file()
    assert json.loads((out / "specs" / "backup.json").read_text())["config"]["name"] == "specs"
    assert reconcile("backup", "verify", str(out), cwd=tmp_path).returncode == 0

    restored = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert _messages(target.url, "specs") == 20
    assert _messages(target.url, "ORDERS") == 3


def _repository(root: Path) -> None:
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "orders.yaml").write_text(ORDERS)
    (root / "specs" / "README.md").write_text("# our specs\n")
    (root / "manifest.json").write_text('{"name": "our web app", "version": 3}\n')


def test_a_backup_into_the_users_own_folder_refuses_and_removes_nothing(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    url = clean_server.url
    repo = tmp_path / "repo"
    _repository(repo)
    applied = reconcile("apply", "specs", "--server", url, "--yes", cwd=repo)
    assert applied.returncode == 0, applied.stderr
    run(_publish(url, "orders.new", 5))
    before = _files(repo)

    done = reconcile("backup", "specs", "--out", ".", "--server", url, cwd=repo)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    refusal = _error(done.stderr)
    assert "manifest.json" in refusal and "specs" in refusal, done.stderr
    assert _files(repo) == before  # not one file removed, changed or added
    assert _messages(url, "ORDERS") == 5


def test_a_later_backup_removes_only_what_the_earlier_one_wrote(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    url = clean_server.url
    _stream(url, "ORDERS", 7)
    _stream(url, "LOGS", 4)
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (out / "README.md").write_text("nightly backups, keep 7\n")
    (out / "notes").mkdir()
    (out / "notes" / "specs.yaml").write_text("mine\n")
    (out / "manifest.json.sig").write_text("a signature of the manifest\n")
    ours = {"README.md", "notes/", "notes/specs.yaml", "manifest.json.sig"}

    args = ("--out", str(out), "--server", url)
    done = reconcile("backup", "--all", "--stream", "ORDERS", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _streams(out) == ["ORDERS"]
    assert not (out / "LOGS").exists()  # the earlier backup's own files, gone
    after = _files(out)
    assert ours <= set(after) and after["notes/specs.yaml"] == b"mine\n"
    assert reconcile("backup", "verify", str(out), cwd=tmp_path).returncode == 0

    # a file of someone else's where the backup would write: refused before any change
    (out / "ORDERS" / "notes.txt").write_text("mine too\n")
    before = _files(out)
    done = reconcile("backup", "--all", *args, cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "notes.txt" in _error(done.stderr)
    assert _files(out) == before
    assert _messages(url, "ORDERS") == 7 and _messages(url, "LOGS") == 4


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: a real full disk (root only; skipped where it cannot be mounted)."""
    folder = tmp_path / "small"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr!r}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


async def _incompressible(url: str, stream: str, count: int) -> None:
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for _ in range(count):
            await js.publish(f"{stream.lower()}.in", os.urandom(64 * 1024))
    finally:
        await nc.close()


def test_a_full_disk_is_one_line_naming_the_folder_and_the_stream(
    clean_server: NatsServer, server_factory: object, small_disk: Path, tmp_path: Path
) -> None:
    url = clean_server.url
    _stream(url, "BULK", 0)
    run(_incompressible(url, "BULK", 40))  # 2.5 MiB that S2 cannot shrink
    _stream(url, "SMALL", 3)  # fits: its folder is complete
    out = small_disk / "backup"
    args = ("--out", str(out), "--server", url, "--parallel", "1")
    done = reconcile("backup", "--all", *args, cwd=tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    line = _error(done.stderr)
    assert str(out) in line and "BULK" in line, done.stderr
    assert not (out / "manifest.json").exists()
    assert not [p for p in small_disk.rglob("*") if p.name.endswith(".partial")]
    assert _messages(url, "BULK") == 40 and _messages(url, "SMALL") == 3

    # what the failed backup left is no backup to restore from, however whole a part
    target = server_factory()  # type: ignore[operator]
    restored = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert restored.returncode == 1 and "Traceback" not in restored.stderr
    assert "backup-in-progress.json" in _error(restored.stderr)
    assert run(_request(target.url, "$JS.API.STREAM.NAMES"))["streams"] in (None, [])


def test_the_tools_own_lock_bucket_is_not_backed_up(server_factory: object, tmp_path: Path) -> None:
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    (tmp_path / "orders.yaml").write_text(ORDERS)
    applied = reconcile("apply", "orders.yaml", "--server", source.url, "--yes", cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    assert _messages(source.url, "KV_RECONCILE_LOCKS") >= 0  # apply made its lock bucket
    run(_publish(source.url, "orders.new", 6))
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _streams(out) == ["ORDERS"]
    assert "KV_RECONCILE_LOCKS" in done.stderr  # said so
    assert not (out / "KV_RECONCILE_LOCKS").exists()

    named = reconcile(
        "backup", "--stream", "KV_RECONCILE_LOCKS", "--out", str(tmp_path / "lock"),
        "--server", source.url, cwd=tmp_path,
    )  # fmt: skip
    assert named.returncode == 1 and "Traceback" not in named.stderr
    assert "KV_RECONCILE_LOCKS" in named.stderr

    restored = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr
    names = run(_request(target.url, "$JS.API.STREAM.NAMES"))["streams"]
    # the restore takes the apply lock on the target (its own, new bucket), never the source's
    assert sorted(names) == ["KV_RECONCILE_LOCKS", "ORDERS"]
    assert "KV_RECONCILE_LOCKS" not in _streams(out)
    assert _messages(target.url, "ORDERS") == 6


def test_backup_help_lists_the_options_of_a_backup(tmp_path: Path) -> None:
    done = reconcile("backup", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for option in ("--out", "--all", "--stream", "--parallel", "--server", "--env"):
        assert option in done.stdout, option
    assert "verify" in done.stdout


def test_a_symbolic_link_in_the_folder_is_never_followed(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    url = clean_server.url
    _stream(url, "ORDERS", 9)
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # someone swaps the stream's folder for a link to another folder of the same shape
    victim = tmp_path / "elsewhere"
    (out / "ORDERS").rename(victim)
    (out / "ORDERS").symlink_to(victim, target_is_directory=True)
    kept = _files(victim)
    done = reconcile("backup", "--all", "--out", str(out), "--server", url, cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "ORDERS" in done.stderr and "link" in done.stderr, done.stderr
    assert _files(victim) == kept  # neither written nor removed through the link
    assert _messages(url, "ORDERS") == 9


def test_a_second_backup_into_a_folder_being_written_is_refused(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    url = clean_server.url
    _stream(url, "ORDERS", 5)
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    before = _files(out)
    run(_publish(url, "orders.in", 2))
    held = os.open(out, os.O_RDONLY)  # what a backup at work holds on its folder
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = reconcile("backup", "--all", "--out", str(out), "--server", url, cwd=tmp_path)
    finally:
        os.close(held)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert str(out) in done.stderr, done.stderr
    assert _files(out) == before  # the first backup's files, untouched
    done = reconcile("backup", "--all", "--out", str(out), "--server", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # once it is free
    assert _messages(url, "ORDERS") == 7


@pytest.mark.parametrize("name", ["commandes-été-注文", "L" * 255], ids=["unicode", "255-bytes"])
def test_a_stream_with_a_unicode_or_the_longest_name_backs_up_and_restores(
    server_factory: object, tmp_path: Path, name: str
) -> None:
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    _stream(source.url, name, 11, subject="commandes.in")
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (out / _folders(out)[name] / "stream.tar.s2").is_file()
    restored = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert _messages(target.url, name) == 11


def _folders(backup: Path) -> dict[str, str]:
    """Each stream's folder as the backup's manifest records it."""
    manifest = json.loads((backup / "manifest.json").read_text())
    return {s["name"]: s["folder"] for s in manifest["streams"]}


#: Streams the server takes and no spec may declare: ESC (a screen clear) and U+200B.
HIDDEN = {"A\x1b[2JB": ("esc.in", 7), "Z\u200bW": ("zw.in", 11), "ORDERS": ("orders.in", 5)}
RAW = ("\x1b", "\u200b")


def test_streams_named_with_esc_or_a_zero_width_space_back_up_with_all_and_restore(
    server_factory: object, tmp_path: Path
) -> None:
    """Found by names17b: `backup --all` failed as a whole when one live stream's name held
    ESC (the backup's own folder rule refused it as a folder name), and a name holding
    U+200B was written into a folder holding the raw character. Each stream's folder is
    now its name as the export names its files (%XX), recorded in the manifest; every
    stream is backed up and restored, messages counted, and no raw character reaches
    the disk or the output."""
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    for name, (subject, count) in HIDDEN.items():
        _stream(source.url, name, count, subject=subject)
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not any(raw in done.stdout + done.stderr for raw in RAW), ascii(done.stderr)
    assert _folders(out) == {
        "A\x1b[2JB": "A%1B%5B2JB",
        "Z\u200bW": "Z%E2%80%8BW",
        "ORDERS": "ORDERS",
    }
    for path in out.rglob("*"):
        assert path.name.isascii() and path.name.isprintable(), ascii(path)
    verified = reconcile("backup", "verify", str(out), cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr
    restored = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert not any(raw in restored.stdout + restored.stderr for raw in RAW)
    for name, (_, count) in HIDDEN.items():
        assert _messages(target.url, name) == count, ascii(name)
        assert _messages(source.url, name) == count, ascii(name)


def test_a_folder_written_by_the_earlier_rule_still_restores(
    server_factory: object, tmp_path: Path
) -> None:
    """Backups made before the export's rule put a stream into a folder named as the
    stream is (U+200B and all, `"folder"` in the manifest saying so): they restore from
    there, and a later backup into the folder moves the stream to its new folder, the
    old one removed."""
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    name = "Z\u200bW"
    _stream(source.url, name, 11, subject="zw.in")
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (out / _folders(out)[name]).rename(out / name)  # as the earlier rule wrote it
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["streams"][0]["folder"] = name
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    restored = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert _messages(target.url, name) == 11
    again = reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["Z%E2%80%8BW", "specs.d"]


def test_a_stream_in_two_folders_of_an_unfinished_move_is_refused_naming_both(
    server_factory: object, tmp_path: Path
) -> None:
    """A backup into a folder of the earlier rule moves stream ``A!B`` from ``A!B/`` to
    ``A%21B/``. One that fails half-way leaves both folders whole beside its journal, and
    restore says to remove the journal to restore the complete folders. Both declare
    ``A!B``: the restore planned it twice, restored the earlier folder's 11 messages
    (``A!B`` sorts first; the new copy holds 15), then failed on the second ('already in
    use', exit 1). Now refused before anything is sent, naming both folders; with the old
    one removed, the new copy restores."""
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    name = "A!B"
    _stream(source.url, name, 11, subject="bang.in")
    out = tmp_path / "backup"
    args = ("backup", "--all", "--out", str(out), "--server", source.url)
    assert reconcile(*args, cwd=tmp_path).returncode == 0
    assert _folders(out) == {name: "A%21B"}
    (out / "A%21B").rename(out / name)  # as the earlier rule wrote it
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["streams"][0]["folder"] = name
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    run(_publish(source.url, "bang.in", 4))
    memory = {"name": "MEM", "subjects": ["mem.in"], "storage": "memory"}
    assert "error" not in run(_request(source.url, "$JS.API.STREAM.CREATE.MEM", memory))
    _stream(source.url, "RECONCILE_BACKUP_MEM", 0, subject="taken.in")  # MEM's backup fails
    failed = reconcile(*args, cwd=tmp_path)
    assert failed.returncode == 1 and "MEM" in _error(failed.stderr), failed.stderr
    assert (out / name / "backup.json").is_file() and (out / "A%21B" / "backup.json").is_file()
    (out / "backup-in-progress.json").unlink()  # as restore advises

    restore = ("restore", str(out), "--server", target.url, "--yes")
    refused = reconcile(*restore, cwd=tmp_path)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    line = _error(refused.stderr)
    assert str(out / name) in refused.stderr and str(out / "A%21B") in refused.stderr, line
    assert run(_request(target.url, "$JS.API.STREAM.NAMES"))["streams"] in (None, [])
    shutil.rmtree(out / name)
    restored = reconcile(*restore, cwd=tmp_path)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert _messages(target.url, name) == 15 == _messages(source.url, name)


def test_a_stream_backup_another_tool_left_where_a_stream_goes_is_refused_and_kept(
    server_factory: object, tmp_path: Path
) -> None:
    """Someone keeps a ``nats stream backup`` of LOGS (3 messages: the two files of the
    nats CLI's layout) as ``LOGS/`` in the folder of our nightly backup, which holds
    ORDERS alone. A new LOGS is made on the server: the next ``--all`` backup wrote its
    snapshot over that folder's files (exit 0), which no earlier backup of ours listed;
    a file is only ever replaced when an earlier backup listed it as its own, and they
    counted as this backup's own since it was about to write them. Now refused, nothing
    changed, and the kept folder still restores its 3 messages."""
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    _stream(source.url, "LOGS", 3)
    kept = tmp_path / "logs-kept"
    args = ("--server", source.url)
    assert reconcile("backup", "--all", "--out", str(kept), *args, cwd=tmp_path).returncode == 0
    assert "error" not in run(_request(source.url, "$JS.API.STREAM.DELETE.LOGS"))
    _stream(source.url, "ORDERS", 5)
    out = tmp_path / "backup"
    assert reconcile("backup", "--all", "--out", str(out), *args, cwd=tmp_path).returncode == 0
    shutil.copytree(kept / "LOGS", out / "LOGS")  # the nats CLI's layout, another tool's
    _stream(source.url, "LOGS", 1)
    before = _files(out)

    done = reconcile("backup", "--all", "--out", str(out), *args, cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert str(out / "LOGS") in _error(done.stderr), done.stderr
    assert _files(out) == before
    restored = reconcile(
        "restore", str(out / "LOGS"), "--server", target.url, "--yes", cwd=tmp_path
    )
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert _messages(target.url, "LOGS") == 3
    assert _messages(source.url, "LOGS") == 1 and _messages(source.url, "ORDERS") == 5


@pytest.fixture
def folded(tmp_path: Path) -> Iterator[Any]:
    """``folded(out, name, other)``: ``out/other`` made the folder ``out/name`` (a bind
    mount), as a disk that ignores case (macOS, Windows) makes ``orders`` and ``ORDERS``
    one; unmounted at the end (root only; skipped where it cannot be mounted)."""
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    mounted: list[Path] = []

    def fold(out: Path, name: str, other: str) -> None:
        (out / other).mkdir()
        bound = subprocess.run(
            ["mount", "--bind", str(out / name), str(out / other)], capture_output=True, check=False
        )
        if bound.returncode != 0:
            pytest.skip(f"cannot bind-mount here: {bound.stderr!r}")
        mounted.append(out / other)

    try:
        yield fold
    finally:
        for path in mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_stream_whose_folder_is_another_case_of_an_earlier_one_keeps_its_snapshot(
    server_factory: object, folded: Any, tmp_path: Path
) -> None:
    """ORDERS and orders backed up into ORDERS/ and orders~<hash>/; ORDERS is deleted on
    the server. On a disk that ignores case, the next ``--all`` backup wrote orders into
    orders/, which is ORDERS/, then removed ORDERS/'s files as the earlier backup's that
    it no longer writes: its own snapshot of orders. It said 'Backup complete' with a
    manifest naming two files that were gone. Now refused before any change (the files
    there are not listed as orders/'s by any earlier backup), and the earlier backup
    restores both streams."""
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    _stream(source.url, "ORDERS", 5)
    _stream(source.url, "orders", 9, subject="lower.in")
    out = tmp_path / "backup"
    args = ("backup", "--all", "--out", str(out), "--server", source.url)
    assert reconcile(*args, cwd=tmp_path).returncode == 0
    assert _folders(out)["ORDERS"] == "ORDERS"
    assert "error" not in run(_request(source.url, "$JS.API.STREAM.DELETE.ORDERS"))
    folded(out, "ORDERS", "orders")
    before = _files(out)

    done = reconcile(*args, cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert _files(out) == before
    subprocess.run(["umount", str(out / "orders")], check=True)
    (out / "orders").rmdir()
    restored = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert _messages(target.url, "ORDERS") == 5 and _messages(target.url, "orders") == 9


def test_two_streams_in_one_folder_fail_the_backup_without_a_manifest(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """ORDERS and orders are two streams; on a file system that ignores case (macOS,
    Windows, ext4 casefold) folders ORDERS and orders are one, so the second is kept apart
    (``orders~<hash>``, as the export's files are). Two folders that still are one (a
    bind mount here) fail the backup without a manifest."""
    url = clean_server.url
    _stream(url, "ORDERS", 5)
    _stream(url, "orders", 9, subject="lower.in")
    out = tmp_path / "backup"
    args = ("--out", str(out), "--server", url, "--parallel", "1")
    done = reconcile("backup", "--all", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lower = _folders(out)["orders"]
    assert lower.lower() != "orders"  # kept apart where case is ignored, as export's files
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    bound = subprocess.run(
        ["mount", "--bind", str(out / "ORDERS"), str(out / lower)],
        capture_output=True,
        check=False,
    )
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bound.stderr!r}")
    try:
        done = reconcile("backup", "--all", *args, cwd=tmp_path)
    finally:
        subprocess.run(["umount", str(out / lower)], check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "ORDERS" in _error(done.stderr) and "orders" in _error(done.stderr)
    assert not (out / "manifest.json").exists()
    assert _messages(url, "ORDERS") == 5 and _messages(url, "orders") == 9


def test_a_memory_stream_too_long_for_its_mirror_is_named_and_kept(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A memory stream goes through a file mirror ``RECONCILE_BACKUP_<stream>``: a name
    past 238 bytes leaves no room for the prefix in nats-server's 255."""
    url = clean_server.url
    name = "M" * 240
    config = {"name": name, "subjects": ["mem.in"], "storage": "memory"}
    assert "error" not in run(_request(url, f"$JS.API.STREAM.CREATE.{name}", config))
    run(_publish(url, "mem.in", 4))
    out = tmp_path / "backup"
    done = reconcile("backup", "--all", "--out", str(out), "--server", url, cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    line = _error(done.stderr)
    assert name in line and "RECONCILE_BACKUP_" in line, line  # what is too long, and why
    assert not (out / "manifest.json").exists()
    assert run(_request(url, "$JS.API.STREAM.NAMES"))["streams"] == [name]
    assert _messages(url, name) == 4


def _forged_snapshot(real: NatsServer, account: NatsServer, tmp_path: Path, forge: Any) -> Any:
    """``reconcile backup --stream ORDERS --timeout 1`` against ``account`` (a server
    without JetStream) whose JetStream mallory answers as ``real`` does, but the
    snapshot request of ORDERS with ``forge(request)``."""
    from test_attacks8 import forwarded

    async def scenario() -> Any:
        async with forwarded(account.url, real.url, {"$JS.API.STREAM.SNAPSHOT.ORDERS": forge}):
            try:
                return await asyncio.to_thread(
                    reconcile, "backup", "--stream", "ORDERS", "--out", "backup",
                    "--server", account.url, "--timeout", "1", cwd=tmp_path,
                )  # fmt: skip
            finally:
                account.resume()  # a paused one: mallory's connection is closed at exit

    return run(scenario())


def _nothing_looks_complete(backup: Path, tmp_path: Path) -> None:
    """No manifest, no stream's backup.json or snapshot, no partial file (the folder
    says a backup is in progress); verify refuses the folder."""
    left = _files(backup)
    assert "manifest.json" not in left and "backup-in-progress.json" in left, left
    assert set(left) <= {"backup-in-progress.json", "ORDERS/"}, left
    assert reconcile("backup", "verify", "backup", cwd=tmp_path).returncode == 1


def _failed_leaving_nothing(done: Any, tmp_path: Path, why: str) -> None:
    """The backup ``done`` failed (exit 1, no traceback) naming ORDERS and ``why``, and
    left nothing that looks complete."""
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    error = _error(done.stderr)
    assert "ORDERS" in error and why in error, error
    _nothing_looks_complete(tmp_path / "backup", tmp_path)


def test_a_snapshot_whose_data_never_comes_fails_within_the_timeout_naming_the_stream(
    server_factory: Any, tmp_path: Path
) -> None:
    """A snapshot request answered, and then no data (a forged reply, a server that
    stops sending): the backup waited 30 s whatever ``--timeout`` said. Now it waits
    the request timeout (1 s here), names the stream, and leaves no manifest, no
    ``backup.json`` and no partial file."""
    real, account = server_factory(), server_factory(jetstream=False)
    _stream(real.url, "ORDERS", 5)
    forged = json.dumps({"config": {"name": "ORDERS"}, "state": {"messages": 5}}).encode()

    _failed_leaving_nothing(
        _forged_snapshot(real, account, tmp_path, forged), tmp_path, "within 1s"
    )


def test_a_server_that_stops_while_it_prepares_a_snapshot_fails_within_the_timeout(
    server_factory: Any, tmp_path: Path
) -> None:
    """The server stopped (SIGSTOP) once the snapshot request reached it: the reply was
    waited for up to 10 minutes (the time a check of every message may take). Now the
    server is asked for a PONG each request timeout meanwhile, and none ends the backup
    naming the stream."""
    real, account = server_factory(), server_factory(jetstream=False)
    _stream(real.url, "ORDERS", 5)

    def stop(request: Any) -> bytes:
        account.pause()
        return b"{}"

    _failed_leaving_nothing(
        _forged_snapshot(real, account, tmp_path, stop), tmp_path, "stopped answering"
    )


class _DeletingWhenFirstHeard:
    """An observer that deletes stream ``gone`` on the server (its own connection, in a
    thread of its own) the first time it hears a snapshot's progress: with one snapshot
    at a time, after ``gone`` was listed and before its snapshot begins."""

    def __init__(self, url: str, gone: str) -> None:
        self.url, self.gone, self.deleted = url, gone, False

    def notice(self, message: str) -> None:
        pass

    def progress(self, what: str, done: int, total: int | None) -> None:
        if self.deleted:
            return
        self.deleted = True
        subject = f"$JS.API.STREAM.DELETE.{self.gone}"
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(lambda: asyncio.run(_request(self.url, subject))).result()
        assert answer.get("success") is True, answer


def test_a_declared_stream_deleted_during_the_backup_keeps_its_earlier_copy(
    server_factory: object, tmp_path: Path
) -> None:
    """Specs declare A_FIRST and B_GONE; a backup holds both. The next backup lists both,
    then B_GONE is deleted on the server before its snapshot begins: it was skipped
    ('deleted before its snapshot'), the manifest written without it, and the earlier
    copy of its 7 messages removed as no longer listed: the only copy left, where a
    stream gone before the listing is refused and kept. Now the backup fails without a
    manifest, the copy kept byte for byte, the next run refuses as well, and the folder
    restores B_GONE's 7 messages."""
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    _stream(source.url, "A_FIRST", 30)
    _stream(source.url, "B_GONE", 7)
    out = tmp_path / "backup"
    declared = Selection(declared=("A_FIRST", "B_GONE"))
    run(take_backup(options(source), out, declared, parallel=1))
    kept = (out / "B_GONE" / "stream.tar.s2").read_bytes()

    deleting = _DeletingWhenFirstHeard(source.url, "B_GONE")
    with pytest.raises(BackupError) as refused:
        run(take_backup(options(source), out, declared, parallel=1, observer=deleting))  # type: ignore[arg-type]
    assert deleting.deleted and "B_GONE" in str(refused.value)
    assert not (out / "manifest.json").exists()
    assert (out / "B_GONE" / "stream.tar.s2").read_bytes() == kept
    with pytest.raises(BackupError):  # gone before the listing now: refused, kept
        run(take_backup(options(source), out, declared, parallel=1))
    assert (out / "B_GONE" / "stream.tar.s2").read_bytes() == kept

    (out / "backup-in-progress.json").unlink()  # as restore advises for a failed backup
    restored = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert _messages(target.url, "B_GONE") == 7


def test_a_lost_streams_folder_removed_as_advised_lets_it_go(
    server_factory: object, tmp_path: Path
) -> None:
    """A declared stream deleted during the backup fails it, and the next run refuses
    while the earlier copy is there, saying "remove the stream's folder there to let it
    go". Removing it did not: the failed backup's journal still named its files, so every
    later run refused as well, and the nightly backup of A_FIRST never ran again. Now a
    stream whose files are gone from the folder is no copy to keep: the next run backs
    up A_FIRST and writes its manifest."""
    source = server_factory()  # type: ignore[operator]
    _stream(source.url, "A_FIRST", 30)
    _stream(source.url, "B_GONE", 7)
    out = tmp_path / "backup"
    declared = Selection(declared=("A_FIRST", "B_GONE"))
    run(take_backup(options(source), out, declared, parallel=1))
    deleting = _DeletingWhenFirstHeard(source.url, "B_GONE")
    with pytest.raises(BackupError):
        run(take_backup(options(source), out, declared, parallel=1, observer=deleting))  # type: ignore[arg-type]
    with pytest.raises(BackupError) as refused:
        run(take_backup(options(source), out, declared, parallel=1))
    assert "remove the stream's folder" in str(refused.value)

    shutil.rmtree(out / "B_GONE")  # as the refusal advises
    run(take_backup(options(source), out, declared, parallel=1))

    assert _streams(out) == ["A_FIRST"]
