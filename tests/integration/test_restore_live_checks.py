"""``reconcile restore`` judged against every stream of the target as apply's plan is
(``planning.live_checks``), on real servers, messages counted by a raw client."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_dr_attacks import said
from test_lifecycle import _info, _messages, _publish, _request
from test_restore_rules import _user_streams

pytestmark = pytest.mark.integration

SPECS = """\
kind: Stream
name: AAA
subjects: [a.>]
---
kind: Stream
name: ORDERS
subjects: [orders.>]
"""


def test_a_restore_whose_subjects_another_stream_holds_restores_nothing(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: the target holds someone's LEGACY on orders.legacy.>, inside the backup's
    ORDERS subjects. The restore planned both streams, restored AAA and only then did
    the server refuse ORDERS (subjects overlap, err 10065): half restored. The plan is
    now judged against every stream of the target as apply's plan is: refused before
    anything is restored, naming ORDERS and LEGACY."""
    source = server_factory()
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "streams.yaml").write_text(SPECS, encoding="utf-8")
    at = ("--server", source.url)
    assert reconcile("apply", str(specs), *at, "--yes", cwd=tmp_path).returncode == 0
    run(_publish(source.url, "orders.new", 12))
    run(_publish(source.url, "a.new", 5))
    out = tmp_path / "backup"
    taken = reconcile("backup", str(specs), "--out", str(out), *at, cwd=tmp_path)
    assert taken.returncode == 0, said(taken)

    target = server_factory()
    legacy = {"name": "LEGACY", "subjects": ["orders.legacy.>"]}
    assert "error" not in run(_request(target.url, "$JS.API.STREAM.CREATE.LEGACY", legacy))
    run(_publish(target.url, "orders.legacy.x", 3))
    result = reconcile("restore", str(out), "--server", target.url, "--yes", cwd=tmp_path)
    assert result.returncode == 1, said(result)
    assert "ORDERS" in result.stderr and "LEGACY" in result.stderr, said(result)
    assert run(_user_streams(target)) == ["LEGACY"]  # nothing restored
    assert _messages(target.url, "LEGACY") == 3
    assert _info(target.url, "LEGACY")["config"]["subjects"] == ["orders.legacy.>"]
