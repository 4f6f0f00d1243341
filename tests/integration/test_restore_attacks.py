"""Restore attacked (issue 39, by an attacker of the landed fixes), on real servers,
messages counted by a raw client before and after. The restore marker is data anyone
who can read the folder and update a stream can write: with it forged, a restore with
no flag must still never bring back jobs a worker has done since the backup."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_lifecycle import ORDERS, _info, _messages, _publish, _request
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

from reconciler.backup.manifest import mark
from reconciler.backup.restore_checks import RESTORING_KEY
from reconciler.jetstream import ConnectionOptions
from reconciler.specs.lifecycle import PROTECT_KEY

pytestmark = pytest.mark.integration


async def _work_off_b(url: str) -> None:
    """A worker of jobs.b does its 5 jobs (acknowledged: the work queue deletes them)."""
    import nats

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

    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    for index in range(11):
        run(_publish(url, "jobs.a" if index % 2 == 0 else "jobs.b", 1))
    out = _backup(clean_server, tmp_path, specs)

    run(_work_off_b(url))
    assert _state(url, "JOBS") == (6, 11)
    _forge_marker(url, "JOBS", _marker(out, "JOBS"))

    refused = _restore(out, clean_server)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "refusing to restore" in refused.stderr and "JOBS" in refused.stderr
    assert _state(url, "JOBS") == (6, 11)  # the 5 done jobs of jobs.b did not come back


def test_a_forged_marker_never_brings_back_the_last_jobs_done_since_the_backup(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Backup: 5 jobs.a then 5 jobs.b (sequences 1-10). Since: a worker of jobs.b did the
    last 5; what is left (1-5) looks like the first part a 2.15 restore keeps when
    interrupted. The stream's last sequence stays 10 (its message gone), so the 5
    missing ones are gaps a first part never has: with this backup's marker forged,
    refused, 5 jobs kept. A guard: main refused it too (no message at the last
    sequence); the gap rule now refuses it before any message is read."""

    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    run(_publish(url, "jobs.a", 5))
    run(_publish(url, "jobs.b", 5))
    out = _backup(clean_server, tmp_path, specs)

    run(_work_off_b(url))
    assert _state(url, "JOBS") == (5, 10)
    _forge_marker(url, "JOBS", _marker(out, "JOBS"))
    refused = _restore(out, clean_server)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert _state(url, "JOBS") == (5, 10)


def _edit_manifest(out: Path, name: str, edit: Any) -> Path:
    """A copy of the backup folder ``out`` whose manifest's first stream was edited by
    hand (``edit`` changes the stream's entry in place)."""
    copy = out.parent / f"edited-{name}"
    shutil.copytree(out, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest["streams"][0])
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


#: Hand edits of a manifest whose values this tool read as numbers, mappings or lists
#: (each was a ValueError, TypeError or AttributeError traceback before).
_EDITS: dict[str, Any] = {
    "size-text": lambda s: s["files"]["stream.tar.s2"].update(size="abc"),
    "size-null": lambda s: s["files"]["stream.tar.s2"].update(size=None),
    "files-list": lambda s: s.update(files=[1]),
    "state-text": lambda s: s["state"].update(last_seq="abc"),
    "position-text": lambda s: s["consumers"][0]["positions"].update({"ack_floor.stream_seq": "x"}),
    "subjects-number": lambda s: s["config"].update(subjects=5),
    "metadata-text": lambda s: s["config"].update(metadata="x"),
}


