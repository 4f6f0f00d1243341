"""The last review's disaster-recovery leftovers, each on real servers (two JetStream
domains joined by a leafnode, as ``test_dr_failover``'s ``ready``): a rollback beside a
standby's stream that is an old fenced origin; a re-run after a failed verify verifies
again. Both sides are counted with a raw client before and after."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is each test's argument)
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, joined_domains, run
from test_dr_attacks import counted, said, updated
from test_dr_failover import _killed_at, is_fenced, ready, recorded_phase  # noqa: F401 (ready)
from test_dr_leftovers import _east_to_west
from test_dr_leftovers19 import TWO_SUBJECTS, _SubjectDroppedAtTheConsumers
from test_dr_rules import FAILOVER
from test_dr_standby import applied, dr_project, last_seq, wait_for
from test_lifecycle import _info, _publish, _request

from reconciler.execution.failover import fail_over
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


def test_a_rerun_after_a_failed_verify_verifies_again_before_it_says_complete(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: a failover whose verify failed (west's promoted ORDERS given only orders.>
    by someone after the consumers' creation), the stream then fixed by hand: the
    re-run found the pair done (promoted, consumer present, east fenced), said "Nothing
    to do" and never verified. Now a re-run verifies again (it reads, and its probes
    store nothing): with the fault still there it fails naming returns.*; fixed, it
    verifies, records the pair done and says the failover is complete."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west, TWO_SUBJECTS)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 5))
    run(_publish(east.url, "returns.new", 5))
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 10)
    first = run(fail_over(_east_to_west(root), _SubjectDroppedAtTheConsumers(west)))
    assert first.done == () and "returns._reconcile_probe" in first.problems[0], first
    assert recorded_phase(west) == "consumers" and is_fenced(east)

    still = reconcile(*FAILOVER, cwd=root)
    assert still.returncode == 1 and "returns.*" in still.stderr, said(still)
    assert recorded_phase(west) == "consumers"

    updated(west, {"subjects": ["orders.>", "returns.*"]})  # fixed by hand
    west_before = counted(west)
    again = reconcile(*FAILOVER, cwd=root)
    assert again.returncode == 0, said(again)
    assert "verify again" in again.stdout and "Failover complete: 1 pair(s)" in again.stdout
    assert recorded_phase(west) == "done"  # written once the verify passed
    assert counted(west) == west_before  # the probes stored nothing
    run(_publish(west.url, "returns.new", 1))  # west takes the subject the verify probed
    assert last_seq(west) == 11 and is_fenced(east)
