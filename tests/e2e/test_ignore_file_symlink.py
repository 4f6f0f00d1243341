"""A ``.reconcileignore`` (or the project file) is a file of the repository like a spec:
one that is a symlink pointing out of it (a pull request can add one) is never read. It
was, and its first line came back in the "bad rule" error (``'NATS_PASSWORD=...'``), so
a PR could print a runner's file (``/proc/self/environ``, a creds file) into its own
comment and log."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cli_runner import reconcile

SECRET = "NATS_PASSWORD=hunter2-never-printed"


def _repository(tmp_path: Path, *, where: str) -> Path:
    outside = tmp_path / "outside.txt"
    outside.write_text(SECRET + "\n", encoding="utf-8")
    repo = tmp_path / "repo"
    (repo / "specs").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "specs" / "a.yaml").write_text("kind: Stream\nname: A\nsubjects: [a.>]\n", "utf-8")
    (repo / where / ".reconcileignore").symlink_to(outside)
    return repo


def test_a_symlinked_ignore_file_in_a_spec_folder_is_refused_unread(tmp_path: Path) -> None:
    repo = _repository(tmp_path, where="specs")
    done = reconcile("validate", "specs", cwd=repo)
    assert done.returncode == 1
    assert "specs/.reconcileignore" in done.stderr and "out of the repository" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr


def test_a_symlinked_ignore_file_next_to_the_project_file_is_refused_unread(
    tmp_path: Path,
) -> None:
    repo = _repository(tmp_path, where=".")
    project = "owner: shop\nspecs: [specs]\nenvironments:\n  dev: {embedded: true}\n"
    (repo / "reconcile.yaml").write_text(project, encoding="utf-8")
    done = reconcile("validate", cwd=repo)
    assert done.returncode == 1
    assert ".reconcileignore" in done.stderr and "out of the repository" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr


def test_a_project_file_that_is_a_symlink_out_of_the_repository_is_refused_unread(
    tmp_path: Path,
) -> None:
    """The same for the project file: its bad line was quoted under the error."""
    outside = tmp_path / "outside.yaml"
    outside.write_text(f"x: 1\n{SECRET}: [unclosed\n", encoding="utf-8")
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "reconcile.yaml").symlink_to(outside)
    done = reconcile("validate", cwd=repo)
    assert done.returncode == 1
    assert "reconcile.yaml" in done.stderr and "out of the repository" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr
