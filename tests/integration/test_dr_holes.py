"""``reconcile failover`` attacked again (a careless user, another client on either
server), on two real JetStream domains joined by a leafnode: both sides are counted with
a raw client before and after. Each test names the hole it closes."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is each test's argument)
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, joined_domains, run, unused_port
from test_dr_attacks import counted, refused_untouched, said, updated
from test_dr_failover import fetch, is_fenced, ready  # noqa: F401 (ready: a fixture)
from test_dr_rules import FAILOVER
from test_dr_standby import ORDERS, applied, consumers, dr_project, last_seq, link, wait_for
from test_lifecycle import _info, _publish, _request

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

Ready = tuple[NatsServer, NatsServer, Path]


def test_a_consumer_someone_made_again_on_the_origin_never_decides_where_the_standbys_starts(
    ready: Ready,
) -> None:
    """Hole: east's ``shipper`` (ack floor 20) deleted and made again by another client
    (no owner marker, delivering only new messages: its ack floor 50). The failover read
    that ack floor as the project's consumer's and created west's ``shipper`` at 51:
    messages 21..50, never processed, skipped for good. A declared consumer on the origin
    must carry this project's owner marker before its ack floor decides anything."""
    east, _west, _root = ready
    assert "error" not in run(_request(east.url, "$JS.API.CONSUMER.DELETE.ORDERS.shipper"))
    made = {"durable_name": "shipper", "ack_policy": "explicit", "deliver_policy": "new"}
    body = {"stream_name": "ORDERS", "config": made, "action": "create"}
    assert "error" not in run(_request(east.url, "$JS.API.CONSUMER.CREATE.ORDERS.shipper", body))
    refused_untouched(ready, "shipper")


def test_a_standby_promoted_by_hand_before_it_caught_up_is_diverged_not_taken_over(
    ready: Ready,
) -> None:
    """Hole: west promoted by someone while the link was down (no write of its own yet),
    east meanwhile acknowledging 51..60. The comparison stopped at the last sequence both
    have (50, the same message): no DIVERGED in the plan, the failover fenced east,
    created west's ``shipper`` at east's ack floor + 1 and only then failed its verify;
    west's next writes take 51.. again while east's 51..60 are on no promoted side. Now
    an origin holding messages past the promoted standby's last is DIVERGED, as the
    failback compares it: east fenced (it keeps them), no consumer, named, exit 1."""
    east, west, root = ready
    link(west, up=False, leafnodes=dict(west.settings["leafnodes"]))
    updated(west, {"subjects": ["orders.>"]}, drop=("mirror",))  # promoted by someone
    run(_publish(east.url, "orders.new", 10))  # acknowledged by east only: 51..60
    east_before, west_before = counted(east), counted(west)
    assert east_before[0] == 60 and west_before[0] == 50

    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 1, said(result)
    assert "DIVERGED" in result.stdout and "60" in result.stdout, said(result)
    assert counted(east) == east_before and counted(west) == west_before
    assert is_fenced(east) and consumers(west) == []


NOTIFIER = """\
---
kind: Consumer
stream: ORDERS
name: notifier
ack_policy: explicit
deliver_policy: new
"""


def test_a_consumer_delivering_only_new_messages_is_failed_over_from_its_ack_floor(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: a declared consumer with ``deliver_policy: new`` was created paused on the
    promoted stream, then moved with CONSUMER.RESET, which the server refuses for that
    policy: the failover stopped there, the consumer paused until 2999, and every re-run
    stopped at the same refusal. It is now created from the origin's ack floor + 1 by
    sequence, as on servers without CONSUMER.RESET: nothing skipped, nothing paused."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west, ORDERS + NOTIFIER)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 50))
    assert fetch(east, "notifier", 30, ack=True) == list(range(1, 31))
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 50)

    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 0, said(result)
    assert last_seq(east) == 50 and last_seq(west) == 50
    info = run(_request(west.url, "$JS.API.CONSUMER.INFO.ORDERS.notifier"))
    assert not info.get("paused"), info
    assert fetch(west, "notifier", 20, ack=False) == list(range(31, 51))  # nothing skipped
    assert fetch(west, "shipper", 50, ack=False) == list(range(1, 51))


