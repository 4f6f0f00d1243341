"""What landed with the stages (issues 39/40) attacked on real servers: the lock stage,
the checks as values on the plan, and the backup's temporary stream; messages counted
with a raw client before and after."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, run, write
from test_backup_attacks import _archive_of_ticks
from test_lifecycle import _messages, _publish, _request
from test_pulumi_attacks import _keep_lock, _release
from test_restore_holes import _apply

from reconciler.errors import ApplyFailed
from reconciler.execution import stages
from reconciler.jetstream import ConnectionOptions, open_client

pytestmark = pytest.mark.integration

ARCHIVE = "RECONCILE_BACKUP_TICKS"
ALLOWED = stages.Allowances(allow_replace=True)  # --prune --allow-replace


def test_an_archive_keeping_messages_deleted_inside_its_origin_is_never_deleted(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """TICKS (memory) holds 1..12 and someone deleted 3..7 from it; a file mirror of it
    under the backup's temporary name is someone's archive and still holds all 12. Its
    first and last sequences lie inside TICKS's, so a backup took it for a killed
    backup's leftover and deleted it: 5 messages gone for good. Now refused, naming it;
    the archive keeps its 12, TICKS its 7."""
    url = clean_server.url
    _archive_of_ticks(url, keep=None)
    for seq in range(3, 8):
        done = run(_request(url, "$JS.API.STREAM.MSG.DELETE.TICKS", {"seq": seq}))
        assert done.get("success"), done
    assert (_messages(url, "TICKS"), _messages(url, ARCHIVE)) == (7, 12)
    _backup_refused_naming_the_archive(url, tmp_path)
    assert (_messages(url, "TICKS"), _messages(url, ARCHIVE)) == (7, 12)


def _backup_refused_naming_the_archive(url: str, tmp_path: Path) -> None:
    """A backup of TICKS refuses to make its temporary mirror where the archive is,
    naming it, without a traceback."""
    out = tmp_path / "backup"
    done = reconcile(
        "backup", "--all", "--stream", "TICKS", "--out", str(out), "--server", url, cwd=tmp_path
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert ARCHIVE in done.stderr and "Traceback" not in done.stderr


def test_an_archive_of_an_earlier_stream_of_the_same_name_is_never_deleted(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A file mirror of TICKS under the temporary name archived its 12 messages; TICKS
    was then deleted and made again, and holds 12 new messages at the same sequences.
    The archive's sequences lie inside the new TICKS's, but none of its messages is
    there: it is never taken for a killed backup's leftover; both keep their 12."""
    url = clean_server.url
    _archive_of_ticks(url, keep=None)
    gone = run(_request(url, "$JS.API.STREAM.DELETE.TICKS"))
    assert gone.get("success"), gone
    ticks = {"name": "TICKS", "subjects": ["ticks.>"], "storage": "memory"}
    assert "error" not in run(_request(url, "$JS.API.STREAM.CREATE.TICKS", ticks))
    run(_publish(url, "ticks.again", 12))
    assert (_messages(url, "TICKS"), _messages(url, ARCHIVE)) == (12, 12)
    _backup_refused_naming_the_archive(url, tmp_path)
    assert (_messages(url, "TICKS"), _messages(url, ARCHIVE)) == (12, 12)


@pytest.mark.parametrize("written", ["nan", "inf"])
def test_a_lock_timeout_that_is_no_time_is_refused_not_a_wait_nobody_can_end(
    clean_server: NatsServer, tmp_path: Path, written: str
) -> None:
    """Another run holds the apply lock; ``apply --lock-timeout nan`` waited for it for
    ever (its deadline never came), as Pulumi's ``jetstream:lockTimeout`` already
    refuses. Now refused at once (an error naming the option); nothing is created."""
    url = clean_server.url
    specs = write(tmp_path, "kind: Stream\nname: NEWS\nsubjects: [news.>]\n")
    lease = run(_keep_lock(clean_server))
    try:
        done = reconcile(
            "apply", str(specs), "--server", url, "--yes", "--lock-timeout", written, cwd=tmp_path
        )
    finally:
        run(_release(clean_server, lease))
    assert done.returncode == 1, done.stdout + done.stderr  # an error, at once
    assert "Traceback" not in done.stderr
    assert "NEWS" not in (run(_request(url, "$JS.API.STREAM.NAMES")).get("streams") or [])


def test_a_stream_planned_empty_that_gained_messages_is_never_deleted(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``--prune`` plans to delete GONE, empty, so the delete needs no allowance. Three
    messages are published to it before the plan runs (a saved plan, a question answered
    late): the executor deleted it with them. Now the delete is refused, naming it, and
    GONE keeps its 3; KEEP is untouched."""
    url = clean_server.url
    both = "kind: Stream\nname: KEEP\nsubjects: [keep.>]\n---\n"
    _apply(clean_server, tmp_path, both + "kind: Stream\nname: GONE\nsubjects: [gone.>]\n")
    specs = tmp_path / "specs"
    (specs / "streams.yaml").write_text(both)
    request = replace(stages.PlanRequest.of([specs], ConnectionOptions(servers=url)), prune=True)

    async def planned_then_published() -> tuple[Any, list[str]]:
        async with open_client(request.options) as client:
            live = await stages.read(client)
            plan = await stages.plan(client, stages.load(request), live, request, locked=True)
            deletes = [step.label for step in plan.changes]
            await _publish(url, "gone.new", 3)
            with pytest.raises(ApplyFailed) as failed:
                await stages.execute(plan, client, allowances=ALLOWED)
            return failed.value, deletes

    failed, deletes = run(planned_then_published())
    assert deletes == ["Stream GONE"]
    assert "GONE" in str(failed)
    assert (_messages(url, "GONE"), _messages(url, "KEEP")) == (3, 0)
