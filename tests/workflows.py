"""A GitHub workflow file as GitHub reads it, for the tests of examples/workflows/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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
