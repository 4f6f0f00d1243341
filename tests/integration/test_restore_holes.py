"""Restore turned against the data (issue 39), on real servers, messages counted by a raw
client before and after: only a stream this tool's own interrupted restore of this
backup left is replaced without the replace flags; ``prevent_destroy`` holds on every
path; a forged restore marker never makes someone's messages a leftover."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_lifecycle import ORDERS, _info, _messages, _publish, _request

from reconciler.backup.manifest import read_contents
from reconciler.backup.restore_checks import RESTORING_KEY, marker, with_marker
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.jetstream.snapshots import restore_stream

pytestmark = pytest.mark.integration

WORKQUEUE = "kind: Stream\nname: JOBS\nsubjects: [jobs.>]\nretention: workqueue\n"


def _state(url: str, stream: str) -> tuple[int, int]:
    """(messages, last sequence), read with a raw request."""
    state = _info(url, stream)["state"]
    return int(state["messages"]), int(state["last_seq"])


def _apply(server: NatsServer, tmp_path: Path, text: str) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    (specs / "streams.yaml").write_text(text)
    done = reconcile("apply", str(specs), "--server", server.url, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return specs


def _backup(server: NatsServer, tmp_path: Path, specs: Path) -> Path:
    out = tmp_path / "backup"
    done = reconcile("backup", str(specs), "--out", str(out), "--server", server.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return out


async def _work_off(url: str, stream: str, count: int) -> None:
    """A worker takes and acknowledges ``count`` jobs (a workqueue deletes each)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe("jobs.>", durable="worker", stream=stream)
        done = 0
        while done < count:
            for message in await sub.fetch(min(50, count - done), timeout=5):
                await message.ack_sync()
                done += 1
        await sub.unsubscribe()
        await js.delete_consumer(stream, "worker")
    finally:
        await nc.close()


def _restore(out: Path, server: NatsServer, *flags: str) -> Any:
    return reconcile("restore", str(out), "--server", server.url, "--yes", *flags, cwd=out.parent)


def _forge_marker(url: str, stream: str, value: str) -> None:
    """Someone else writes the restore marker onto a live stream (STREAM.UPDATE)."""
    config = _info(url, stream)["config"]
    metadata = {**(config.get("metadata") or {}), RESTORING_KEY: value}
    answer = run(_request(url, f"$JS.API.STREAM.UPDATE.{stream}", {**config, "metadata": metadata}))
    assert "error" not in answer, answer


def _marker(out: Path, stream: str) -> str:
    contents = read_contents(out)
    (record,) = [r for r in contents.streams if r.name == stream]
    return marker(contents, record)


