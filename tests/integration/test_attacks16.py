"""Attacks on saved plans, the Action and the many-environment agent (round 16), each
against a real nats-server."""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, run

from reconciler.planning.entries import MANAGED_HEADER
from reconciler.specs.spec import MANAGED_VALUE

pytestmark = pytest.mark.integration

SECRET = "TOPSECRET-hunter2-do-not-print"
BUCKET = "kind: KeyValue\nname: config\n---\n"
ENTRY = "kind: KeyValueEntry\nbucket: config\nkey: db.password\nvalue: {value}\n"


def _outputs(tmp_path: Path, server: NatsServer) -> str:
    """Everything a reviewer (or a pull request's author) sees of a plan: the plan in
    each format, a saved plan's file and the drift report."""
    url = ["--server", server.url]
    runs = [
        reconcile("plan", "specs.yaml", *url, cwd=tmp_path),
        reconcile("plan", "specs.yaml", *url, "--format", "json", cwd=tmp_path),
        reconcile("plan", "specs.yaml", *url, "--format", "markdown", cwd=tmp_path),
        reconcile("plan", "specs.yaml", *url, "--out", "plan.json", cwd=tmp_path),
        reconcile("drift", "specs.yaml", *url, "--format", "json", cwd=tmp_path),
    ]
    assert runs[0].returncode == 0, runs[0].stderr
    shown = "".join(done.stdout + done.stderr for done in runs)
    return shown + (tmp_path / "plan.json").read_text()


def test_a_change_dropping_secret_true_never_shows_the_secret_it_replaces(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A pull request that drops ``secret: true`` and sets another value got the stored
    secret printed as the update's old value: in the plan (its comment), the saved plan
    file (an artifact) and the drift report."""
    (tmp_path / ".git").mkdir()
    spec = tmp_path / "specs.yaml"
    spec.write_text(BUCKET + ENTRY.format(value=SECRET) + "secret: true\n")
    done = reconcile("apply", "specs.yaml", "--server", clean_server.url, "-y", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    spec.write_text(BUCKET + ENTRY.format(value="x"))
    shown = _outputs(tmp_path, clean_server)
    assert "(secret)" in shown
    assert SECRET not in shown


async def _legacy_secret(server: NatsServer) -> None:
    """The secret as a release before the secret header wrote it: the marker only."""
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        await js.create_key_value(bucket="config")
        headers = {MANAGED_HEADER: MANAGED_VALUE}
        await js.publish("$KV.config.db.password", SECRET.encode(), headers=headers)
    finally:
        await nc.close()


def test_a_secret_written_before_its_header_is_marked_then_never_shown(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    run(_legacy_secret(clean_server))  # the bucket too, not declared: only the entry planned
    (tmp_path / ".git").mkdir()
    spec = tmp_path / "specs.yaml"
    spec.write_text(ENTRY.format(value=SECRET) + "secret: true\n")
    url = ["--server", clean_server.url]
    plan = reconcile("plan", "specs.yaml", *url, "--format", "json", cwd=tmp_path)
    (change,) = json.loads(plan.stdout)["changes"]
    assert (change["action"], change["name"], change["fields"]) == ("update", "db.password", [])
    assert reconcile("apply", "specs.yaml", *url, "-y", cwd=tmp_path).returncode == 0
    again = reconcile("plan", "specs.yaml", *url, "--format", "json", cwd=tmp_path)
    assert json.loads(again.stdout)["changes"] == []
    spec.write_text(ENTRY.format(value="x"))
    assert SECRET not in _outputs(tmp_path, clean_server)
