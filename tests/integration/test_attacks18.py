"""The GitHub Action and the fleet's inputs, attacked as an attacker and a careless user
would, against real nats-server processes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nats
import pytest
from servers import run
from test_action import GitHubStandIn, Workspace, github  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage


def test_a_forged_reply_no_check_foresaw_fails_the_action_step_in_one_inert_line(
    server_factory: Any,
    tmp_path: Path,
    github: GitHubStandIn,  # noqa: F811 (a fixture)
) -> None:
    """On an account without JetStream any client may answer ``$JS.API.>``: mallory
    answers the server facts' request with an API level that is text, the runner's
    ``##[error]`` command in it. No check foresaw that shape. The CLI says such an error
    by its type and place; the Action printed Python's traceback, whose last line
    quoted the reply, so the runner read mallory's annotation in the job log. The step
    now fails (exit 1) with one annotation of its own saying the type and place."""
    server = server_factory(jetstream=False)
    workspace = Workspace(tmp_path / "ws", github)
    forged = {"api": {"level": "##[error]pwned by mallory"}, "limits": {}}

    async def scenario() -> list[Any]:
        mallory = await nats.connect(server.url, name="mallory")

        async def forge(msg: Any) -> None:
            await msg.respond(json.dumps(forged).encode())

        await mallory.subscribe("$JS.API.>", cb=forge)
        try:
            return [
                await asyncio.to_thread(workspace.step, server, mode=mode)
                for mode in ("plan", "drift")
            ]
        finally:
            await mallory.close()

    for done in run(scenario()):
        log = done.stdout + done.stderr
        assert done.code == 1, log
        assert "Traceback" not in log
        assert "##[" not in log and "pwned" not in log, log
        assert "::error title=jetstream-gitops::unexpected ValueError at " in done.stdout, log


def test_credentials_the_server_input_cannot_hold_are_named_where_a_workflow_gives_them(
    tmp_path: Path,
    github: GitHubStandIn,  # noqa: F811 (a fixture)
) -> None:
    """A careless user's ``server`` input whose password holds a '/': refused before
    any server is asked, as the CLI refuses it, but the Action said "give them apart
    from the URL with --user/--password (or --token)", flags no workflow can pass (the
    agent and Pulumi name their own fields since attack 12). It names a project
    environment's fields now; the password is masked and never shown."""
    workspace = Workspace(tmp_path / "ws", github)
    careless = SimpleNamespace(url="nats://alice:pa/ss@127.0.0.1:1")  # the input as typed
    done = workspace.step(careless, mode="plan")

    assert done.code == 1, done.stdout + done.stderr
    words = "a project environment's user:/password: (or token:)"
    assert f"give them apart from the URL with {words}" in done.stdout, done.stdout
    assert "::add-mask::pa/ss" in done.stdout
    shown = done.stdout.replace("::add-mask::pa/ss", "") + done.stderr
    assert "pa/ss" not in shown and " --" not in shown, shown
