"""Run the ``reconcile`` CLI as a user would: a subprocess, no NATS_/RECONCILE_ variables
of the test run leaking in, no colours."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def reconcile(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``env``: variables set for this run only (on top of the cleaned environment)."""
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        cwd=cwd,
        env=cleaned_environ(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def started(*args: str, cwd: Path, text: bool = True) -> subprocess.Popen[Any]:
    """``reconcile ARGS`` started in the environment :func:`reconcile` gives it, its
    standard output and error piped (``text``: decoded)."""
    return subprocess.Popen(
        [sys.executable, "-m", "reconciler", *args],
        cwd=cwd,
        env=cleaned_environ(None),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=text,
    )


def cleaned_environ(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test run's environment without its NATS_ and RECONCILE_ variables, no
    colours, and ``env`` on top."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}
    return environ | {"NO_COLOR": "1"} | dict(env or {})


def interrupted_at_the_lock(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``reconcile ARGS`` started as :func:`reconcile` runs it, sent Ctrl-C (SIGINT) as
    soon as it says it waits for the apply lock (its stderr read line by line, at most
    40), and waited for (a hang guard: the test's lock timeout is long): its exit status
    and its standard error, every line of it."""
    process = started(*args, cwd=cwd)
    assert process.stderr is not None
    said: list[str] = []
    with ThreadPoolExecutor(1) as reader:
        for _ in range(40):
            said.append(reader.submit(process.stderr.readline).result(timeout=60))
            if "for the apply lock" in said[-1] or not said[-1]:
                break
    assert "for the apply lock" in said[-1], said
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, "", "".join(said) + err)
