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

import nats
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
        """Start the restore, and freeze the server the moment the first stream exists: on
        the server's own advisory of its creation (polling the stream names lost the race
        on a loaded machine: the three 16 MiB streams were all restored before a poll saw
        the first)."""
        nc = await nats.connect(target.url)
        frozen = asyncio.Event()

        async def created(msg: Any) -> None:
            if msg.subject.rsplit(".", 1)[-1] in BIG and not frozen.is_set():
                target.pause()  # the restore can go no further while Ctrl-C arrives
                frozen.set()

        try:
            await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.CREATED.*", cb=created)
            await nc.flush()
            started = _start(restore, tmp_path)
            while not frozen.is_set():
                assert started.poll() is None, started.communicate()
                await asyncio.sleep(0.005)
            try:
                os.kill(started.pid, signal.SIGINT)
                await asyncio.sleep(0.5)
            finally:
                target.resume()
        finally:
            await nc.close()
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
