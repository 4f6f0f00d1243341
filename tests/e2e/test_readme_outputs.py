"""Every example output in the README is what a real run prints: each block marked
``<!-- real run: ... -->`` is compared with that run against a real server (the server's
version, address and step times aside, and the order in which concurrent steps end)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from servers import NatsServer
from terminal import QUESTION, Terminal

REPO = Path(__file__).resolve().parents[2]
SHOP = "examples/shop"
#: ``\x1b[...`` sequences; an erase-line is where a progress bar was redrawn.
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def block(name: str) -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(
        rf"<!-- real run: {re.escape(name)} -->\n```text\n(.*?)^```", text, re.M | re.S
    )
    assert found is not None, f"README.md has no block '{name}'"
    return found.group(1).splitlines()


def same(line: str) -> str:
    """A line with what differs between runs made alike: version, address, step times."""
    line = re.sub(r"nats-server \d+\.\d+\.\d+( \(API level \d+\))?", "nats-server V", line)
    line = re.sub(r"nats://127\.0\.0\.1:\d+", "nats://127.0.0.1:PORT", line)
    return re.sub(r"\(\d+\.\d+ s\)", "(T s)", line)


def steps_alike(lines: list[str]) -> list[str]:
    """Concurrent steps end in any order: their numbers stay in order, their lines sorted."""
    numbered = [re.sub(r"^\[\d+/(\d+)\] ", r"[k/\1] ", same(line)) for line in lines]
    return sorted(numbered)


def reconcile(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO, env=env,
    )  # fmt: skip


def test_the_plan_block_is_a_real_plan_without_a_terminal(clean_server: NatsServer) -> None:
    done = reconcile("plan", SHOP, "--server", clean_server.url)
    assert done.returncode == 0, done.stderr
    assert [same(line) for line in done.stdout.rstrip("\n").splitlines()] == [
        same(line) for line in block("plan, no terminal, stdout")
    ]


def test_the_ci_apply_block_is_a_real_apply_without_a_terminal(clean_server: NatsServer) -> None:
    done = reconcile("apply", SHOP, "--server", clean_server.url, "--yes")
    assert done.returncode == 0, done.stderr
    shown = block("apply --yes, no terminal, stderr")
    lines = done.stderr.splitlines()
    assert [same(line) for line in lines[:1]] == [same(line) for line in shown[:1]]
    assert steps_alike(lines[1:]) == steps_alike(shown[1:])
    assert [line.split("]")[0] for line in lines[1:]] == [f"[{i}/4" for i in range(1, 5)]


def test_the_terminal_apply_block_is_what_a_terminal_shows(clean_server: NatsServer) -> None:
    term = Terminal("apply", SHOP, "--server", clean_server.url)
    assert term.read_until(QUESTION), term.text
    assert term.answer(b"yes\r") == 0, term.text
    screen = CSI.sub("", term.text.split(QUESTION.decode(), 1)[1].replace("\x1b[2K", "\n"))
    lines = [line.strip() for line in screen.replace("\r", "\n").splitlines()]
    lines = [line for line in lines if line and not line.startswith("applying")]
    shown = block("apply, terminal, after the question")
    assert shown[0].startswith("Do you want to apply these changes? " + QUESTION.decode())
    assert lines[0] == ": yes"
    assert steps_alike(lines[1:-1]) == steps_alike(shown[1:-1])
    assert lines[-1] == shown[-1]


def test_the_readme_stays_under_400_lines() -> None:
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) < 400
