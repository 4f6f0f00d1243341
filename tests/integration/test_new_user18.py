"""A new user's walk through the README and the docs, on real servers.

Each test is one thing that went wrong on that walk: the command run as a user runs it
(a subprocess), the server counted with a raw client before and after."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from cli_runner import reconcile, started
from servers import NatsServer
from test_saved_plans import publish, repo, state

pytestmark = pytest.mark.integration


def test_a_refused_replace_names_the_migration_that_keeps_the_messages(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A stream moved from file to memory storage: the plan's note said `apply --migrate`
    keeps its messages, but the refusal apply ends with (in CI the only line that stands
    out) advised --allow-replace alone, which deletes all of them. It names the migration
    too, and following it keeps every message."""
    root = repo(tmp_path, "storage: file")
    done = reconcile("apply", "specs", "--server", clean_server.url, "--yes", cwd=root)
    assert done.returncode == 0, done.stderr
    publish(clean_server, "ORDERS.new", 10)
    spec = root / "specs" / "orders.yaml"
    spec.write_text(spec.read_text().replace("storage: file", "storage: memory"))
    before = state(clean_server)

    refused = reconcile("apply", "specs", "--server", clean_server.url, "--yes", cwd=root)
    assert refused.returncode == 1, refused.stderr
    error = refused.stderr[refused.stderr.index("error: ") :]
    assert "--allow-replace" in error and "apply --migrate" in error, error
    assert state(clean_server) == before

    kept = reconcile("apply", "specs", "--migrate", "--server", clean_server.url, "--yes", cwd=root)
    assert kept.returncode == 0, kept.stderr
    after = state(clean_server)
    assert after["ORDERS"]["config"]["storage"] == "memory"
    assert after["ORDERS"]["messages"] == 10


def test_an_environments_embedded_server_is_kept_by_the_command_the_notice_names(
    tmp_path: Path,
) -> None:
    """docs/environments.md: an `embedded: true` environment has its own embedded server,
    state in .reconcile/dev/. Its memory stream went when the command stopped it, and the
    notice advised `reconcile server`, which keeps .reconcile/ running, another server:
    the next plan wanted the stream again. The notice names the store, and the command
    it names keeps the stream between commands."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "hot.yaml").write_text(
        "kind: Stream\nname: HOT\nsubjects: [hot.>]\nstorage: memory\n"
    )
    (tmp_path / "reconcile.yaml").write_text(
        "owner: shop\nspecs: [specs]\nenvironments:\n  dev:\n    embedded: true\n"
    )
    done = reconcile("apply", "--env", "dev", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (notice,) = [line for line in done.stderr.splitlines() if "memory stream(s) HOT" in line]
    advised = notice.split("`")[1]
    assert advised == "reconcile server --store .reconcile/dev", notice

    server = started(*shlex.split(advised)[1:], "--port", "0", cwd=tmp_path)
    try:
        assert server.stdout is not None
        assert "state in .reconcile/dev/" in server.stdout.readline()
        done = reconcile("apply", "--env", "dev", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "memory stream(s)" not in done.stderr
        again = reconcile("plan", "--env", "dev", "--detailed-exitcode", cwd=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
    finally:
        server.terminate()
        server.communicate(timeout=90)


def test_the_backups_first_notice_names_the_flag_bounding_its_snapshots(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Every backup began with "snapshots hold each stream's configuration and message
    expiry while they run; at most 4 at once": what holds what, and how to change the 4,
    was for docs/backup.md to say. The line says the server holds them as they were, and
    names --parallel."""
    root = repo(tmp_path)
    done = reconcile("apply", "specs", "--server", clean_server.url, "--yes", cwd=root)
    assert done.returncode == 0, done.stderr
    publish(clean_server, "ORDERS.new", 3)
    backup = reconcile(
        "backup",
        "specs",
        "--out",
        "../bk",
        "--parallel",
        "2",
        "--server",
        clean_server.url,
        cwd=root,
    )
    assert backup.returncode == 0, backup.stderr
    (notice,) = [line for line in backup.stderr.splitlines() if "at once" in line]
    assert "at most 2 snapshots at once (--parallel)" in notice, notice
    assert "the server" in notice, notice
    assert (tmp_path / "bk" / "manifest.json").is_file()
