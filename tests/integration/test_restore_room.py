"""A restore checks the account's room as apply does, before anything is written: a
backup whose bytes the account cannot hold is refused whole (on main, the first stream was
restored and the second failed part-way with err 10047), messages counted by a raw client."""

from __future__ import annotations

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
