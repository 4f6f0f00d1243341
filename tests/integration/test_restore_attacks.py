"""Restore attacked (issue 39, by an attacker of the landed fixes), on real servers,
messages counted by a raw client before and after. The restore marker is data anyone
who can read the folder and update a stream can write: with it forged, a restore with
no flag must still never bring back jobs a worker has done since the backup."""

from __future__ import annotations

from pathlib import Path

import pytest
from servers import NatsServer, run
from test_lifecycle import _publish
from test_restore_holes import (
    WORKQUEUE,
    _apply,
    _backup,
    _forge_marker,
    _marker,
    _restore,
    _state,
    _work_off,
)

pytestmark = pytest.mark.integration


def test_a_forged_marker_never_brings_back_all_the_jobs_done_since_the_backup(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Backup: 50 jobs (last 50). Since: a worker did all 50, nothing new came (0
    messages, last 50: not past the backup). Someone writes this backup's marker on
    the stream. A restore with no flag read it as its own empty leftover and brought
    the 50 done jobs back; nothing of the backup's is missing from a real leftover
    that holds no message and got past the backup's first sequence: refused."""
    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    run(_publish(url, "jobs.new", 50))
    out = _backup(clean_server, tmp_path, specs)
    run(_work_off(url, "JOBS", 50))
    assert _state(url, "JOBS") == (0, 50)
    _forge_marker(url, "JOBS", _marker(out, "JOBS"))

    refused = _restore(out, clean_server)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "refusing to restore" in refused.stderr and "JOBS" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert _state(url, "JOBS") == (0, 50)  # the 50 done jobs did not come back


def test_a_forged_marker_never_brings_back_jobs_done_between_the_first_and_last(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Backup: 11 jobs, jobs.a and jobs.b in turn (first and last are jobs.a). Since: a
    worker of jobs.b did its 5 (6 left, first 1, last 11: the backup's first and last
    messages, untouched). With this backup's marker forged, a restore with no flag took
    the stream for its own leftover and brought the 5 done jobs back; a leftover never
    has more gaps between its first and last message than the backup has: refused."""
    import nats

    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    for index in range(11):
        run(_publish(url, "jobs.a" if index % 2 == 0 else "jobs.b", 1))
    out = _backup(clean_server, tmp_path, specs)

    async def work_off_b() -> None:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            sub = await js.pull_subscribe("jobs.b", durable="b-worker", stream="JOBS")
            for message in await sub.fetch(5, timeout=5):
                await message.ack_sync()
            await sub.unsubscribe()
            await js.delete_consumer("JOBS", "b-worker")
        finally:
            await nc.close()

    run(work_off_b())
    assert _state(url, "JOBS") == (6, 11)
    _forge_marker(url, "JOBS", _marker(out, "JOBS"))

    refused = _restore(out, clean_server)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "refusing to restore" in refused.stderr and "JOBS" in refused.stderr
    assert _state(url, "JOBS") == (6, 11)  # the 5 done jobs of jobs.b did not come back
