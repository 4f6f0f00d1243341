"""docs/dr.md walked end to end as a legitimate user would (the other side of the DR
attack pass: false refusals and regressions). Real nats-server processes, two JetStream
domains joined by a leafnode; each step that must succeed succeeds, both sides counted
with a raw client, and each environment's plan is empty afterwards."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is each test's argument)
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_dr_attacks import said, updated
from test_dr_failover import _killed_at, fetch, is_fenced, ready  # noqa: F401 (ready)
from test_dr_leftovers import east_backed_up
from test_dr_rules import FAILOVER
from test_dr_standby import (
    AUDIT,
    SHIPPER,
    applied,
    consumers,
    last_seq,
    mirrored,
    standby_stream,
    wait_for,
)
from test_lifecycle import _action, _info, _publish, _request
from test_restore_rules import _user_streams

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Ready = tuple[NatsServer, NatsServer, Path]
HEAL = ("--mode", "heal", "--once", "--listen", "off")

#: ORDERS declaring what a mirror cannot carry, a second pair beside it and a stream
#: without a standby on other subjects.
RICH = "---\n".join(
    [
        standby_stream(
            "allow_atomic: true",
            "allow_msg_schedules: true",
            "allow_msg_ttl: true",
            "subject_delete_marker_ttl: 5m",
            'republish: {src: "orders.>", dest: "copied.orders.>"}',
        ),
        SHIPPER,
        standby_stream(name="PAYMENTS", subjects="payments.>"),
        AUDIT,
    ]
)


def empty_plans(root: Path) -> None:
    """Both environments plan no change, and the agent's heal finds nothing to do."""
    for env in ("east", "west"):
        plan = reconcile("plan", "--env", env, "--detailed-exitcode", cwd=root)
        assert plan.returncode == 0, f"{env}: {said(plan)}"
        healed = reconcile(
            "watch", "--env", env, "--mode", "heal", "--once", "--listen", "off", cwd=root
        )
        assert healed.returncode == 0, f"{env}: {said(healed)}"


def swap_roles(root: Path, primary: str, standby: str) -> None:
    specs = root / "specs" / "orders.yaml"
    text = specs.read_text(encoding="utf-8")
    text = text.replace("primary: east", "primary: @P").replace("primary: west", "primary: @P")
    text = text.replace("environment: west", "environment: @S").replace(
        "environment: east", "environment: @S"
    )
    specs.write_text(text.replace("@P", primary).replace("@S", standby), encoding="utf-8")


def swapped_and_applied(root: Path, primary: str, standby: str) -> None:
    """The roles swapped in the specs (:func:`swap_roles`) and the new standby's
    environment applied (its stream made the mirror again), which must succeed."""
    swap_roles(root, primary, standby)
    done = reconcile("apply", "--env", standby, "--yes", "--allow-replace", cwd=root)
    assert done.returncode == 0, said(done)


