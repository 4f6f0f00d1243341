"""A restore into a fresh server verifies what RESTORE guarantees, on every server of the
matrix (2.10, 2.11, 2.12, 2.14 and the newest): a stream never written to, and a
consumer on a stream whose limits had removed messages, come back and verify; a re-run
says it is done; the last line counts every stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats
import pytest
from backup_fixtures import everything
from cli_runner import reconcile
from servers import NatsServer, run

pytestmark = pytest.mark.integration

STREAMS = ["EMPTY", "LIMITED"]


async def _fill(url: str) -> None:
    """EMPTY: never written to, a consumer on it. LIMITED: keeps 3 messages of the 8
    published (first 6), a consumer made before (at 0) and one after, part-way."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="EMPTY", subjects=["empty.>"])
        await js.add_consumer("EMPTY", durable_name="waiting", ack_policy="explicit")
        await js.add_stream(name="LIMITED", subjects=["limited.>"], max_msgs=3)
        await js.add_consumer("LIMITED", durable_name="early", ack_policy="explicit")
        for i in range(8):
            await js.publish("limited.x", b"m%d" % i)
        await js.add_consumer("LIMITED", durable_name="late", ack_policy="explicit")
        sub = await js.pull_subscribe_bind("late", "LIMITED")
        (message,) = await sub.fetch(1, timeout=5)
        await message.ack_sync()
    finally:
        await nc.close()


def _restore(out: Path, server: NatsServer) -> Any:
    return reconcile("restore", str(out), "--server", server.url, "--yes", cwd=out.parent)


def test_a_fresh_server_restore_verifies_and_a_rerun_is_done(
    versioned_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    source = versioned_server
    run(_fill(source.url))
    try:
        before = run(everything(source, STREAMS))
        out = tmp_path / "backup"
        args = ("--all", "--out", str(out), "--server", source.url)
        done = reconcile("backup", *args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    finally:
        run(_delete(source.url, STREAMS))
    target = server_factory(version=source.version)
    restored = _restore(out, target)
    assert restored.returncode == 0, restored.stderr
    assert "2 stream(s) restored and verified" in restored.stdout, restored.stdout
    after = run(everything(target, STREAMS))
    for name in STREAMS:  # every message exactly (sequence, time, subject, data, headers)
        assert after[name][0] == before[name][0]
        for field in ("messages", "bytes", "last_seq"):
            assert after[name][1][field] == before[name][1][field]
    assert [m[0] for m in after["LIMITED"][0]] == [6, 7, 8]
    assert after["LIMITED"][2]["late"][:3] == before["LIMITED"][2]["late"][:3]
    again = _restore(out, target)
    assert again.returncode == 0, again.stderr
    assert "Nothing to restore: 2 stream(s) already restored" in again.stdout, again.stdout


async def _delete(url: str, streams: list[str]) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for name in streams:
            await js.delete_stream(name)
    finally:
        await nc.close()