def test_a_stream_on_the_standby_holding_the_subjects_refuses_before_the_fence(
    ready: Ready,
) -> None:
    """Hole: west's account already has a stream (someone's LEGACY) on orders.legacy.>,
    inside the subjects the promotion gives ORDERS. The failover fenced east, waited,
    and only then did the server refuse the promotion (subjects overlap, err 10065):
    east fenced, west still a mirror, no write acknowledged on either side, and every
    re-run stopped there. The promotion's step is now judged against every stream of
    the standby as apply's plan is (planning.live_checks): refused before anything
    changes, naming LEGACY, east still taking writes."""
    east, west, root = ready
    legacy = {"name": "LEGACY", "subjects": ["orders.legacy.>"]}
    assert "error" not in run(_request(west.url, "$JS.API.STREAM.CREATE.LEGACY", legacy))
    east_before, west_before = counted(east), counted(west)

    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 1, said(result)
    assert "LEGACY" in result.stderr, said(result)
    assert counted(east) == east_before and counted(west) == west_before
    assert not is_fenced(east) and consumers(west) == []
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    run(_publish(east.url, "orders.new", 1))  # east still acknowledges writes
    assert counted(east)[0] == 51


def test_a_sealed_mirror_is_never_promoted(ready: Ready) -> None:
    """Hole: west's mirror sealed by someone (it holds all 50 messages: the wait
    passes). The failover fenced east, promoted the sealed stream, whose every publish is
    refused (err 10109), took the probe's refusal for an answer and said "Failover
    complete": no write acknowledged on either side, a seal cannot be undone and a
    rollback of a promoted pair is refused. A sealed standby is now refused before
    anything changes, east still taking writes."""
    east, west, root = ready
    updated(west, {"sealed": True})
    refused_untouched(ready, "sealed")
    run(_publish(east.url, "orders.new", 1))  # east still acknowledges writes
    assert counted(east)[0] == 51
    fresh = reconcile("apply", "--env", "west", "--yes", "--allow-replace", cwd=root)
    assert fresh.returncode == 0, said(fresh)  # the remedy the refusal names
    again = reconcile(*FAILOVER, cwd=root)
    assert again.returncode == 0, said(again)
    assert counted(west) == counted(east) and counted(west)[0] == 51
    run(_publish(west.url, "orders.new", 1))  # the promoted side acknowledges writes
    assert counted(west)[0] == 52


def test_a_promotion_the_standbys_user_may_not_make_gives_the_origin_its_subjects_back(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: west's credentials allow creating its mirror, not updating it (a
    least-privilege user). The failover fenced east, waited, and the promotion failed:
    only the wait's timeout and Ctrl-C gave the origin its subjects back, so east stayed
    fenced, west a mirror, and no write was acknowledged on either side. A pair that
    stops before its promotion now gives the origin its subjects back, and says so."""
    port = unused_port()
    east = server_factory(
        name="east", domain="east", config={"leafnodes": {"host": "127.0.0.1", "port": port}}
    )
    denied = {"publish": {"deny": ["$JS.API.STREAM.UPDATE.ORDERS"]}}
    users = [
        {"user": "admin", "password": "a"},
        {"user": "dr", "password": "d", "permissions": denied},
    ]
    remote = {"remotes": [{"url": f"nats-leaf://127.0.0.1:{port}"}]}
    west = server_factory(
        name="west",
        domain="west",
        config={"leafnodes": remote, "authorization": {"users": users}, "no_auth_user": "admin"},
    )
    wait_for(lambda: bool(west.monitor("leafz").get("leafnodes")))
    root = dr_project(tmp_path, east, west)
    project = root / "reconcile.yaml"
    text = project.read_text(encoding="utf-8")
    project.write_text(text.replace(f"'{west.url}'", "{env: WEST_URL}"), encoding="utf-8")
    as_dr = {"WEST_URL": west.url.replace("nats://", "nats://dr:d@")}
    applied(root, "east")
    run(_publish(east.url, "orders.new", 50))
    made = reconcile("apply", "--env", "west", "--yes", cwd=root, env=as_dr)
    assert made.returncode == 0, said(made)
    wait_for(lambda: last_seq(west) == 50)
    east_before, west_before = counted(east), counted(west)

    result = reconcile(*FAILOVER, cwd=root, env=as_dr)
    assert result.returncode == 1, said(result)
    assert "east takes writes again" in said(result), said(result)
    assert counted(east) == east_before and counted(west) == west_before
    assert not is_fenced(east) and consumers(west) == []
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    run(_publish(east.url, "orders.new", 1))  # east acknowledges writes again
    assert counted(east)[0] == 51


def test_two_environments_reaching_the_same_stream_are_refused_at_once(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: west's servers and domain copied from east's in the project file. The plan
    read one stream as both sides (no mirror: "promoted") and would fence the only copy;
    it then waited --lock-timeout for its own lease (taken for the standby, the same
    lock) and named a holder to break: itself. Now refused at once, naming the stream,
    nothing changed, the stream still taking writes."""
    east = server_factory(name="east", domain="east")
    root = dr_project(tmp_path, east, east)
    project = root / "reconcile.yaml"
    text = project.read_text(encoding="utf-8")
    project.write_text(text.replace("domain: west", "domain: east"), encoding="utf-8")
    applied(root, "east")
    run(_publish(east.url, "orders.new", 50))
    before = counted(east)

    result = reconcile(*FAILOVER, "--lock-timeout", "30s", cwd=root)
    assert result.returncode == 1, said(result)
    assert "same stream" in result.stderr and "nothing was changed" in result.stderr
    assert "lock" not in result.stderr, said(result)
    assert counted(east) == before and not is_fenced(east)
    run(_publish(east.url, "orders.new", 1))
    assert counted(east)[0] == 51


