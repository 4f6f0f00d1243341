"""``reconcile snapshot --out`` writes a file whole, and never replaces what is not a file.

The snapshot was written to a temporary file renamed over ``--out``: given a link to a
device (``--out /dev/stdout``, run as root), the rename replaced the link itself with a
regular file. A device, pipe or folder is now refused, and a link to a file is written
through, the link kept (the rule of ``reconciler.cli.output.write_whole``, shared with
``plan --out``). The tests name links in their own folder, never /dev itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import reconcile
from servers import NatsServer, run
from test_lifecycle import _request


def test_a_link_to_a_device_is_refused_and_kept(clean_server: NatsServer, tmp_path: Path) -> None:
    device = tmp_path / "to-null"
    device.symlink_to("/dev/null")

    done = reconcile(
        "snapshot", "--env", "dev", "--server", clean_server.url, "--out", str(device), cwd=tmp_path
    )

    assert done.returncode == 1
    assert "not a regular file" in done.stderr
    assert "Traceback" not in done.stderr
    assert device.is_symlink()


def test_a_link_to_a_file_is_written_through(clean_server: NatsServer, tmp_path: Path) -> None:
    (tmp_path / "snaps").mkdir()
    target = tmp_path / "snaps" / "dev.jsonl"
    link = tmp_path / "latest.jsonl"
    link.symlink_to(target)

    done = reconcile(
        "snapshot", "--env", "dev", "--server", clean_server.url, "--out", str(link), cwd=tmp_path
    )

    assert done.returncode == 0, done.stderr
    assert link.is_symlink()
    lines = target.read_text().splitlines()
    assert all(json.loads(line)["env"] == "dev" for line in lines)


def test_the_tools_own_lock_bucket_is_no_record(clean_server: NatsServer, tmp_path: Path) -> None:
    """After an apply (which makes ``KV_RECONCILE_LOCKS`` for its lock) the snapshot holds
    the applied stream and not the lock's bucket, which it listed among the environment's
    streams; the notice counts what was written."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "orders.yaml").write_text(
        "kind: Stream\nname: ORDERS\nsubjects: [orders.>]\n"
    )
    server = ("--server", clean_server.url)
    applied = reconcile("apply", "specs", "--yes", *server, cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr

    done = reconcile("snapshot", "--env", "dev", *server, "--out", "dev.jsonl", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "dev.jsonl").read_text().splitlines()
    assert [json.loads(line)["name"] for line in lines] == ["ORDERS"]
    assert "1 streams, 0 consumers (1 records)" in done.stderr


def test_a_stream_named_like_a_backup_mirror_left_out_is_named(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A stream someone made under a backup mirror's name (``RECONCILE_BACKUP_NOTES``,
    3 messages: or a crashed backup's mirror left behind) is the tool's own by its name,
    so the snapshot leaves it out; it did so without a word, the fleet's drift report
    then never showing it. Now the snapshot names it, as ``backup --all`` does."""
    url = clean_server.url
    body = {"name": "RECONCILE_BACKUP_NOTES", "subjects": ["notes.>"]}
    assert "error" not in run(_request(url, "$JS.API.STREAM.CREATE.RECONCILE_BACKUP_NOTES", body))

    done = reconcile(
        "snapshot", "--env", "dev", "--server", url, "--out", "dev.jsonl", cwd=tmp_path
    )

    assert done.returncode == 0, done.stderr
    assert (tmp_path / "dev.jsonl").read_text() == ""
    assert "RECONCILE_BACKUP_NOTES" in done.stderr
