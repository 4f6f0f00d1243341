"""Attacks on this round's leftovers of the front doors: the Action's plan file written
through a symlink a pull request holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from servers import NatsServer
from test_saved_plans import action_step, repo, state

pytestmark = pytest.mark.integration


def test_the_action_never_writes_the_plan_file_through_a_symlinked_folder_of_the_workspace(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A pull request can hold a symlink: ``plans -> ../outside``. The Action's
    ``plan-file: plans/plan.json`` wrote the plan through it, over a file outside the
    workspace (the runner's ``~/.bashrc``, say). Now it is refused and nothing outside
    is written or changed."""
    root = repo(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "plan.json"
    victim.write_text("the runner's own file\n")
    (root / "plans").symlink_to(outside, target_is_directory=True)
    code, log, outputs = action_step(
        root, clean_server, mode="plan", **{"plan-file": "plans/plan.json"}
    )
    assert code == 1 and "symlink" in log, log
    assert victim.read_text() == "the runner's own file\n"
    assert sorted(os.listdir(outside)) == ["plan.json"]
    assert "plan-file" not in outputs
    assert state(clean_server) == {}


def test_a_plan_file_that_is_itself_a_symlink_is_replaced_never_followed(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``plan.json -> /somewhere/else``: the plan is written in the link's place (the
    link replaced), and the file it named is untouched."""
    root = repo(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (root / "plan.json").symlink_to(victim)
    code, log, outputs = action_step(root, clean_server, mode="plan", **{"plan-file": "plan.json"})
    assert code == 0, log
    assert victim.read_text() == "keep me\n"
    written = root / "plan.json"
    assert not written.is_symlink() and written.is_file()
    assert outputs["plan-file"] == str(written)
    assert '"kind"' in written.read_text() or written.read_text().startswith("{")
