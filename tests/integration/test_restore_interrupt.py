"""Ctrl-C in the middle of a restore, then a re-run (issue 39's next hole), on a real
server: the interrupted run exits 130 and gives the apply lock back; what it left is
recognised as its own (its marker) and the re-run finishes with no flag; every message
and consumer position is the source's, counted by a raw client."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from backup_fixtures import everything
from cli_runner import reconcile
from servers import options, run
from test_backup_faults import BIG, _big_streams, _start

from reconciler.identity import LOCK_BUCKET
from reconciler.jetstream import open_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # a fault run: .ci/run's second stage


def test_ctrl_c_mid_restore_releases_the_lock_and_a_rerun_finishes(
    server_factory: Any, tmp_path: Path
) -> None:
    source = server_factory()
    run(_big_streams(source, BIG, 16))
    out = tmp_path / "backup"
    args = ("backup", "--all", "--out", str(out), "--server", source.url)
    assert reconcile(*args, cwd=tmp_path).returncode == 0
    target = server_factory()
    restore = ["restore", str(out), "--server", target.url, "--yes", "--lock-timeout", "2"]

    async def streams() -> list[str]:
        async with open_client(options(target)) as client:
            return [n for n in await client.stream_names() if n in BIG]

    async def lease() -> Any:
        async with open_client(options(target)) as client:
            return await client.kv_entry(LOCK_BUCKET, "apply")

    async def interrupted_at_the_first_stream() -> Any:
        """Start the restore with a connection already open, and freeze the server as
        soon as the first stream exists (polled every few milliseconds): opening a
        connection only then took longer, on a loaded machine, than the whole restore."""
        async with open_client(options(target)) as client:
            started = _start(restore, tmp_path)
            while not [n for n in await client.stream_names() if n in BIG]:
                assert started.poll() is None, started.communicate()
                await asyncio.sleep(0.005)
            # Frozen while Ctrl-C arrives, the server cannot let the restore finish first
            # (three 16 MiB streams take well under a second on a quiet machine).
            target.pause()
            try:
                os.kill(started.pid, signal.SIGINT)
                await asyncio.sleep(0.5)
            finally:
                target.resume()
            return started

    process = run(interrupted_at_the_first_stream())
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    held = run(lease())
    assert held is None or held.operation != "PUT"  # the lease was given back
    assert len(run(streams())) < len(BIG)

    done = reconcile(*restore, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "interrupted restore" in done.stdout  # its own leftover: deleted, restored again
    assert run(everything(target, BIG)) == run(everything(source, BIG))