def test_a_workqueue_whose_jobs_were_done_since_the_backup_is_never_replaced(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Backup: 50 jobs (last 50). Since: 30 more, all 80 done (0 messages, last 80).
    Restore with no flag brought the 50 done jobs back; now it is refused, nothing
    changes, and even a forged marker does not make it a leftover (past the backup)."""
    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    run(_publish(url, "jobs.new", 50))
    out = _backup(clean_server, tmp_path, specs)
    run(_publish(url, "jobs.new", 30))
    run(_work_off(url, "JOBS", 80))
    assert _state(url, "JOBS") == (0, 80)

    refused = _restore(out, clean_server)
    assert refused.returncode == 1, refused.stdout
    assert "refusing to restore" in refused.stderr and "JOBS" in refused.stderr
    assert _state(url, "JOBS") == (0, 80)

    _forge_marker(url, "JOBS", _marker(out, "JOBS"))
    refused = _restore(out, clean_server)
    assert refused.returncode == 1, refused.stdout
    assert _state(url, "JOBS") == (0, 80)  # the 50 finished jobs did not come back

    flag_missing = _restore(out, clean_server, "--replace-existing")
    assert flag_missing.returncode == 1 and "--allow-replace" in flag_missing.stderr
    assert _state(url, "JOBS") == (0, 80)


def test_an_empty_stream_without_the_marker_is_not_a_leftover(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Backup 50 messages; someone purges the stream (0 messages, last 50: within the
    backup's sequences). No restore left it: refused without the replace flags."""
    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    run(_publish(url, "jobs.new", 50))
    out = _backup(clean_server, tmp_path, specs)
    assert "error" not in run(_request(url, "$JS.API.STREAM.PURGE.JOBS"))
    assert _state(url, "JOBS") == (0, 50)

    refused = _restore(out, clean_server)
    assert refused.returncode == 1, refused.stdout
    assert "no restore of this backup left it" in refused.stderr
    assert _state(url, "JOBS") == (0, 50)


def test_prevent_destroy_holds_on_every_restore_path(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A protected stream made again since the backup (empty: none of the backup's
    messages), then given this backup's restore marker by someone: a proven leftover by
    its content, yet protected: no flag and no marker lets a restore delete it."""
    url = clean_server.url
    text = ORDERS.format(storage="file", max_msgs=100).split("---")[0]  # no consumer
    specs = _apply(clean_server, tmp_path, text)
    run(_publish(url, "orders.new", 20))
    out = _backup(clean_server, tmp_path, specs)
    config = _info(url, "ORDERS")["config"]
    assert "error" not in run(_request(url, "$JS.API.STREAM.DELETE.ORDERS"))
    assert "error" not in run(_request(url, "$JS.API.STREAM.CREATE.ORDERS", config))
    _forge_marker(url, "ORDERS", _marker(out, "ORDERS"))
    before = _state(url, "ORDERS")
    assert before == (0, 0)
    for flags in ((), ("--replace-existing", "--allow-replace", "--allow-data-loss")):
        refused = _restore(out, clean_server, *flags)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "prevent_destroy" in refused.stderr, refused.stderr
        assert "streams.yaml:7" in refused.stderr
        assert _state(url, "ORDERS") == before


def test_a_forged_marker_never_makes_other_messages_a_leftover(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Same name, first part of the backup's sequences, this backup's marker written by
    another client, but messages the backup does not have: refused, every one kept."""
    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    run(_publish(url, "jobs.new", 20))
    out = _backup(clean_server, tmp_path, specs)
    config = _info(url, "JOBS")["config"]
    assert "error" not in run(_request(url, "$JS.API.STREAM.DELETE.JOBS"))
    value = _marker(out, "JOBS")
    forged = {**config, "metadata": {**(config.get("metadata") or {}), RESTORING_KEY: value}}
    assert "error" not in run(_request(url, "$JS.API.STREAM.CREATE.JOBS", forged))
    run(_publish(url, "jobs.other", 5))  # sequences 1-5: within the backup's, not its
    assert _state(url, "JOBS") == (5, 5)

    refused = _restore(out, clean_server)
    assert refused.returncode == 1, refused.stdout
    assert _state(url, "JOBS") == (5, 5)


def test_this_restores_own_leftover_is_finished_without_flags(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """What a restore killed after the RESTORE and before its verification leaves (the
    whole stream, still marked): the re-run deletes it, restores it again, verifies, and
    takes the marker off; a further re-run has nothing to do."""
    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    run(_publish(url, "jobs.new", 30))
    out = _backup(clean_server, tmp_path, specs)
    assert "error" not in run(_request(url, "$JS.API.STREAM.DELETE.JOBS"))
    contents = read_contents(out)
    (record,) = contents.streams

    async def killed_before_verifying() -> None:
        async with open_client(ConnectionOptions(servers=url)) as client:
            data = contents.folder("JOBS").data.read_bytes()
            config = with_marker(record.config, marker(contents, record))
            await restore_stream(client, config, record.state, [data])

    run(killed_before_verifying())
    assert _state(url, "JOBS") == (30, 30)
    done = _restore(out, clean_server)
    assert done.returncode == 0, done.stderr
    assert "interrupted restore" in done.stdout
    assert "1 stream(s) restored and verified" in done.stdout
    assert _state(url, "JOBS") == (30, 30)
    metadata = _info(url, "JOBS")["config"].get("metadata") or {}
    assert RESTORING_KEY not in metadata
    again = _restore(out, clean_server)
    assert again.returncode == 0, again.stderr
    assert "Nothing to restore" in again.stdout and _messages(url, "JOBS") == 30


def test_a_manifest_without_marks_never_has_a_leftover_with_messages(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A marked stream holding messages, restored from a folder whose manifest records
    no marks: not proven, refused (every message kept)."""
    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    run(_publish(url, "jobs.new", 10))
    out = _backup(clean_server, tmp_path, specs)
    manifest = json.loads((out / "manifest.json").read_text())
    for stream in manifest["streams"]:
        stream.pop("marks", None)
    (out / "manifest.json").write_text(json.dumps(manifest))
    _forge_marker(url, "JOBS", _marker(out, "JOBS"))
    refused = _restore(out, clean_server)
    assert refused.returncode == 1, refused.stdout
    assert _messages(url, "JOBS") == 10


class _YesAfterPublishing:
    """A person at a terminal who says yes while an application publishes 4 messages."""

    asks = True

    def __init__(self, url: str) -> None:
        self.url = url

    def notice(self, message: str) -> None:
        pass

    async def confirm(self, plan: Any) -> bool:
        await _publish(self.url, "jobs.late", 4)
        return True


def test_a_replace_approved_while_the_stream_was_written_to_deletes_nothing(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``--replace-existing --allow-replace`` approved a plan deleting the stream as it
    was; 4 messages arrived while the question waited: the stream is not deleted."""
    from reconciler.backup.restore import Flags, restore

    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    run(_publish(url, "jobs.new", 10))
    out = _backup(clean_server, tmp_path, specs)
    run(_publish(url, "jobs.new", 5))
    assert _state(url, "JOBS") == (15, 15)
    flags = Flags(replace_existing=True, allow_replace=True)
    observer: Any = _YesAfterPublishing(url)
    result = run(restore(ConnectionOptions(servers=url), out, flags, observer=observer))
    assert result.problems and "changed since the plan; not deleted" in result.problems[0]
    assert result.restored == ()
    assert _state(url, "JOBS") == (19, 19)


def test_a_leftover_whose_consumer_the_server_moved_up_is_still_this_restores_own(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    """A stream whose limits had removed messages 1-5, with a consumer at 0: restored
    (marked) and interrupted before the verification, the server has moved the consumer
    to 5 (below the first message): still recognised, finished with no flag."""
    from test_restore_verify import _fill

    run(_fill(clean_server.url))
    out = tmp_path / "backup"
    args = ("backup", "--all", "--out", str(out), "--server", clean_server.url)
    assert reconcile(*args, cwd=tmp_path).returncode == 0
    contents = read_contents(out)
    (record,) = [r for r in contents.streams if r.name == "LIMITED"]
    target = server_factory()

    async def killed_before_verifying() -> None:
        async with open_client(ConnectionOptions(servers=target.url)) as client:
            data = contents.folder("LIMITED").data.read_bytes()
            config = with_marker(record.config, marker(contents, record))
            await restore_stream(client, config, record.state, [data])

    run(killed_before_verifying())
    done = reconcile(
        "restore", str(out), "--stream", "LIMITED", "--server", target.url, "--yes", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "interrupted restore" in done.stdout
    assert _state(target.url, "LIMITED") == (3, 8)
