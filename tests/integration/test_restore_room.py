"""A restore checks the account's room as apply does, before anything is written: a
backup whose bytes the account cannot hold is refused whole (on main, the first stream was
restored and the second failed part-way with err 10047), messages counted by a raw client."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_capacity import USER, limited, options

from reconciler.identity import is_reserved
from reconciler.jetstream import open_client

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
TWO = "kind: Stream\nname: A\nsubjects: [a.>]\n---\nkind: Stream\nname: B\nsubjects: [b.>]\n"


async def _fill(url: str, subject: str, megabytes: int) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for _ in range(megabytes * 4):
            await js.publish(subject, b"x" * (256 * 1024 - 200))
    finally:
        await nc.close()


async def _census(server: NatsServer, **login: str) -> dict[str, int]:
    async with open_client(options(server)) as client:
        found: dict[str, int] = {}
        for name in await client.stream_names():
            if not is_reserved(name) and not name.startswith("KV_RECONCILE"):
                info = await client.stream_info(name)
                found[name] = int(info["state"]["messages"])
        return found


def _backup(server: NatsServer, root: Path) -> Path:
    specs = root / "specs"
    specs.mkdir()
    (specs / "streams.yaml").write_text(TWO)
    assert reconcile("apply", str(specs), "--server", server.url, "--yes", cwd=root).returncode == 0
    run(_fill(server.url, "a.x", 2))
    run(_fill(server.url, "b.x", 3))
    out = root / "backup"
    done = reconcile("backup", str(specs), "--out", str(out), "--server", server.url, cwd=root)
    assert done.returncode == 0, done.stderr
    return out


def test_a_backup_the_account_cannot_hold_is_refused_before_any_stream_is_restored(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    out = _backup(clean_server, tmp_path)
    target = limited(server_factory, max_file=4 * MiB, max_mem=1 * MiB)

    done = reconcile("restore", str(out), "--server", target.url, *USER, "--yes", cwd=tmp_path)

    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "no room for the restore of A, B" in done.stderr, done.stderr
    assert run(_census(target)) == {}  # nothing restored, not even A, which fits alone


def test_a_backup_that_fits_is_restored_whole(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    out = _backup(clean_server, tmp_path)
    target = limited(server_factory, max_file=64 * MiB, max_mem=1 * MiB)

    done = reconcile("restore", str(out), "--server", target.url, *USER, "--yes", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert run(_census(target)) == {"A": 8, "B": 12}


async def _fill_random(url: str, subject: str, megabytes: int) -> None:
    """``megabytes`` of random payloads: the snapshot cannot compress them away."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for _ in range(megabytes * 4):
            await js.publish(subject, os.urandom(256 * 1024 - 200))
    finally:
        await nc.close()


@pytest.mark.parametrize("fill", [_fill_random, _fill], ids=["random", "compressible"])
def test_a_manifest_saying_fewer_bytes_than_its_snapshot_holds_is_refused_for_room(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path, fill: Any
) -> None:
    """The room check counted the bytes the manifest says, which anyone who can write the
    folder writes: a manifest saying 1 KiB over a 6 MiB snapshot (its digests intact)
    passed the check of a 4 MiB account and the restore started. Now the snapshot's own
    size counts too: refused before anything is restored. Compressible messages (6 MiB
    of one byte repeated) make a snapshot file of under 1 KiB: what it unpacks to counts
    (before, the restore started and failed with err 10047)."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "streams.yaml").write_text("kind: Stream\nname: A\nsubjects: [a.>]\n")
    applied = reconcile("apply", str(specs), "--server", clean_server.url, "--yes", cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    run(fill(clean_server.url, "a.x", 6))
    out = tmp_path / "backup"
    done = reconcile(
        "backup", str(specs), "--out", str(out), "--server", clean_server.url, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    manifest = out / "manifest.json"
    body = json.loads(manifest.read_text())
    body["streams"][0]["state"]["bytes"] = 1024  # forged: the files' digests still hold
    manifest.write_text(json.dumps(body))
    assert reconcile("backup", "verify", str(out), cwd=tmp_path).returncode == 0
    target = limited(server_factory, max_file=4 * MiB, max_mem=1 * MiB)

    done = reconcile("restore", str(out), "--server", target.url, *USER, "--yes", cwd=tmp_path)

    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "no room for the restore of A" in done.stderr, done.stderr
    assert run(_census(target)) == {}
