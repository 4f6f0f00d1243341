"""``reconcile failover`` attacked once more (attack18c): a standby another client made
or changed by hand, on two real JetStream domains joined by a leafnode. Both sides are
counted with a raw client before and after; each test names the hole it closes."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is each test's argument)
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, joined_domains, run
from test_dr_attacks import counted, said
from test_dr_failover import is_fenced, ready  # noqa: F401 (ready: a fixture)
from test_dr_rules import FAILOVER
from test_dr_standby import applied, dr_project, standby_stream
from test_lifecycle import _info, _publish, _request

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

Ready = tuple[NatsServer, NatsServer, Path]


def test_a_plain_stream_on_other_subjects_is_never_taken_for_the_promoted_standby(
    ready: Ready,
) -> None:
    """Hole: west's mirror replaced by someone with a plain ORDERS on ``legacy.>`` (3
    messages of theirs). It was read as a promoted standby: DIVERGED, so the failover
    fenced east, saying "west takes the writes", though no stream took ``orders.>`` any
    more; and the rollback was then refused (the standby "already promoted"), east left
    fenced. A standby that is no mirror must listen on the declared subjects."""
    east, west, root = ready
    assert "error" not in run(_request(west.url, "$JS.API.STREAM.DELETE.ORDERS"))
    plain = {"name": "ORDERS", "subjects": ["legacy.>"], "storage": "file"}
    assert "error" not in run(_request(west.url, "$JS.API.STREAM.CREATE.ORDERS", plain))
    run(_publish(west.url, "legacy.x", 3))
    before = counted(east), counted(west)

    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 1, said(result)
    assert "legacy.>" in result.stderr and "nothing was changed" in result.stderr
    assert not is_fenced(east)
    assert (counted(east), counted(west)) == before
    run(_publish(east.url, "orders.new", 1))  # east still takes the writes
    assert counted(east)[0] == 51
    assert _info(west.url, "ORDERS")["config"]["subjects"] == ["legacy.>"]


def test_a_mirror_someone_gave_interest_retention_is_never_promoted_with_it(
    ready: Ready,
) -> None:
    """Hole: west's mirror given ``retention: interest`` by someone, with a consumer of
    theirs on it so that it kept all 50 messages (a full copy, as the checks read it).
    The promotion kept the mirror's live retention: once that consumer was deleted,
    the promoted stream dropped messages 1..20 (no interest: ``shipper`` starts at 21),
    and it drops every message ``shipper`` acknowledges, where the spec keeps them 7
    days. Retention ``interest`` the spec does not declare keeps less, as a tighter
    limit does: refused, nothing changed."""
    east, west, root = ready
    theirs = {"durable_name": "theirs", "ack_policy": "explicit"}
    body = {"stream_name": "ORDERS", "config": theirs, "action": "create"}
    assert "error" not in run(_request(west.url, "$JS.API.CONSUMER.CREATE.ORDERS.theirs", body))
    config = {**_info(west.url, "ORDERS")["config"], "retention": "interest"}
    assert "error" not in run(_request(west.url, "$JS.API.STREAM.UPDATE.ORDERS", config))
    before = counted(east), counted(west)
    assert before[1][0] == 50 and len(before[1][1]) == 50

    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 1, said(result)
    assert "retention interest" in result.stderr and "nothing was changed" in result.stderr
    assert not is_fenced(east) and (counted(east), counted(west)) == before
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"


def test_the_failover_complete_line_escapes_a_stream_name_a_runner_reads_as_a_command(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: "Failover complete: 1 pair(s) (no write taken: ##[error]X 0.01s)." was
    printed as it was, the only line of the failover not escaped: a GitHub runner reads
    ``##[error]`` anywhere in a line of the job's log (docs/dr.md's workflow runs the
    CLI) as a workflow command. A stream may be named so (visible characters only)."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west, standby_stream(name='"##[error]X"'))
    applied(root, "east")
    applied(root, "west")
    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 0, said(result)
    assert "Failover complete" in result.stdout
    assert "##[" not in said(result)
