"""Disaster recovery's leftovers (noticed by the DR attack pass, left open): a restore
into the standby environment, a rollback with the standby unreachable, the verify's
probe, a consumer made again on the origin during the failover. Real nats-server
processes (two JetStream domains joined by a leafnode); both sides counted with a raw
client before and after. Each test names the hole it closes."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is each test's argument)
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, joined_domains, run
from test_dr_attacks import counted, said
from test_dr_failover import _killed_at, is_fenced, ready  # noqa: F401 (ready: a fixture)
from test_dr_rules import FAILOVER
from test_dr_standby import applied, consumers, dr_project, last_seq, wait_for
from test_lifecycle import _info, _publish
from test_restore_rules import _user_streams

pytestmark = pytest.mark.integration

Ready = tuple[NatsServer, NatsServer, Path]


def test_the_primarys_backup_is_never_restored_as_a_plain_stream_in_the_standby_environment(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: east's backup restored with ``--env west``, the environment the spec makes
    ORDERS's standby mirror: a plain ORDERS on orders.> was made there, taking writes
    beside east's, and west's plan then called it "not a mirror" with apply refused. The
    restore's plan is now judged by apply's standby rule (``planning.standby.guarded``):
    refused before anything is written, naming the spec's ``standby:`` line; so is a
    ``--replace-existing`` over west's mirror. The remedy it names (the mirror, made by
    apply) fills from east."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 30))
    out = tmp_path / "backup"
    taken = reconcile("backup", "--env", "east", "--out", str(out), cwd=root)
    assert taken.returncode == 0, said(taken)
    east_before = counted(east)

    result = reconcile("restore", str(out), "--env", "west", "--yes", cwd=root)
    assert result.returncode == 1, said(result)
    assert "orders.yaml:" in result.stderr and "--env east" in result.stderr, said(result)
    assert run(_user_streams(west)) == []  # nothing restored in west
    assert counted(east) == east_before

    applied(root, "west")  # the remedy: the mirror copies east's messages
    wait_for(lambda: last_seq(west) == 30)
    flags = ("--replace-existing", "--allow-replace", "--allow-data-loss", "--yes")
    over = reconcile("restore", str(out), "--env", "west", *flags, cwd=root)
    assert over.returncode == 1, said(over)
    assert "orders.yaml:" in over.stderr, said(over)
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    assert counted(west) == counted(east) == east_before
    assert consumers(west) == [] and not is_fenced(east)


def test_a_rollback_with_the_standby_unreachable_names_it_and_never_unfences_the_origin(
    ready: Ready,
) -> None:
    """Hole: a failover killed after the fence, then ``--rollback`` with west's server
    down said only "cannot connect to nats://...": neither which side nor what to do.
    Giving east its subjects back without reading west is not safe (west may have been
    promoted: both would take writes; the failover's own record is in west too), so the
    rollback still refuses, now naming west, why, the command to run once west is back
    and the manual step if west is lost for good; east stays fenced, both sides
    counted alike. With west back, the same rollback gives east its writes back."""
    east, west, root = ready
    _killed_at(root, "fenced", west)  # neither side takes writes now
    west.stop()
    east_before = counted(east)

    rolled = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert rolled.returncode == 1, said(rolled)
    assert "Traceback" not in said(rolled)
    assert "west" in rolled.stderr and "--rollback" in rolled.stderr, said(rolled)
    assert "nats stream edit ORDERS" in rolled.stderr and "orders.>" in rolled.stderr
    assert is_fenced(east) and counted(east) == east_before

    west.start()
    again = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert again.returncode == 0, said(again)
    assert not is_fenced(east)
    run(_publish(east.url, "orders.new", 2))  # east acknowledges writes again
    assert counted(east)[0] == 52
    wait_for(lambda: counted(west) == counted(east))  # west mirrors them: still a mirror
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
