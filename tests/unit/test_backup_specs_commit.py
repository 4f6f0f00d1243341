"""A backup's manifest names the commit of the specs it was taken for, by the one rule
saved plans use (``specs.fingerprint.git_commit``): the same answer as ``git rev-parse
HEAD``, None outside a work tree."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from reconciler.backup.take import specs_commit

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_commit_of_the_specs_folder_and_of_a_spec_file(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "specs").mkdir(parents=True)
    (repo / "specs" / "orders.yaml").write_text("kind: Stream\nname: ORDERS\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "specs")
    head = _git(repo, "rev-parse", "HEAD")

    assert specs_commit([repo / "specs"]) == head
    assert specs_commit([repo / "specs" / "orders.yaml"]) == head


def test_outside_a_work_tree_there_is_no_commit(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    assert specs_commit([tmp_path / "specs"]) is None
    assert specs_commit([]) is None