def test_the_documented_flow_with_two_pairs_and_what_a_mirror_cannot_carry(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    east, west, root = mirrored(server_factory, tmp_path, 20, RICH)
    run(_publish(east.url, "payments.new", 4))
    run(_publish(east.url, "audit.new", 3))
    wait_for(lambda: last_seq(west, "PAYMENTS") == 4)
    assert sorted(run(_user_streams(west))) == ["AUDIT", "ORDERS", "PAYMENTS"]
    assert consumers(west) == []
    empty_plans(root)

    done = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    assert done.returncode == 0, said(done)
    promoted = _info(west.url, "ORDERS")["config"]
    assert promoted.get("mirror") is None and promoted["subjects"] == ["orders.>"]
    assert promoted["allow_atomic"] and promoted["allow_msg_schedules"]
    assert promoted["subject_delete_marker_ttl"] == 300_000_000_000
    assert promoted["republish"]["dest"] == "copied.orders.>"
    assert _info(west.url, "PAYMENTS")["config"]["subjects"] == ["payments.>"]
    assert is_fenced(east)
    run(_publish(west.url, "orders.new", 5))
    assert last_seq(west) == 25 and last_seq(east) == 20

    swapped_and_applied(root, "west", "east")
    wait_for(lambda: last_seq(east) == 25)
    wait_for(lambda: last_seq(east, "PAYMENTS") == 4)
    mirror = _info(east.url, "ORDERS")["config"]
    assert mirror["mirror"]["name"] == "ORDERS" and not mirror.get("republish")
    empty_plans(root)

    again = reconcile("failover", "--from", "west", "--to", "east", "--yes", cwd=root)
    assert again.returncode == 0, said(again)
    swapped_and_applied(root, "east", "west")
    run(_publish(east.url, "orders.new", 2))
    wait_for(lambda: last_seq(west) == 27)
    assert _info(east.url, "ORDERS")["config"]["republish"]["dest"] == "copied.orders.>"
    empty_plans(root)


def test_an_unplanned_failover_then_the_rerun_and_a_failback(ready: Ready) -> None:
    east, west, root = ready
    east.kill()
    done = reconcile("failover", "--from", "east", "--to", "west", "--unplanned", "--yes", cwd=root)
    assert done.returncode == 0, said(done)
    run(_publish(west.url, "orders.new", 3))
    assert last_seq(west) == 53
    healed = reconcile(
        "watch", "--env", "west", "--mode", "heal", "--once", "--listen", "off", cwd=root
    )
    assert healed.returncode == 2, said(healed)  # the spec still says east: a person's step
    assert last_seq(west) == 53 and _info(west.url, "ORDERS")["config"].get("mirror") is None

    east.start()
    wait_for(lambda: bool(west.monitor("leafz").get("leafnodes")))
    again = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    assert again.returncode == 0, said(again)
    assert is_fenced(east) and last_seq(east) == 50
    swapped_and_applied(root, "west", "east")
    wait_for(lambda: last_seq(east) == 53)
    empty_plans(root)


def test_a_rollback_of_a_stopped_failover_gives_east_its_writes_back(ready: Ready) -> None:
    east, west, root = ready
    _killed_at(root, "fenced", west)
    assert is_fenced(east)
    rolled = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert rolled.returncode == 0, said(rolled)
    assert not is_fenced(east)
    # said as what it was (it said "Failover complete"): found by newuser17
    assert "Rollback complete: 1 pair(s)" in rolled.stdout and "Failover" not in rolled.stdout
    run(_publish(east.url, "orders.new", 4))
    wait_for(lambda: last_seq(west) == 54)
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    empty_plans(root)


def test_east_restored_from_its_backup_before_any_failover(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    east, west, root, out = east_backed_up(server_factory, tmp_path)
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 30)
    run(_request(east.url, "$JS.API.STREAM.DELETE.ORDERS", {}))  # east's ORDERS lost
    restored = reconcile("restore", str(out), "--env", "east", "--yes", cwd=root)
    assert restored.returncode == 0, said(restored)
    assert last_seq(east) == 30 and consumers(east) == ["shipper"]
    run(_publish(east.url, "orders.new", 2))
    wait_for(lambda: last_seq(west) == 32)
    empty_plans(root)


def _observed(root: Path, env: str) -> None:
    project = root / "reconcile.yaml"
    text = project.read_text(encoding="utf-8")
    marker = f"    domain: {env}\n"
    project.write_text(
        text.replace(marker, marker + "    lifecycle: {mode: observe}\n"), encoding="utf-8"
    )


def _streams(server: NatsServer) -> list[str]:
    reply = run(_request(server.url, "$JS.API.STREAM.NAMES", {}))
    return sorted(reply.get("streams") or [])


@pytest.mark.parametrize("env", ["east", "west"])
def test_an_observed_environment_of_a_pair_through_every_door(
    server_factory: Callable[..., NatsServer], tmp_path: Path, env: str
) -> None:
    """Either side of a pair in lifecycle ``mode: observe`` (read and reported, never
    written): plan and drift empty, apply, a backup of its file stream, the agent's heal,
    the Action's plan and apply and ``failover --check`` succeed; a restore and a
    failover naming it are refused. None writes its server, not even the apply lock's
    bucket. Holes: a restore there was refused only once the apply lock was held, after
    its bucket and lease were written (``backup.restore`` now refuses before the lock,
    ``restore_plan.refuse_observed``); ``plan --out`` wrote the bucket and the account's
    lineage to bind the saved plan to (``saved_plans.saved_identity`` now only reads it
    there: without one, nothing is saved)."""
    east, west, root = mirrored(server_factory, tmp_path, 10)
    server = {"east": east, "west": west}[env]
    run(_request(server.url, "$JS.API.STREAM.DELETE.KV_RECONCILE_LOCKS", {}))
    assert _streams(server) == ["ORDERS"]
    out = tmp_path / "backup"
    other = "west" if env == "east" else "east"
    taken = reconcile("backup", "--env", other, "--out", str(out), cwd=root)
    assert taken.returncode == 0, said(taken)
    _observed(root, env)
    before = last_seq(east), last_seq(west)

    planned = reconcile("plan", "--env", env, "--detailed-exitcode", cwd=root)
    assert planned.returncode == 0, said(planned)
    assert _streams(server) == ["ORDERS"]
    drift = reconcile("drift", "--env", env, cwd=root)
    assert drift.returncode == 0, said(drift)
    assert _streams(server) == ["ORDERS"]
    applied_ = reconcile("apply", "--env", env, "--yes", cwd=root)
    assert applied_.returncode == 0, said(applied_)
    assert _streams(server) == ["ORDERS"]
    saved = tmp_path / "saved.json"
    made = reconcile("plan", "--env", env, "--out", str(saved), cwd=root)
    assert made.returncode == 1 and "observe" in made.stderr, said(made)  # no lineage
    assert _streams(server) == ["ORDERS"] and not saved.exists()
    mine = reconcile("backup", "--env", env, "--out", str(tmp_path / "mine"), cwd=root)
    assert mine.returncode == 0, said(mine)
    assert _streams(server) == ["ORDERS"]
    healed = reconcile("watch", "--env", env, *HEAL, cwd=root)
    assert healed.returncode == 0, said(healed)
    assert _streams(server) == ["ORDERS"]
    for mode in ("plan", "apply"):
        code, text = _action("", root, root / "specs", mode, environment=env, path="")
        assert code == 0, f"{mode}: {text}"
        assert _streams(server) == ["ORDERS"]
    plan_file = str(tmp_path / "action-plan.json")
    code, text = _action(
        "", root, root / "specs", "plan", environment=env, path="", **{"plan-file": plan_file}
    )
    assert code != 0 and "observe" in text and "Traceback" not in text, text
    assert _streams(server) == ["ORDERS"]
    check = reconcile("failover", "--from", "east", "--to", "west", "--check", cwd=root)
    assert check.returncode == 0, said(check)
    assert _streams(server) == ["ORDERS"]

    restored = reconcile("restore", str(out), "--env", env, "--yes", "--replace-existing", cwd=root)
    assert restored.returncode == 1 and "observe" in restored.stderr, said(restored)
    assert _streams(server) == ["ORDERS"]
    failover = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    assert failover.returncode == 1 and "observe" in said(failover), said(failover)
    assert _streams(server) == ["ORDERS"]  # not even the lock's bucket
    assert (last_seq(east), last_seq(west)) == before and not is_fenced(east)
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"


def test_the_standbys_own_backup_restores_its_mirror_before_any_failover(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """West's mirror lost (its disk, say), west's own backup of it restored with
    ``--env west``: the declared mirror, made again, and it catches up with east."""
    east, west, root = mirrored(server_factory, tmp_path, 20, RICH)
    out = tmp_path / "west-backup"
    taken = reconcile("backup", "--env", "west", "--out", str(out), cwd=root)
    assert taken.returncode == 0, said(taken)
    for name in ("ORDERS", "PAYMENTS", "AUDIT"):
        run(_request(west.url, f"$JS.API.STREAM.DELETE.{name}", {}))
    restored = reconcile("restore", str(out), "--env", "west", "--yes", cwd=root)
    assert restored.returncode == 0, said(restored)
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    run(_publish(east.url, "orders.new", 3))
    wait_for(lambda: last_seq(west) == 23)
    assert consumers(west) == []
    empty_plans(root)


def test_east_loses_everything_and_its_whole_backup_comes_back(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    east, west, root = mirrored(server_factory, tmp_path, 20, RICH)
    run(_publish(east.url, "payments.new", 4))
    run(_publish(east.url, "audit.new", 3))
    out = tmp_path / "east-backup"
    taken = reconcile("backup", "--env", "east", "--out", str(out), cwd=root)
    assert taken.returncode == 0, said(taken)
    for name in ("ORDERS", "PAYMENTS", "AUDIT"):
        run(_request(east.url, f"$JS.API.STREAM.DELETE.{name}", {}))
    restored = reconcile("restore", str(out), "--env", "east", "--yes", cwd=root)
    assert restored.returncode == 0, said(restored)
    assert (last_seq(east), last_seq(east, "PAYMENTS"), last_seq(east, "AUDIT")) == (20, 4, 3)
    assert _info(east.url, "ORDERS")["config"]["republish"]["dest"] == "copied.orders.>"
    run(_publish(east.url, "orders.new", 2))
    wait_for(lambda: last_seq(west) == 22)
    empty_plans(root)


CROSSWISE = "---\n".join(
    [
        standby_stream(),
        standby_stream(name="INVOICES", subjects="invoices.>", primary="west", environment="east"),
    ]
)


def test_pairs_crosswise_fail_over_one_way_each(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """ORDERS written in east, INVOICES in west, each mirrored on the other side: a
    failover from east to west moves ORDERS only, and back from west to east, INVOICES."""
    east, west, root = mirrored(server_factory, tmp_path, 10, CROSSWISE)
    applied(root, "east")  # INVOICES's mirror, once west's INVOICES exists
    run(_publish(west.url, "invoices.new", 6))
    wait_for(lambda: last_seq(east, "INVOICES") == 6)
    empty_plans(root)
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    assert is_fenced(east)
    assert _info(east.url, "INVOICES")["config"]["mirror"]["name"] == "INVOICES"
    assert _info(west.url, "INVOICES")["config"]["subjects"] == ["invoices.>"]
    other = reconcile("failover", "--from", "west", "--to", "east", "--yes", cwd=root)
    assert other.returncode == 0, said(other)
    assert _info(east.url, "INVOICES")["config"]["subjects"] == ["invoices.>"]


def test_an_unplanned_failover_from_an_observed_primary_writes_only_the_standby(
    ready: Ready,
) -> None:
    """The job holds only read rights on east (``mode: observe``) and east is lost: an
    unplanned failover writes nothing there, so it is not refused for east's lifecycle
    (docs/dr.md: only the standby's lifecycle counts)."""
    east, west, root = ready
    _observed(root, "east")
    east.kill()
    done = reconcile(*FAILOVER, "--unplanned", cwd=root)
    assert done.returncode == 0, said(done)
    assert _info(west.url, "ORDERS")["config"].get("mirror") is None
    assert fetch(west, "shipper", 1, ack=False) == [1]


REPUBLISHING = standby_stream('republish: {src: "orders.>", dest: "copied.orders.>"}')


def test_a_mirror_applied_by_the_previous_release_with_a_republish_is_updated_in_place(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The previous release gave the standby's mirror its origin's ``republish``: the
    next apply of west drops it by an update (no replace, no flag), the mirror keeps
    its messages, and the failover then promotes it with the declared one."""
    _east, west, root = mirrored(server_factory, tmp_path, 12, REPUBLISHING)
    updated(west, {"republish": {"src": "orders.>", "dest": "copied.orders.>"}})
    again = reconcile("apply", "--env", "west", "--yes", cwd=root)
    assert again.returncode == 0, said(again)
    assert not _info(west.url, "ORDERS")["config"].get("republish")
    assert last_seq(west) == 12
    empty_plans(root)
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    assert _info(west.url, "ORDERS")["config"]["republish"]["dest"] == "copied.orders.>"


def test_east_purged_by_mistake_is_replaced_by_its_backup_before_any_failover(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """East's ORDERS purged by mistake (nothing failed over): its backup restored over
    it with ``--replace-existing --allow-replace`` (a replace in the primary reads the
    standby first: west's is a mirror, so it is allowed), the consumer with it."""
    east, west, root, out = east_backed_up(server_factory, tmp_path)
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 30)
    run(_request(east.url, "$JS.API.STREAM.PURGE.ORDERS", {}))
    restored = reconcile(
        "restore",
        str(out),
        "--env",
        "east",
        "--yes",
        "--replace-existing",
        "--allow-replace",
        cwd=root,
    )
    assert restored.returncode == 0, said(restored)
    assert last_seq(east) == 30 and consumers(east) == ["shipper"]
    assert _info(east.url, "ORDERS")["state"]["messages"] == 30
    run(_publish(east.url, "orders.new", 2))
    wait_for(lambda: last_seq(west) == 32)
    empty_plans(root)


@pytest.mark.parametrize("env", ["east", "west"])
def test_the_agents_heal_of_a_drifted_observed_environment_writes_nothing(
    server_factory: Callable[..., NatsServer], tmp_path: Path, env: str
) -> None:
    """Someone changed ORDERS in an observed environment: drift says so, the agent's
    heal reports it and writes nothing there, not even the apply lock's bucket."""
    east, west, root = mirrored(server_factory, tmp_path, 10)
    server = {"east": east, "west": west}[env]
    run(_request(server.url, "$JS.API.STREAM.DELETE.KV_RECONCILE_LOCKS", {}))
    _observed(root, env)
    updated(server, {"max_msgs": 1000})
    drift = reconcile("drift", "--env", env, cwd=root)
    assert drift.returncode == 2, said(drift)
    healed = reconcile("watch", "--env", env, *HEAL, cwd=root)
    assert healed.returncode in (0, 2), said(healed)
    assert _streams(server) == ["ORDERS"]
    assert _info(server.url, "ORDERS")["config"]["max_msgs"] == 1000


TRANSFORMING = standby_stream('subject_transform: {src: "orders.>", dest: "stored.orders.>"}')


def test_a_promoted_stream_keeps_its_declared_subject_transform(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: the promotion gave back what the mirror does not carry, but not the
    origin's ``subject_transform`` (a mirror cannot have one): west's promoted ORDERS
    stored each write under its published subject (orders.new, where east stored
    stored.orders.new), so a consumer filtering on the declared subjects missed every
    write after the failover, and the failback's ``plan --env west`` was not empty. The
    promotion now gives it back (``model.standby._GIVEN_BACK``)."""
    east, west, root = mirrored(server_factory, tmp_path, 6, TRANSFORMING)
    empty_plans(root)
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    run(_publish(west.url, "orders.new", 1))
    body = {"last_by_subj": "stored.orders.new"}
    last = run(_request(west.url, "$JS.API.STREAM.MSG.GET.ORDERS", body))
    assert last.get("message", {}).get("seq") == 7, last
    swap_roles(root, "west", "east")
    plan = reconcile("plan", "--env", "west", "--detailed-exitcode", cwd=root)
    assert plan.returncode == 0, said(plan)
    back = reconcile("apply", "--env", "east", "--yes", "--allow-replace", cwd=root)
    assert back.returncode == 0, said(back)
    wait_for(lambda: last_seq(east) == 7)
    empty_plans(root)


def test_a_saved_plan_of_an_observed_environment_reads_its_lineage_and_writes_nothing(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """West, once applied, then observed: ``plan --out`` binds the saved plan to the
    account's lineage already there, and it is applied; neither writes west."""
    _east, west, root = mirrored(server_factory, tmp_path, 5)
    _observed(root, "west")
    before = last_seq(west, "KV_RECONCILE_LOCKS")
    saved = tmp_path / "saved.json"
    made = reconcile("plan", "--env", "west", "--out", str(saved), cwd=root)
    assert made.returncode == 0, said(made)
    done = reconcile("apply", str(saved), "--env", "west", "--yes", cwd=root)
    assert done.returncode == 0, said(done)
    plan_file = {"plan-file": str(tmp_path / "action-plan.json")}
    for mode in ("plan", "apply"):
        code, text = _action(
            "", root, root / "specs", mode, environment="west", path="", **plan_file
        )
        assert code == 0, f"{mode}: {text}"
    assert last_seq(west, "KV_RECONCILE_LOCKS") == before


GUARDED = "---\n".join(
    [
        standby_stream(
            "description: every order",
            "discard: new",
            "max_msgs: 100000",
            "max_msgs_per_subject: 50000",
            "deny_delete: true",
            "deny_purge: true",
            "allow_direct: true",
            "compression: s2",
            "duplicate_window: 1m",
            "metadata: {team: shop}",
        ),
        SHIPPER,
    ]
)


def test_a_stream_denying_deletes_and_discarding_new_goes_round_the_flow(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    east, west, root = mirrored(server_factory, tmp_path, 8, GUARDED)
    empty_plans(root)
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    run(_publish(west.url, "orders.new", 2))
    swapped_and_applied(root, "west", "east")
    wait_for(lambda: last_seq(east) == 10)
    empty_plans(root)
    again = reconcile("failover", "--from", "west", "--to", "east", "--yes", cwd=root)
    assert again.returncode == 0, said(again)
    swapped_and_applied(root, "east", "west")
    wait_for(lambda: last_seq(west) == 10)
    empty_plans(root)


def test_an_unplanned_failover_onto_an_observed_standby_is_refused_and_writes_nothing(
    ready: Ready,
) -> None:
    east, west, root = ready
    run(_request(west.url, "$JS.API.STREAM.DELETE.KV_RECONCILE_LOCKS", {}))
    _observed(root, "west")
    east.kill()
    refused = reconcile(*FAILOVER, "--unplanned", cwd=root)
    assert refused.returncode == 1 and "observe" in said(refused), said(refused)
    assert _streams(west) == ["ORDERS"] and consumers(west) == []
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    rollback = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert rollback.returncode == 1, said(rollback)
    assert _streams(west) == ["ORDERS"]


def test_one_agent_healing_both_environments_of_the_pair(ready: Ready) -> None:
    """``watch --all-envs --mode heal --once``: nothing to do on a healthy pair; after a
    failover (roles not swapped yet) a person's step, nothing written; once failed back,
    nothing to do again."""
    east, west, root = ready
    both = reconcile("watch", "--all-envs", *HEAL, cwd=root)
    assert both.returncode == 0, said(both)
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    waiting = reconcile("watch", "--all-envs", *HEAL, cwd=root)
    assert waiting.returncode == 2, said(waiting)
    assert is_fenced(east) and _info(west.url, "ORDERS")["config"].get("mirror") is None
    swapped_and_applied(root, "west", "east")
    wait_for(lambda: last_seq(east) == 50)
    again = reconcile("watch", "--all-envs", *HEAL, cwd=root)
    assert again.returncode == 0, said(again)


def test_failing_back_after_an_unplanned_failover_fences_the_returned_origin_first(
    ready: Ready,
) -> None:
    """After an unplanned failover east comes back with its subjects (it takes writes
    again). A user who goes straight to the failback (roles swapped, apply east) is
    refused, nothing changed, and the refusal names the way: east the primary again, the
    failover once more (it fences east), then the swap and the failback. Before, the
    refusal asked "promoted by a failover?" and named only the swap back."""
    east, west, root = ready
    east.kill()
    done = reconcile(*FAILOVER, "--unplanned", cwd=root)
    assert done.returncode == 0, said(done)
    east.start()
    wait_for(lambda: bool(west.monitor("leafz").get("leafnodes")))
    swap_roles(root, "west", "east")
    refused = reconcile("apply", "--env", "east", "--yes", "--allow-replace", cwd=root)
    assert refused.returncode == 1, said(refused)
    assert "failover --from east --to west" in refused.stderr, said(refused)
    assert last_seq(east) == 50 and not is_fenced(east)

    swap_roles(root, "east", "west")
    fenced = reconcile(*FAILOVER, cwd=root)
    assert fenced.returncode == 0, said(fenced)
    assert is_fenced(east)
    swapped_and_applied(root, "west", "east")
    run(_publish(west.url, "orders.new", 2))
    wait_for(lambda: last_seq(east) == 52)
    empty_plans(root)
