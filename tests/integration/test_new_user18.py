"""A new user's walk through the README and the docs, on real servers.

Each test is one thing that went wrong on that walk: the command run as a user runs it
(a subprocess), the server counted with a raw client before and after."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import reconcile
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
