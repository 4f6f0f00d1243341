"""Backup and restore report their progress through the one listener (``Observer``): a
recording observer hears each stream's bytes as they move, and once that it finished
(``done == total``, the size of the snapshot on disk); the CLI's console draws it (a line
per stream without a terminal)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, options, run

from reconciler.backup.restore import Flags, restore
from reconciler.backup.take import Selection, take_backup
from reconciler.execution.requests import Observer

pytestmark = pytest.mark.integration

COUNT = 40


class Recording(Observer):
    def __init__(self) -> None:
        self.heard: list[tuple[str, int, int | None]] = []

    def progress(self, what: str, done: int, total: int | None) -> None:
        self.heard.append((what, done, total))


async def _publish(url: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        for i in range(COUNT):
            await js.publish("orders.x", os.urandom(2048), headers={"I": str(i)})
    finally:
        await nc.close()


async def _count(url: str) -> int:
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info("ORDERS")
        return int(info.state.messages)
    finally:
        await nc.close()


def _heard_one_transfer(heard: list[tuple[str, int, int | None]], what: str, size: int) -> None:
    """Bytes so far (never fewer), then one end: ``done == total`` == the file's size."""
    events = [e for e in heard if e[0] == what]
    assert len(events) >= 2, heard  # some progress, then the end
    done = [d for _, d, _ in events]
    assert done == sorted(done)
    assert all(total is None for _, _, total in events[:-1])
    assert events[-1] == (what, size, size)


def test_a_recording_observer_hears_a_real_backup_and_restore(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    run(_publish(clean_server.url))
    out = tmp_path / "backup"
    taken = Recording()
    result = run(
        take_backup(
            options(clean_server), out, Selection(everything=True), chunk_size=4096, observer=taken
        )
    )
    (record,) = result.manifest.streams
    size = (out / "ORDERS" / "stream.tar.s2").stat().st_size
    assert size > 4096  # more than one chunk: progress before the end
    _heard_one_transfer(taken.heard, "backed up ORDERS", size)
    assert {what for what, _, _ in taken.heard} == {"backed up ORDERS"}

    target = server_factory()
    restored = Recording()
    outcome = run(restore(options(target), out, Flags(), observer=restored))
    assert outcome.restored == ("ORDERS",), outcome.problems
    _heard_one_transfer(restored.heard, "restored ORDERS", size)
    assert run(_count(target.url)) == COUNT == record.state["messages"]


def test_the_cli_console_says_each_stream_once_when_it_is_done(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    run(_publish(clean_server.url))
    out = tmp_path / "backup"
    done = reconcile(
        "backup", "--all", "--out", str(out), "--server", clean_server.url, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert sum(line.startswith("backed up ORDERS: ") for line in done.stderr.splitlines()) == 1

    target = server_factory()
    back = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert back.returncode == 0, back.stderr
    said = back.stderr.splitlines()
    assert sum(line.startswith("restored ORDERS: ") for line in said) == 1
    assert run(_count(target.url)) == COUNT
