"""A careless new user's walk through the README and the docs, on real servers.

Each test is one thing that went wrong on that walk: the command run as a user runs it
(a subprocess), the server counted with a raw client before and after."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import reconcile

pytestmark = pytest.mark.integration

PASSWORD = "n0t-in-any-output"


def _said(done: object) -> str:
    return str(getattr(done, "stdout", "")) + str(getattr(done, "stderr", ""))


def test_the_ambiguous_unit_said_is_the_first_in_the_file(tmp_path: Path) -> None:
    """docs/spec-format.md: "the first such value in each file is a warning at its
    FILE:LINE". A `1GB` above a `1M` was counted, and the `1M` below it said."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "o.yaml").write_text(
        "kind: Stream\nname: O\nsubjects: [o.>]\nmax_bytes: 1GB\nmax_age: 1M\n"
    )
    done = reconcile("validate", "specs", cwd=tmp_path)
    assert done.returncode == 0, _said(done)
    warnings = [line for line in _said(done).splitlines() if ": warning: " in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("specs/o.yaml:4: warning: max_bytes: ")
    assert "(and 1 more in this file)" in warnings[0]
