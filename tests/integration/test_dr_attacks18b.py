"""``reconcile failover`` of a standby whose stream someone changed by hand (attack18b's
leftover: a mirror given ``max_msg_size: 10`` was promoted with it, refusing the larger
writes, and the verify failed only once the origin was fenced), on two real JetStream
domains joined by a leafnode (a three-server cluster for the replicas). A promotion
keeps the mirror's live config: every field ``model.promotion.REFUSED`` lists is now
refused before anything changes, naming the field and the ``apply`` that sets it back.
Both sides are counted with a raw client before and after."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is each test's argument)
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import Cluster, NatsServer, joined_domains, run
from test_dr_accounts import ACCOUNTS, _project, _url
from test_dr_accounts import ORDERS as ACCOUNT_ORDERS
from test_dr_attacks import counted, said, updated
from test_dr_failover import _killed_at, fetch, is_fenced, ready  # noqa: F401 (ready)
from test_dr_rules import FAILOVER
from test_dr_standby import SHIPPER, applied, dr_project, last_seq, standby_stream, wait_for
from test_lifecycle import _info, _publish, _request

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

Ready = tuple[NatsServer, NatsServer, Path]


@dataclass(frozen=True)
class Changed:
    """West's mirror as someone changed it: ``change`` set on it by hand, where the spec
    declares ``declared`` (lines beside ``max_age: 7d``). ``made``: no update sets it,
    so the mirror was deleted and made again with it (a full copy of east). ``replace``:
    no update undoes it, so the refusal names ``apply --allow-replace``."""

    field: str
    change: dict[str, Any]
    declared: tuple[str, ...] = ()
    made: bool = False
    replace: bool = False
    id: str = ""  # the test id, when the field is not enough


CHANGES = (
    Changed("max_msg_size", {"max_msg_size": 10}),
    Changed("discard", {"discard": "new"}, id="discard-new"),
    Changed("discard", {"discard": "old"}, ("discard: new",), id="discard-old"),
    Changed(
        "discard_new_per_subject",
        {"discard_new_per_subject": True},
        ("discard: new", "max_msgs_per_subject: 1000"),
    ),
    Changed("no_ack", {"no_ack": True}),
    Changed("allow_rollup_hdrs", {"allow_rollup_hdrs": True}, id="rollups-allowed"),
    Changed(
        "allow_rollup_hdrs",
        {"allow_rollup_hdrs": False},
        ("allow_rollup_hdrs: true",),
        id="rollups",
    ),
    Changed("allow_msg_ttl", {"allow_msg_ttl": True}, replace=True, id="ttl-allowed"),
    Changed(
        "allow_msg_ttl", {"allow_msg_ttl": False}, ("allow_msg_ttl: true",), made=True, id="ttl"
    ),
    Changed("deny_delete", {"deny_delete": True}, replace=True, id="deletes-denied"),
    Changed("deny_delete", {"deny_delete": False}, ("deny_delete: true",), made=True, id="deletes"),
    Changed("deny_purge", {"deny_purge": True}, replace=True, id="purges-denied"),
    Changed("deny_purge", {"deny_purge": False}, ("deny_purge: true",), made=True, id="purges"),
    Changed("allow_direct", {"allow_direct": False}, ("allow_direct: true",)),
    Changed("max_consumers", {"max_consumers": 1}),
    Changed(
        "consumer_limits.inactive_threshold",
        {"consumer_limits": {"inactive_threshold": 2_000_000_000}},
    ),
    Changed("consumer_limits.max_ack_pending", {"consumer_limits": {"max_ack_pending": 5}}),
    Changed("storage", {"storage": "memory"}, made=True, replace=True),
    Changed("retention", {"retention": "workqueue"}, made=True, replace=True),
    Changed("persist_mode", {"persist_mode": "async"}, made=True, replace=True),
)


def _pair(start: Callable[..., NatsServer], root: Path, declared: tuple[str, ...]) -> Ready:
    """``ready``'s pair (east with 50 messages, 20 acknowledged by ``shipper``, west's
    mirror caught up) of a stream declaring ``declared`` too."""
    east, west = joined_domains(start)
    root = dr_project(
        root, east, west, standby_stream("max_age: 7d", *declared) + "---\n" + SHIPPER
    )
    applied(root, "east")
    run(_publish(east.url, "orders.new", 50))
    assert fetch(east, "shipper", 20, ack=True) == list(range(1, 21))
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 50)
    return east, west, root


def _by_hand(west: NatsServer, changed: Changed) -> None:
    """West's mirror changed by another client: a raw update, or (``made``) deleted and
    made again with the change, caught up again."""
    if not changed.made:
        updated(west, changed.change)
        return
    config = {**_info(west.url, "ORDERS")["config"], **changed.change}
    assert "error" not in run(_request(west.url, "$JS.API.STREAM.DELETE.ORDERS"))
    assert "error" not in run(_request(west.url, "$JS.API.STREAM.CREATE.ORDERS", config))
    wait_for(lambda: last_seq(west) == 50)


@pytest.mark.parametrize("changed", CHANGES, ids=[c.id or c.field for c in CHANGES])
def test_a_mirror_someone_changed_is_never_promoted_unlike_its_spec(
    server_factory: Callable[..., NatsServer], tmp_path: Path, changed: Changed
) -> None:
    """Hole: the promotion keeps the mirror's live config. West's mirror changed by
    someone so that, promoted, it takes fewer writes than the spec declares, keeps less,
    answers fewer requests or does for good what the spec does not declare (measured:
    ``max_msg_size: 10`` refused the verify's probe with east fenced; a 2 s
    ``consumer_limits.inactive_threshold`` was given to the failover's own ``shipper``,
    deleted 2 s later; a memory mirror promoted in memory) was promoted with it, "Failover
    complete". Now refused before the fence, naming the field and the apply that sets it
    back, which then lets the failover complete with every message east acknowledged."""
    east, west, root = _pair(server_factory, tmp_path, changed.declared)
    _by_hand(west, changed)
    before = counted(east), counted(west)

    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 1, said(result)
    assert changed.field in result.stderr and "nothing was changed" in result.stderr
    fix = ["apply", "--env", "west", "--yes", *(["--allow-replace"] if changed.replace else [])]
    advice = "reconcile apply --env west" + (" --allow-replace" if changed.replace else ")")
    assert advice in result.stderr, result.stderr
    assert not is_fenced(east) and (counted(east), counted(west)) == before
    run(_publish(east.url, "orders.new", 1))  # east still acknowledges writes
    assert counted(east)[0] == 51

    assert (done := reconcile(*fix, cwd=root)).returncode == 0, said(done)  # the advice
    wait_for(lambda: last_seq(west) == 51)
    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 0, said(result)
    assert is_fenced(east) and counted(west) == counted(east)  # every acknowledged write
    assert fetch(west, "shipper", 1, ack=False) == [21]


def test_a_mirror_someone_gave_fewer_replicas_is_never_promoted_with_them(
    tmp_path: Path,
) -> None:
    """Hole: the spec declares 3 replicas; west's mirror, in a three-server cluster, cut
    to 1 by someone. Promoted with it, every message east acknowledged on 3 servers was
    kept on one, whose loss loses them. Refused before the fence (two accounts of one
    cluster, docs/dr.md#two-accounts), and ``apply --env west`` sets it back."""
    cluster = Cluster(tmp_path / "cluster")
    for node in cluster.nodes:  # the cluster's own readiness check connects as east
        node.settings.update(accounts=ACCOUNTS, no_auth_user="east")
    cluster.start()
    try:
        server = cluster.nodes[0]
        (tmp_path / "project").mkdir()
        specs = ACCOUNT_ORDERS.replace("subjects:", "num_replicas: 3\nsubjects:", 1)
        secrets = _project(tmp_path / "project", server, specs)

        def reconciled(*args: str) -> Any:
            return reconcile(*args, cwd=tmp_path / "project", env=secrets)

        def info(user: str) -> dict[str, Any]:
            found: dict[str, Any] = run(_request(_url(server, user), "$JS.API.STREAM.INFO.ORDERS"))
            return found

        assert (done := reconciled("apply", "--env", "east", "--yes")).returncode == 0, said(done)
        run(_publish(_url(server, "east"), "orders.new", 30))
        assert (done := reconciled("apply", "--env", "west", "--yes")).returncode == 0, said(done)
        wait_for(lambda: info("west")["state"]["last_seq"] == 30)
        config = {**info("west")["config"], "num_replicas": 1}
        reply = run(_request(_url(server, "west"), "$JS.API.STREAM.UPDATE.ORDERS", config))
        assert "error" not in reply, reply

        result = reconciled(*FAILOVER)
        assert result.returncode == 1, said(result)
        assert "num_replicas 1 (declared 3)" in result.stderr
        assert "(reconcile apply --env west)" in result.stderr
        assert info("east")["config"]["subjects"] == ["orders.>"]  # not fenced
        run(_publish(_url(server, "east"), "orders.new", 1))
        assert info("east")["state"]["last_seq"] == 31

        assert (done := reconciled("apply", "--env", "west", "--yes")).returncode == 0, said(done)
        wait_for(lambda: info("west")["state"]["last_seq"] == 31)
        result = reconciled(*FAILOVER)
        assert result.returncode == 0, said(result)
        west = info("west")
        assert west["config"]["num_replicas"] == 3 and west["state"]["last_seq"] == 31
    finally:
        cluster.stop()


def _acknowledged(url: str, size: int) -> dict[str, Any]:
    """A write of ``size`` bytes on orders.new: the stream's answer."""

    async def send() -> dict[str, Any]:
        nc = await nats.connect(url)
        try:
            reply = await nc.request("orders.new", b"x" * size, timeout=5)
            answer: dict[str, Any] = json.loads(reply.data)
            return answer
        finally:
            await nc.close()

    return run(send())


def _roles_swapped(root: Path) -> None:
    """The spec made true after a failover: west the primary, east the standby."""
    spec = root / "specs" / "orders.yaml"
    text = spec.read_text(encoding="utf-8")
    swapped = text.replace("primary: east", "primary: @").replace(
        "environment: west", "environment: east"
    )
    spec.write_text(swapped.replace("primary: @", "primary: west"), encoding="utf-8")


def test_a_promoted_stream_someone_changed_is_never_reported_done(ready: Ready) -> None:
    """Hole: a failover whose verify failed once east was fenced (the promoted stream
    refusing the probe, given ``max_msg_size: 10``): a re-run said "Nothing to do" (exit
    0) and the rollback was refused saying "finish the failover instead", which nothing
    did. A promoted standby unlike its spec is refused too, naming the field and the way
    on: west the primary in git and ``apply --env west``; the rollback's refusal names
    that and the failback."""
    east, west, root = ready
    assert (done := reconcile(*FAILOVER, cwd=root)).returncode == 0, said(done)
    updated(west, {"max_msg_size": 10})
    assert "error" in _acknowledged(west.url, 100)

    again = reconcile(*FAILOVER, cwd=root)
    assert again.returncode == 1, said(again)
    assert "max_msg_size 10 (declared unlimited)" in again.stderr
    assert "make west the primary in git" in again.stderr
    assert "(reconcile apply --env west)" in again.stderr
    back = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert back.returncode == 1, said(back)
    assert "reconcile apply --env east --allow-replace" in back.stderr  # the failback
    assert "reconcile failover --from west --to east" in back.stderr

    _roles_swapped(root)  # the way named
    applied(root, "west")
    assert _acknowledged(west.url, 100)["seq"] == 51  # west takes the larger writes again
    assert is_fenced(east)


def test_a_failover_stopped_after_its_promotion_names_what_to_set_before_it_goes_on(
    ready: Ready,
) -> None:
    """The same with the failover killed (-9) between the promotion and the consumers:
    the re-run is refused naming ``max_msg_size`` (set by someone meanwhile), says to set
    it on west's stream and run the failover again, which then creates ``shipper`` at
    east's ack floor + 1."""
    east, west, root = ready
    _killed_at(root, "promoted", west)
    updated(west, {"max_msg_size": 10})

    again = reconcile(*FAILOVER, cwd=root)
    assert again.returncode == 1, said(again)
    assert "max_msg_size 10" in again.stderr and "nats stream edit" in again.stderr
    assert "consumers still missing" in again.stderr
    assert is_fenced(east) and _info(west.url, "ORDERS")["state"]["consumer_count"] == 0

    updated(west, {"max_msg_size": -1})  # as the refusal says
    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 0, said(result)
    assert counted(west) == counted(east) and fetch(west, "shipper", 1, ack=False) == [21]


def test_a_rollback_is_never_refused_for_what_only_a_promotion_would_keep(
    ready: Ready,
) -> None:
    """Hole: a failover killed (-9) after its fence, and west's mirror given a tighter
    ``max_bytes`` by someone meanwhile. The rollback, which promotes nothing, was refused
    for it ("keeps less than the spec declares"), east left fenced and neither side
    taking writes. The rule judges promotions only: the rollback gives east its subjects
    back, and the failover is still refused."""
    east, west, root = ready
    _killed_at(root, "fenced", west)
    assert is_fenced(east)
    updated(west, {"max_bytes": int(_info(west.url, "ORDERS")["state"]["bytes"]) + 200})

    back = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert back.returncode == 0, said(back)
    assert not is_fenced(east)
    run(_publish(east.url, "orders.new", 1))  # east acknowledges writes again
    assert counted(east)[0] == 51
    again = reconcile(*FAILOVER, cwd=root)
    assert again.returncode == 1 and "max_bytes" in again.stderr, said(again)
