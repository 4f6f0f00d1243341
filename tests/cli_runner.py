"""Run the ``reconcile`` CLI as a user would: a subprocess, no NATS_/RECONCILE_ variables
of the test run leaking in, no colours."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def reconcile(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``env``: variables set for this run only (on top of the cleaned environment)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        cwd=cwd,
        env=environ | {"NO_COLOR": "1"} | dict(env or {}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
