"""A GitHub workflow file as GitHub reads it, for the tests of examples/workflows/."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

#: An action pinned to a full commit (``owner/repo@<40 hex>``).
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def read_workflow(path: Path) -> dict[Any, Any]:
    """The workflow's mapping, with the bare key ``on`` (True to YAML 1.1) as ``"on"``."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    if True in data:
        data["on"] = data.pop(True)
    return data


def assert_zizmor_finds_nothing(path: Path) -> None:
    """zizmor's pedantic audit of the workflow finds nothing (skipped without zizmor)."""
    zizmor = shutil.which("zizmor")
    if zizmor is None:
        pytest.skip("zizmor is not installed (pip install zizmor)")
    args = [zizmor, "--offline", "--persona=pedantic", "--no-progress", str(path)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
