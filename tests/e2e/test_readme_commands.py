"""The README's two set-up commands, as a new user copies them.

The first applies the example on the embedded server: it runs here verbatim, in a fresh
virtual environment made beside a copy of the repository's tracked files. The second is
the whole test suite: `.ci/run` runs it verbatim (through `.ci/readme-command`), so CI
fails whenever the README's own test command would fail for a user; the tests below
keep `.ci/run` doing exactly that.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    """The lines of the README's first fenced ``bash`` block."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^```bash\n(.*?)^```$", text, flags=re.M | re.S)
    assert block is not None, "README.md has no ```bash block"
    return block.group(1).splitlines()


def test_the_readme_starts_with_exactly_two_set_up_commands() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    title, blank, fence = text.splitlines()[:3]
    assert (title.startswith("# "), blank, fence) == (True, "", "```bash")
    first, second = readme_commands()
    assert first.startswith("pip install -e . && reconcile apply ")
    assert second.startswith("pip install -e '.[test]' && pytest")


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    printed = subprocess.run(
        [str(REPO / ".ci" / "readme-command"), "2"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed == readme_commands()[1] + "\n"
    script = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "test_command=$(.ci/readme-command 2)" in script
    assert 'bash -c "$test_command"' in script
    # No second way of running the suite that could pass where the README's would not: the
    # one other pytest run is the slow stage, after the README's command has passed.
    runs = [
        line.strip()
        for line in script.splitlines()
        if re.search(r"\bpytest\b", line) and not line.lstrip().startswith(("#", "echo", "if"))
    ]
    assert runs == ["python -m pytest -m slow"]
    assert script.index('bash -c "$test_command"') < script.index(runs[0])
    assert '[ "$rc" = 0 ] || exit "$rc"' in script.split(runs[0])[0]


def test_readme_command_refuses_a_block_that_is_not_two_commands(tmp_path: Path) -> None:
    (tmp_path / ".ci").mkdir()
    shutil.copy(REPO / ".ci" / "readme-command", tmp_path / ".ci" / "readme-command")
    (tmp_path / "README.md").write_text("# x\n\n```bash\npip install -e .\n```\n")
    done = subprocess.run(
        [str(tmp_path / ".ci" / "readme-command"), "2"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "exactly two commands, not 1" in done.stderr


def _tracked_copy(target: Path) -> Path:
    """The repository's tracked files, as ``git clone`` would give them."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            destination = target / os.fsdecode(name)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    return target


@pytest.mark.e2e
@pytest.mark.slow
def test_the_readme_first_command_applies_the_example_then_finds_nothing_to_change(
    tmp_path: Path,
) -> None:
    checkout = _tracked_copy(tmp_path / "checkout")
    # A fresh environment, as a new user has: pip fetches what the project needs from the
    # package index (or pip's own cache of it).
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("NATS_", "RECONCILE_", "VIRTUAL_ENV", "PYTHON"))
    }
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    command = readme_commands()[0]

    first = subprocess.run(
        ["bash", "-c", command],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    installed = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", "import reconciler; print(reconciler.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(installed.strip()).is_relative_to(checkout)  # the copy, not the repository
    assert "using embedded nats-server" in first.stdout + first.stderr
    assert "create Stream ORDERS" in first.stdout

    again = subprocess.run(
        ["bash", "-c", command],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "No changes" in again.stdout or "nothing to change" in again.stdout.lower()
    assert "create " not in again.stdout
    assert (checkout / ".reconcile").is_dir()
