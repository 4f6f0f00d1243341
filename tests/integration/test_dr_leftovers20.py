"""The last review's disaster-recovery leftovers, each on real servers (two JetStream
domains joined by a leafnode, as ``test_dr_failover``'s ``ready``): a rollback beside a
standby's stream that is an old fenced origin. Both sides are counted with a raw client
before and after."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is each test's argument)
from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_dr_attacks import counted, said
from test_dr_failover import _killed_at, is_fenced, ready  # noqa: F401 (ready)
from test_dr_rules import FAILOVER
from test_dr_standby import last_seq
from test_lifecycle import _info, _publish, _request

from reconciler.model.standby import fence_subject

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

Ready = tuple[NatsServer, NatsServer, Path]


def test_a_rollback_gives_the_origin_its_subjects_back_beside_a_fenced_old_origin(
    ready: Ready,
) -> None:
    """Hole: a failover killed (-9) after its fence, west's stream then an old origin
    fenced (no mirror, listening only on its fence subject, as an earlier failover or
    failback leaves one): it was taken for a promoted standby and ``--rollback`` refused
    as "already promoted: a rollback would lose the writes it took", east left fenced and
    neither side taking writes. A fenced stream takes none: the rollback gives east its
    subjects back, no message lost on either side; a failover onto it stays refused."""
    east, west, root = ready
    _killed_at(root, "fenced", west)
    assert is_fenced(east)
    config = {k: v for k, v in _info(west.url, "ORDERS")["config"].items() if k != "mirror"}
    body = {**config, "subjects": [fence_subject("ORDERS")]}
    assert "error" not in run(_request(west.url, "$JS.API.STREAM.UPDATE.ORDERS", body))
    east_before, west_before = counted(east), counted(west)
    assert east_before[0] == 50 and west_before[0] == 50

    back = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert back.returncode == 0, said(back)
    assert "give the origin its subjects back" in back.stdout, said(back)
    assert not is_fenced(east)
    assert counted(east) == east_before and counted(west) == west_before  # none lost
    run(_publish(east.url, "orders.new", 3))  # east acknowledges writes again
    assert last_seq(east) == 53 and len(counted(east)[1]) == len(east_before[1]) + 3
    assert counted(west) == west_before  # the old origin took none of them

    again = reconcile(*FAILOVER, cwd=root)
    assert again.returncode == 1 and "is fenced: it is an old origin" in again.stderr, said(again)
    assert not is_fenced(east) and last_seq(east) == 53
