"""The restore's last line counts every stream (issue 39: "(1 stream(s) verified)" after
restoring 2 read as a failure of both)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.backup.manifest import Contents, StreamRecord
from reconciler.backup.restore import RestorePlan, RestoreResult, RestoreStep
from reconciler.cli.backup_cmd import _outcome
from reconciler.errors import ReconcileError
from reconciler.model.state import ServerInfo


def _result(restored: tuple[str, ...], problems: tuple[str, ...]) -> RestoreResult:
    records = [StreamRecord(n, {"name": n}, {}) for n in ("A", "B", "C")]
    steps = (
        RestoreStep(records[0], "restore", 1),
        RestoreStep(records[1], "restore", 1),
        RestoreStep(records[2], "restored", 1),
    )
    plan = RestorePlan(Contents(Path("."), tuple(records), None), steps, ServerInfo("2.15.1", 5))
    return RestoreResult(plan, restored, problems, attempted=("A", "B"))


def test_a_partly_verified_restore_counts_every_stream(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ReconcileError) as raised:
        _outcome(_result(("A",), ("B: consumer c is missing",)))
    headline = str(raised.value).splitlines()[0]
    assert "2 stream(s) restored, 1 of them verified; 1 already restored" in headline


def test_a_whole_restore_counts_every_stream(capsys: pytest.CaptureFixture[str]) -> None:
    assert _outcome(_result(("A", "B"), ())) == 0
    out = capsys.readouterr().out
    assert "2 stream(s) restored and verified; 1 already restored" in out
