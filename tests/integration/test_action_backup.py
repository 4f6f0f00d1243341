"""The Action's ``mode: backup``: the folder for ``actions/upload-artifact``, restorable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from backup_fixtures import SPECS, everything, fill
from cli_runner import reconcile
from servers import run


def _outputs(text: str) -> dict[str, str]:
    """A GITHUB_OUTPUT file (``name<<DELIMITER`` blocks) read back as the runner does."""
    values: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i]:
            name, _, delimiter = lines[i].partition("<<")
            end = lines.index(delimiter, i + 1)
            values[name] = "\n".join(lines[i + 1 : end])
            i = end
        i += 1
    return values


def _step(root: Path, server_url: str, **inputs: str) -> tuple[int, dict[str, str], str, str]:
    temp = root / "runner-temp"
    temp.mkdir(exist_ok=True)
    output, summary = temp / "output", temp / "summary.md"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(root),
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(root),
        "GITHUB_OUTPUT": str(output),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_EVENT_NAME": "schedule",
        "RUNNER_TEMP": str(temp),
        "INPUT_PATH": "specs",
        "INPUT_SERVER": server_url,
        "INPUT_MODE": "backup",
    } | {f"INPUT_{k.upper()}": v for k, v in inputs.items()}
    done = subprocess.run(
        [sys.executable, "-m", "action"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    outputs = _outputs(output.read_text()) if output.exists() else {}
    body = summary.read_text() if summary.exists() else ""
    return done.returncode, outputs, body, done.stdout + done.stderr


def test_backup_mode_writes_a_folder_that_restores(server_factory: Any, tmp_path: Path) -> None:
    source, target = server_factory(), server_factory()
    root = tmp_path / "ws"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "all.yaml").write_text(SPECS)
    assert reconcile("apply", "specs", "--server", source.url, "--yes", cwd=root).returncode == 0
    run(fill(source))

    code, outputs, summary, log = _step(root, source.url, backup_dir="nightly")
    assert code == 0, log
    out = root / "nightly"
    assert outputs.get("backup-dir") == str(out), outputs
    assert "4 stream(s)" in outputs["summary"]  # the memory stream FAST through a mirror
    assert "| ORDERS | 120 |" in summary and "| FAST | 20 |" in summary
    assert "backed up ORDERS: " in log and "backed up FAST: " in log  # the job log says too
    assert (out / "manifest.json").is_file()
    assert json.loads((out / "manifest.json").read_text())["streams"]

    done = reconcile("restore", "nightly", "--server", target.url, "--yes", cwd=root)
    assert done.returncode == 0, done.stderr
    streams = ["ORDERS", "LOGS", "KV_settings"]
    assert run(everything(target, streams)) == run(everything(source, streams))


def test_backup_mode_with_a_bad_spec_is_an_annotation_and_writes_nothing(
    server_factory: Any, tmp_path: Path
) -> None:
    source = server_factory()
    root = tmp_path / "ws"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "bad.yaml").write_text("kind: Stream\nname: BAD\nmax_age: soon\n")
    code, _, _, log = _step(root, source.url)
    assert code == 1
    assert "::error file=" in log
    assert not (root / "jetstream-backup").exists()


def test_backup_mode_never_writes_through_a_symlinked_folder_of_the_workspace(
    server_factory: Any, tmp_path: Path
) -> None:
    """A pull request can hold ``nightly -> ../outside``: ``backup-dir: nightly/run``
    wrote every message of the account outside the workspace, where the runner's other
    files are. Now the input is refused and nothing is written there."""
    source = server_factory()
    root = tmp_path / "ws"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "all.yaml").write_text(SPECS)
    assert reconcile("apply", "specs", "--server", source.url, "--yes", cwd=root).returncode == 0
    run(fill(source))
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "nightly").symlink_to(outside, target_is_directory=True)

    code, outputs, _, log = _step(root, source.url, backup_dir="nightly/run")
    assert code == 1, log
    assert "symlink" in log and "backup-dir" in log, log
    assert list(outside.iterdir()) == []
    assert "backup-dir" not in outputs