def test_a_mirror_whose_limits_someone_tightened_is_never_promoted_with_them(
    ready: Ready,
) -> None:
    """Hole: west's mirror given a max_bytes a little over what it holds, by someone.
    The promotion keeps the mirror's live config: west took the writes and dropped
    east's oldest messages under a limit the spec never declared (1..6 after 10 writes;
    21.., which ``shipper`` had not processed, after a few more). A mirror keeping less
    than its spec declares is now refused before anything changes (apply the standby
    environment first)."""
    _east, west, _root = ready
    held = int(_info(west.url, "ORDERS")["state"]["bytes"])
    updated(west, {"max_bytes": held + 200})
    refused_untouched(ready, "max_bytes")


def test_the_health_check_reads_the_standby_when_the_origin_is_lost(ready: Ready) -> None:
    """Hole: with east down, the moment a health check is for, ``failover --check``
    (reads only) stopped with exit 1, asking for --unplanned, and showed no pair. It now
    shows each pair with the origin unread and the possible loss, exit 2 (not healthy),
    west untouched."""
    east, west, root = ready
    east.kill()
    west_before = counted(west)
    result = reconcile("failover", "--from", "east", "--to", "west", "--check", cwd=root)
    assert result.returncode == 2, said(result)
    assert "ORDERS" in result.stdout and "origin could not be read" in result.stdout
    assert "mirror 50" in result.stdout and "possible loss" in result.stdout
    assert counted(west) == west_before and consumers(west) == []
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"


@pytest.mark.parametrize(
    "env", [("--env", "east"), ("--server", "EAST", "--owner", "shop", "specs")]
)
def test_a_fenced_origin_whose_spec_lost_its_standby_is_never_given_its_subjects_back(
    ready: Ready, env: tuple[str, ...]
) -> None:
    """Hole (noticed by the DR attack pass): after a failover, a careless user took the
    ``standby:`` block out of ORDERS's spec (or applied the specs to east's server by
    URL, no environment named): ``apply`` gave the fenced origin its subjects back, and
    east and the promoted west both took writes on ``orders.>``. A fenced stream is now
    never given its subjects back by apply, whatever its spec says, but by a failback."""
    east, west, root = ready
    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 0, said(result)
    specs = root / "specs" / "orders.yaml"
    text = specs.read_text(encoding="utf-8")
    specs.write_text(text.replace("standby:\n  primary: east\n  environment: west\n", ""))
    assert "standby" not in specs.read_text(encoding="utf-8")
    fenced_last, before = last_seq(east), (counted(east), counted(west))
    args = [east.url if arg == "EAST" else arg for arg in env]
    unfence = reconcile("apply", *args, "--yes", "--allow-replace", "--allow-data-loss", cwd=root)
    assert unfence.returncode == 1, said(unfence)
    assert "fenced by a failover" in unfence.stdout + unfence.stderr
    # the headline names the failover rules, not a lifecycle nobody declared
    assert "would undo a failover" in unfence.stderr and "prevent_destroy" not in unfence.stderr
    assert is_fenced(east) and (counted(east), counted(west)) == before
    run(_publish(east.url, "orders.new", 3))  # east's clients: still not stored on east
    assert last_seq(east) == fenced_last
