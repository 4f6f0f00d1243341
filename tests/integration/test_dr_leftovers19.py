"""The last review's disaster-recovery leftovers, each on real servers (two JetStream
domains joined by a leafnode, as ``test_dr_failover``'s ``ready``): a rollback judged
only by what protects a rollback; the verify's probe on every declared subject. Both
sides are counted with a raw client before and after."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is each test's argument)
from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, joined_domains, run
from test_dr_attacks import counted, said, updated
from test_dr_attacks4 import ORDERS_ONLY, rewritten
from test_dr_failover import _killed_at, is_fenced, ready  # noqa: F401 (ready)
from test_dr_leftovers import _east_to_west, east_backed_up
from test_dr_rules import FAILOVER
from test_dr_standby import SHIPPER as SHIPPER_SPEC
from test_dr_standby import applied, dr_project, last_seq, wait_for
from test_lifecycle import _info, _publish, _request
from test_restore_rules import _user_streams

from reconciler.execution.failover import fail_over
from reconciler.execution.requests import Observer

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

Ready = tuple[NatsServer, NatsServer, Path]
#: The declared consumer as someone else makes it (no owner's marker)
SHIPPER = {"durable_name": "shipper", "ack_policy": "explicit"}


def _early_consumer(east: NatsServer, west: NatsServer) -> str:
    """The declared consumer made on west's mirror by someone (at a position of theirs)."""
    body = {"stream_name": "ORDERS", "config": SHIPPER}
    reply = run(_request(west.url, "$JS.API.CONSUMER.CREATE.ORDERS.shipper", body))
    assert "error" not in reply, reply
    return "already on the mirror"


def _lacking_message(east: NatsServer, west: NatsServer) -> str:
    """A message east holds deleted on west's mirror: a promotion would lose it."""
    reply = run(_request(west.url, "$JS.API.STREAM.MSG.DELETE.ORDERS", {"seq": 7}))
    assert reply.get("success"), reply
    return "lacks 1 message(s)"


def _mirror_gone(east: NatsServer, west: NatsServer) -> str:
    """West's mirror deleted: nothing to promote."""
    assert run(_request(west.url, "$JS.API.STREAM.DELETE.ORDERS")).get("success")
    return "no stream ORDERS in west"


def _another_owners_mirror(east: NatsServer, west: NatsServer) -> str:
    """West's mirror marked as another project's: a failover never writes it."""
    metadata = _info(west.url, "ORDERS")["config"].get("metadata") or {}
    updated(west, {"metadata": {**metadata, "io.jetstream-gitops/owner": "someone"}})
    return "managed by owner 'someone'"


def _another_owners_origin_consumer(east: NatsServer, west: NatsServer) -> str:
    """East's consumer made again by someone: its ack floor is no position of ours."""
    assert run(_request(east.url, "$JS.API.CONSUMER.DELETE.ORDERS.shipper")).get("success")
    body = {"stream_name": "ORDERS", "config": SHIPPER}
    assert "error" not in run(_request(east.url, "$JS.API.CONSUMER.CREATE.ORDERS.shipper", body))
    return "not managed by 'shop'"


PROMOTION_ONLY = (
    _early_consumer,
    _lacking_message,
    _mirror_gone,
    _another_owners_mirror,
    _another_owners_origin_consumer,
)


@pytest.mark.parametrize("trip", PROMOTION_ONLY, ids=[t.__name__[1:] for t in PROMOTION_ONLY])
def test_a_rollback_is_judged_only_by_what_protects_a_rollback(
    ready: Ready, trip: Callable[[NatsServer, NatsServer], str]
) -> None:
    """Hole: a failover killed (-9) after its fence, and west's mirror (or east's
    consumer) then changed by someone so that a check guarding only the promotion trips.
    ``--rollback``, which promotes nothing and writes only east's subjects, was refused
    for it, east left fenced: neither side took writes. Now the rollback gives east its
    subjects back and east takes writes again; the failover itself is still refused."""
    east, west, root = ready
    _killed_at(root, "fenced", west)
    assert is_fenced(east)
    why = trip(east, west)
    before = counted(east)
    assert before[0] == 50

    back = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert back.returncode == 0, said(back)
    assert not is_fenced(east)
    assert counted(east) == before  # nothing lost, nothing added
    run(_publish(east.url, "orders.new", 3))  # east acknowledges writes again
    assert last_seq(east) == 53 and len(counted(east)[1]) == len(before[1]) + 3

    again = reconcile(*FAILOVER, cwd=root)
    assert again.returncode == 1 and why in again.stderr, said(again)
    assert not is_fenced(east)


def test_a_rollback_still_refuses_a_standby_that_took_writes(ready: Ready) -> None:
    """What protects a rollback still refuses it: west's mirror promoted by hand (it
    listens on the declared subjects) and written, then a rollback would give east the
    subjects while west takes them too, west's writes dropped: refused, east fenced."""
    east, west, root = ready
    _killed_at(root, "fenced", west)
    config = {k: v for k, v in _info(west.url, "ORDERS")["config"].items() if k != "mirror"}
    reply = run(
        _request(west.url, "$JS.API.STREAM.UPDATE.ORDERS", {**config, "subjects": ["orders.>"]})
    )
    assert "error" not in reply, reply
    run(_publish(west.url, "orders.new", 2))
    west_before = counted(west)

    back = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert back.returncode == 1 and "already promoted" in back.stderr, said(back)
    assert is_fenced(east) and counted(west) == west_before


