"""A restore into an environment of a failover pair, attacked as a careless operator
would (the DR attack pass on today's restore rule): two real JetStream domains joined by
a leafnode, both sides counted with a raw client before and after. Each test names the
hole it closes."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is each test's argument)
from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_dr_attacks import counted, said
from test_dr_failover import is_fenced, ready  # noqa: F401 (ready: a fixture)
from test_dr_rules import FAILOVER
from test_dr_standby import last_seq, wait_for
from test_lifecycle import _info, _publish

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

Ready = tuple[NatsServer, NatsServer, Path]

FLAGS = ("--replace-existing", "--allow-replace", "--allow-data-loss", "--yes")


def test_last_nights_backup_restored_into_the_fenced_origin_never_gives_it_its_subjects_back(
    ready: Ready, tmp_path: Path
) -> None:
    """Hole: after a failover east is fenced and west takes the writes. East's backup
    from before, restored into east with ``--server`` (no spec read) and every flag, or
    with ``--env east`` once no spec declares ORDERS any more, replaced the fenced stream
    by the backup's config: east listened on orders.> again, and both sides took writes.
    The live config alone says a stream is fenced: the restore's replace of it is now
    prevented by the failover rules whatever the specs say (``planning.standby.guarded``,
    one rule), nothing is changed on either side."""
    east, west, root = ready
    out = tmp_path / "backup"
    taken = reconcile("backup", "--env", "east", "--out", str(out), cwd=root)
    assert taken.returncode == 0, said(taken)
    run(_publish(east.url, "orders.new", 5))  # the backup is behind east now
    wait_for(lambda: last_seq(west) == 55)
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    run(_publish(west.url, "orders.new", 3))  # west, promoted, takes the writes
    east_before, west_before = counted(east), counted(west)
    assert is_fenced(east) and west_before[0] == 58

    by_url = reconcile("restore", str(out), "--server", east.url, *FLAGS, cwd=tmp_path)
    assert by_url.returncode == 1, said(by_url)
    assert "ORDERS" in by_url.stderr and "Traceback" not in said(by_url)
    (root / "specs" / "orders.yaml").write_text("", encoding="utf-8")  # no spec of it now
    by_env = reconcile("restore", str(out), "--env", "east", *FLAGS, cwd=root)
    assert by_env.returncode == 1, said(by_env)
    assert "ORDERS" in by_env.stderr

    assert is_fenced(east) and counted(east) == east_before
    run(_publish(east.url, "orders.new", 2))  # through east's clients: stored on west only
    assert counted(east) == east_before
    wait_for(lambda: counted(west)[0] == west_before[0] + 2)
    assert _info(west.url, "ORDERS")["config"].get("mirror") is None


def test_a_fenced_origin_holding_the_backups_messages_is_said_fenced_never_already_restored(
    ready: Ready, tmp_path: Path
) -> None:
    """Leftover of the last attack pass: a backup of east restored into east after a
    failover that wrote nothing since said "already restored" of the fenced ORDERS (the
    messages match; the config does not: its subjects are moved aside). It is now said
    fenced by a failover and left as it is, in the plan and the last line; nothing
    changes on either side."""
    east, west, root = ready
    out = backed_up_then_failed_over(root, tmp_path)
    east_before, west_before = counted(east), counted(west)
    assert is_fenced(east)

    result = reconcile("restore", str(out), "--env", "east", "--yes", cwd=root)
    assert result.returncode == 0, said(result)
    assert "already restored" not in result.stdout.replace("0 already restored", ""), said(result)
    assert "fenced by a failover" in result.stdout, said(result)
    assert is_fenced(east) and counted(east) == east_before and counted(west) == west_before


def backed_up_then_failed_over(root: Path, tmp_path: Path) -> Path:
    """East's backup taken, then a planned failover from east to west: the backup."""
    out = tmp_path / "backup"
    taken = reconcile("backup", "--env", "east", "--out", str(out), cwd=root)
    assert taken.returncode == 0, said(taken)
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    return out
