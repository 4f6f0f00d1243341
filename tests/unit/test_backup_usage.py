"""`reconcile backup --out DIR` with nothing to select says every way to select: spec
PATHS, `--all`, or a project file (found by newuser17: the error named PATHS and the
project file only, and a newcomer wanting every stream did not learn of `--all`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from reconciler.cli import cli


def test_a_backup_given_nothing_to_select_names_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no reconcile.yaml here
    done = CliRunner().invoke(cli, ["backup", "--out", "nightly"])
    assert done.exit_code == 2, done.output
    assert "--all" in done.output and "PATHS" in done.output
    assert not (tmp_path / "nightly").exists()