def test_a_fenced_origin_of_another_owner_is_refused_naming_a_way_that_works(
    ready: Ready,
) -> None:
    """East fenced by a killed failover, then marked as another project's. The rollback
    is refused (it writes east), and its refusal said `reconcile apply --env east
    --take-over takes it over`: that apply refuses every fenced stream's update, whatever
    flags, naming the rollback: a loop. It names the owner's rollback and the manual
    step now; followed, the take-over applies and east takes writes, none lost."""
    east, west, root = ready
    _killed_at(root, "fenced", west)
    metadata = _info(east.url, "ORDERS")["config"].get("metadata") or {}
    updated(east, {"metadata": {**metadata, "io.jetstream-gitops/owner": "someone"}})
    before = counted(east)

    back = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert back.returncode == 1 and "managed by owner 'someone'" in back.stderr, said(back)
    assert "takes it over" not in back.stderr, said(back)
    assert "nats stream edit -f '--subjects=orders.>' -- ORDERS" in back.stderr, said(back)
    assert is_fenced(east) and counted(east) == before

    updated(east, {"subjects": ["orders.>"]})  # the manual step, as a raw client
    taken = reconcile("apply", "--env", "east", "--take-over", "--yes", cwd=root)
    assert taken.returncode == 0, said(taken)
    assert not is_fenced(east) and counted(east) == before


#: ORDERS taking a second subject, returns.*, and its consumer
TWO_SUBJECTS = (
    'kind: Stream\nname: ORDERS\nsubjects: ["orders.>", "returns.*"]\nmax_age: 7d\n'
    "standby:\n  primary: east\n  environment: west\n---\n" + SHIPPER_SPEC
)


class _SubjectDroppedAtTheConsumers(Observer):
    """Hears the failover; once west's consumer is created (just before the verify),
    another client gives west's promoted ORDERS only its first subject."""

    def __init__(self, west: NatsServer) -> None:
        self.west = west

    def notice(self, message: str) -> None:
        if "consumer shipper created" in message:
            worker = threading.Thread(target=lambda: updated(self.west, {"subjects": ["orders.>"]}))
            worker.start()  # its own event loop; the failover's waits meanwhile
            worker.join()


def test_the_verify_probes_every_declared_subject(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: the verify's probe published on the first declared subject only: a
    promoted stream not listening on returns.* (given only orders.> by someone between
    the promotion and the verify) passed, the failover reported done and every write on
    returns.* went to no stream. Each declared subject is probed now (returns.* as
    returns._reconcile_probe), and the one not answered is named."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west, TWO_SUBJECTS)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 5))
    run(_publish(east.url, "returns.new", 5))
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 10)

    result = run(fail_over(_east_to_west(root), _SubjectDroppedAtTheConsumers(west)))

    assert result.done == () and len(result.problems) == 1, result
    assert "returns._reconcile_probe (of returns.*)" in result.problems[0], result.problems
    assert "orders." not in result.problems[0].split("ORDERS:", 1)[1], result.problems
    assert counted(west)[0] == 10  # the probes stored nothing

    run(_publish(west.url, "orders.new", 1))  # the subject the probe found answered
    assert counted(west)[0] == 11


def _as_the_mirror(config: dict[str, Any]) -> None:
    """East's ORDERS made the very mirror west's spec declares."""
    config.pop("subjects", None)
    config["mirror"] = {"name": "ORDERS", "external": {"api": "$JS.east.API"}}


def test_a_backup_carrying_message_ttls_is_never_restored_as_the_standby(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: the standby rule took a backup for the declared mirror when it carried no
    seal or deny the spec does not declare, but no update turns ``allow_msg_ttl`` off
    either (measured on 2.15.1: "message TTL status can not be disabled", on a mirror
    too). East's backup rewritten as the very mirror west's spec declares plus
    ``allow_msg_ttl`` (not declared) was restored with ``--env west``: apply could never
    make it the declared mirror, and a failover's promotion kept it (refused then, with
    no way on but a replace). Refused now, nothing made in west; the mirror apply makes
    fills from east without it."""
    east, west, root, out = east_backed_up(server_factory, tmp_path, ORDERS_ONLY)

    def with_ttls(config: dict[str, Any]) -> None:
        _as_the_mirror(config)
        config["allow_msg_ttl"] = True

    rewritten(out, with_ttls)
    result = reconcile("restore", str(out), "--env", "west", "--yes", cwd=root)
    assert result.returncode == 1, said(result)
    assert "orders.yaml:" in result.stderr and "message TTLs" in result.stderr, said(result)
    assert run(_user_streams(west)) == []  # nothing restored in west
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 30)
    assert not _info(west.url, "ORDERS")["config"].get("allow_msg_ttl")
    assert counted(east)[0] == 30