def test_a_hand_edited_manifest_is_one_line_naming_it_and_restores_nothing(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A manifest edited by hand (a size, a sequence or a consumer position that is not
    a number, files or subjects that are not a list, metadata that is not a mapping):
    ``backup verify`` and ``restore`` printed a traceback. Each is now one error naming
    manifest.json, exit 1, and the restore makes no stream (counted by a raw client)."""
    url = clean_server.url
    text = ORDERS.format(storage="file", max_msgs=100)  # with its consumer
    specs = _apply(clean_server, tmp_path, text)
    run(_publish(url, "orders.new", 7))
    out = _backup(clean_server, tmp_path, specs)
    assert "error" not in run(_request(url, "$JS.API.STREAM.DELETE.ORDERS"))
    for name, edit in _EDITS.items():
        edited = _edit_manifest(out, name, edit)
        for args in (("backup", "verify", str(edited)), ("restore", str(edited))):
            server = ("--server", url, "--yes") if args[0] == "restore" else ()
            done = reconcile(*args, *server, cwd=tmp_path)
            assert done.returncode == 1, (name, args, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr, (name, done.stderr)
            assert "manifest" in done.stderr, (name, done.stderr)
        names = run(_request(url, "$JS.API.STREAM.NAMES")).get("streams") or []
        assert "ORDERS" not in names, name  # nothing restored
    done = _restore(out, clean_server)  # the folder as the backup wrote it restores
    assert done.returncode == 0, done.stderr
    assert _messages(url, "ORDERS") == 7


def test_a_backup_of_a_stream_still_marked_restores_unmarked_and_a_rerun_is_done(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    """A stream that still carries a restore marker (an earlier restore whose
    verification failed keeps it; the stream was used since) is backed up with it. Its
    restore on a fresh server verified, but the stream kept the old marker (only the new
    one was taken off), so the re-run refused it as 'not proven a leftover' where it
    should say it is done. A verified restore leaves no marker, whoever wrote it."""
    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    run(_publish(url, "jobs.new", 12))
    _forge_marker(url, "JOBS", "sha256:" + "0" * 64)  # an older restore's, never removed
    out = _backup(clean_server, tmp_path, specs)
    target = server_factory()

    done = _restore(out, target)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _state(target.url, "JOBS") == (12, 12)
    metadata = _info(target.url, "JOBS")["config"].get("metadata") or {}
    assert RESTORING_KEY not in metadata, metadata

    again = _restore(out, target)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Nothing to restore" in again.stdout
    assert _state(target.url, "JOBS") == (12, 12)


class _YesAfterProtecting:
    """A person at a terminal who says yes while a colleague records ``prevent_destroy``
    on the live stream (its metadata, as apply writes it)."""

    asks = True

    def __init__(self, url: str, stream: str) -> None:
        self.url, self.stream = url, stream

    def notice(self, message: str) -> None:
        pass

    async def confirm(self, plan: Any) -> bool:
        config = (await _request(self.url, f"$JS.API.STREAM.INFO.{self.stream}"))["config"]
        metadata = {**(config.get("metadata") or {}), PROTECT_KEY: "specs/streams.yaml:1"}
        body = {**config, "metadata": metadata}
        answer = await _request(self.url, f"$JS.API.STREAM.UPDATE.{self.stream}", body)
        assert "error" not in answer, answer
        return True


def test_a_stream_protected_while_the_question_waited_is_not_replaced(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``--replace-existing --allow-replace`` planned to replace JOBS (15 messages, 5
    past the backup's); while the question waited, its prevent_destroy was recorded
    on the stream. The restore deleted it anyway (only its messages and sequences were
    read again); prevent_destroy holds on every path, so it is not deleted: all 15 stay."""
    from reconciler.backup.restore import Flags, restore

    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    run(_publish(url, "jobs.new", 10))
    out = _backup(clean_server, tmp_path, specs)
    run(_publish(url, "jobs.new", 5))
    flags = Flags(replace_existing=True, allow_replace=True)
    observer: Any = _YesAfterProtecting(url, "JOBS")
    result = run(restore(ConnectionOptions(servers=url), out, flags, observer=observer))
    assert result.problems and "prevent_destroy" in result.problems[0], result.problems
    assert result.restored == ()
    assert _state(url, "JOBS") == (15, 15)


class _YesAfterANewConsumer:
    """A person at a terminal who says yes while an application deployed meanwhile makes
    its durable consumer on the live stream."""

    asks = True

    def __init__(self, url: str, stream: str) -> None:
        self.url, self.stream = url, stream

    def notice(self, message: str) -> None:
        pass

    async def confirm(self, plan: Any) -> bool:
        body = {
            "stream_name": self.stream,
            "config": {"durable_name": "late", "ack_policy": "explicit"},
        }
        answer = await _request(self.url, f"$JS.API.CONSUMER.CREATE.{self.stream}.late", body)
        assert "error" not in answer, answer
        return True


def test_a_consumer_made_while_the_question_waited_is_not_deleted_with_the_stream(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``--replace-existing --allow-replace`` planned to replace JOBS with no consumer;
    while the question waited an application made its durable consumer ``late``. Only
    messages and sequences were read again, so the stream went with the consumer the
    plan never showed; now it is not deleted: 15 messages and the consumer stay."""
    from reconciler.backup.restore import Flags, restore

    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    run(_publish(url, "jobs.new", 10))
    out = _backup(clean_server, tmp_path, specs)
    run(_publish(url, "jobs.new", 5))
    flags = Flags(replace_existing=True, allow_replace=True)
    observer: Any = _YesAfterANewConsumer(url, "JOBS")
    result = run(restore(ConnectionOptions(servers=url), out, flags, observer=observer))
    assert result.problems and "changed since the plan" in result.problems[0], result.problems
    assert result.restored == ()
    assert _state(url, "JOBS") == (15, 15)
    assert "error" not in run(_request(url, "$JS.API.CONSUMER.INFO.JOBS.late"))


def test_marks_forged_in_the_manifest_never_make_someones_stream_a_leftover(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Hole: the restore marker digested the stream's name and its two files, not the
    manifest's ``marks`` (the first and last message a leftover must hold). A stream of
    someone's carrying this backup's marker (its config copied from a leftover), holding
    25 messages of theirs, was refused by the marks; with the marks edited in the
    manifest to name their first and last message (every digest still right), a restore
    with no flag took it for its own leftover and replaced their 25 messages by the
    backup's 30. The marker now covers the stream's manifest entry: an edited entry makes
    another marker, and their stream is refused, its messages kept."""
    url = clean_server.url
    specs = _apply(clean_server, tmp_path, WORKQUEUE)
    run(_publish(url, "jobs.new", 30))
    out = _backup(clean_server, tmp_path, specs)
    genuine = _marker(out, "JOBS")
    assert "error" not in run(_request(url, "$JS.API.STREAM.DELETE.JOBS"))
    theirs = {"name": "JOBS", "subjects": ["jobs.>"], "retention": "workqueue"}
    assert "error" not in run(_request(url, "$JS.API.STREAM.CREATE.JOBS", theirs))
    run(_publish(url, "jobs.theirs", 25))
    _forge_marker(url, "JOBS", genuine)  # as a copied config carries it
    refused = _restore(out, clean_server)  # their first message is not the backup's
    assert refused.returncode == 1 and _state(url, "JOBS") == (25, 25), refused.stdout

    def their_marks(entry: dict[str, Any]) -> None:
        got = [run(_request(url, "$JS.API.STREAM.MSG.GET.JOBS", {"seq": n})) for n in (1, 25)]
        entry["marks"] = {"first": mark(got[0]["message"]), "last": mark(got[1]["message"])}

    forged = _edit_manifest(out, "marks", their_marks)
    verified = reconcile("backup", "verify", str(forged), cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr  # every digest is still right
    again = _restore(forged, clean_server)
    assert again.returncode == 1, again.stdout
    assert _state(url, "JOBS") == (25, 25)
    first = run(_request(url, "$JS.API.STREAM.MSG.GET.JOBS", {"seq": 1}))["message"]
    assert first["subject"] == "jobs.theirs"  # theirs, kept
