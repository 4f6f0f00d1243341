"""A demanding new user's walk through the README and the docs, on real servers.

Each test is one thing that went wrong on that walk: the command run as a user runs it
(a subprocess), the server counted with a raw client before and after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer
from test_saved_plans import publish, repo, state

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("command", ["plan", "drift"])
def test_an_out_that_cannot_be_written_is_named_as_given_and_why(
    clean_server: NatsServer, tmp_path: Path, command: str
) -> None:
    """docs/drift.md: "a path that cannot be written (a folder, a device, a path under a
    file) is one line naming it and why". ``--out /dev/stdout`` was named by where the
    link leads (``cannot write /dev/pts/3``, or ``/dev/null``: a path the user never
    typed), and a path under a file said only ``File exists``."""
    root = repo(tmp_path)
    done = reconcile("apply", "specs", "--server", clean_server.url, "--yes", cwd=root)
    assert done.returncode == 0, done.stderr
    publish(clean_server, "ORDERS.new", 3)
    before = state(clean_server)
    device = tmp_path / "to-null"
    device.symlink_to("/dev/null")
    (tmp_path / "report").write_text("a file, not a folder\n")

    said = reconcile(
        command, "specs", "--server", clean_server.url, "--out", "../to-null", cwd=root
    )
    assert said.returncode == 1, said.stderr
    assert "cannot write ../to-null: not a regular file" in said.stderr, said.stderr
    assert "/dev/null" not in said.stderr and "Traceback" not in said.stderr

    said = reconcile(
        command, "specs", "--server", clean_server.url, "--out", "../report/x", cwd=root
    )
    assert said.returncode == 1, said.stderr
    assert f"cannot write ../report/x: {tmp_path / 'report'} is a file" in said.stderr, said.stderr
    assert "Traceback" not in said.stderr

    assert device.is_symlink()
    assert (tmp_path / "report").read_text() == "a file, not a folder\n"
    assert state(clean_server) == before
    assert before["ORDERS"]["messages"] == 3


def test_an_apply_step_record_names_a_consumers_stream_and_null_for_a_stream(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """docs/output.md showed a Stream's step record with ``"stream": "ORDERS"``; the
    record says what the plan's ``changes`` say: a consumer's stream, null for a stream."""
    root = repo(tmp_path)
    done = reconcile(
        "apply", "specs", "--server", clean_server.url, "--yes", "--format", "json", cwd=root
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    steps = {(r["kind"], r["name"]): r["stream"] for r in records if r["type"] == "step"}
    changes = records[0]["plan"]["changes"]
    assert steps == {(c["kind"], c["name"]): c["stream"] for c in changes}
    assert steps[("Stream", "ORDERS")] is None
    assert {s for (kind, _), s in steps.items() if kind == "Consumer"} == {"ORDERS"}
    publish(clean_server, "ORDERS.new", 2)
    assert state(clean_server)["ORDERS"]["messages"] == 2
