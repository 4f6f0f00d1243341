"""``reconcile failover`` attacked (issue 41), on two real JetStream domains joined by a
leafnode: what another client wrote on either server (a stream promoted by hand, a fenced
old origin, another owner's marker, a consumer it made, a pause, a forged resume record
or lease) never decides a step; both sides are counted with a raw client before and
after. Each test names the hole it closes."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is each test's argument)
from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from terminal import QUESTION, Terminal
from test_dr_failover import (  # noqa: F401 (ready: a fixture)
    Publishers,
    _killed_at,
    check_after,
    fetch,
    is_fenced,
    ready,
    recorded_phase,
    stored,
)
from test_dr_rules import FAILOVER, unchanged
from test_dr_standby import consumers, last_seq, link, wait_for
from test_lifecycle import _info, _publish, _request

from reconciler.specs.spec import MANAGED_KEY, MANAGED_VALUE, OWNER_KEY

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

Ready = tuple[NatsServer, NatsServer, Path]


def updated(server: NatsServer, change: dict[str, Any], drop: tuple[str, ...] = ()) -> None:
    """ORDERS on ``server`` changed by another client (a raw STREAM.UPDATE)."""
    config = {k: v for k, v in _info(server.url, "ORDERS")["config"].items() if k not in drop}
    reply = run(_request(server.url, "$JS.API.STREAM.UPDATE.ORDERS", {**config, **change}))
    assert "error" not in reply, reply


def counted(server: NatsServer) -> tuple[int, list[str]]:
    """ORDERS on ``server`` as a raw client reads it: its last sequence and payloads."""
    return last_seq(server), stored(server)


def refused_untouched(ready: tuple[NatsServer, NatsServer, Path], why: str) -> None:
    """``reconcile failover`` refused before anything changes, saying ``why``: both sides
    counted alike before and after, east not fenced, west still a mirror, no consumer."""
    east, west, root = ready
    before = counted(east), counted(west)
    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 1, said(result)
    assert why in result.stderr and "nothing was changed" in result.stderr
    assert (counted(east), counted(west)) == before
    assert not is_fenced(east) and consumers(west) == []
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"


def said(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr


def test_a_standby_promoted_by_hand_with_writes_of_its_own_is_fenced_from_not_reported_done(
    ready: Ready,
) -> None:
    """Hole: a standby that is no mirror any more was taken for one this failover had
    promoted: the wait and promotion skipped, the verify only compared last sequences,
    consumers created at east's ack floor on other messages, and success reported:
    east's acknowledged writes 51..60 on no promoted side, silently. Now the standby must
    hold east's message at the last sequence both have: it does not, so east is fenced
    (both sides took writes: that stops) and the pair stops there, named, exit 1."""
    east, west, root = ready
    east_before, west_before = _both_written(ready)
    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 1, said(result)
    assert "sequence 60" in said(result) and "DIVERGED" in result.stdout
    assert counted(east) == east_before and counted(west) == west_before  # nothing lost
    assert is_fenced(east) and consumers(west) == []


def _both_written(ready: Ready) -> tuple[tuple[int, list[str]], tuple[int, list[str]]]:
    """West promoted by someone (the link down) and written there, 51..80; east
    acknowledged writes of its own, 51..60: both sides as a raw client counts them."""
    east, west, _ = ready
    link(west, up=False, leafnodes=dict(west.settings["leafnodes"]))
    updated(west, {"subjects": ["orders.>"]}, drop=("mirror",))  # promoted by someone
    run(_publish(west.url, "orders.new", 30))  # written there directly: 51..80
    run(_publish(east.url, "orders.new", 10))  # acknowledged by east: 51..60
    east_before, west_before = counted(east), counted(west)
    assert east_before[0] == 60 and west_before[0] == 80
    return east_before, west_before


def test_a_failback_never_deletes_writes_the_old_origin_took_that_the_primary_lacks(
    ready: Ready,
) -> None:
    """Hole: once east is fenced (the diverged failover above) and the roles swapped in
    the spec, `apply --env east --allow-replace` replaced east's stream by a mirror of
    west's: east's acknowledged writes 51..60, in no other stream, deleted. A failback
    now compares east's messages with west's first: prevented (no flag allows it),
    naming the sequence, and nothing changes on either side; once east holds nothing
    west lacks, the same failback runs (test_dr_failover.py's round trip)."""
    east, west, root = ready
    east_before, west_before = _both_written(ready)
    fenced = reconcile(*FAILOVER, cwd=root)
    assert fenced.returncode == 1 and is_fenced(east), said(fenced)
    specs = root / "specs" / "orders.yaml"
    text = specs.read_text(encoding="utf-8")
    swapped = text.replace("primary: east", "primary: X").replace("west", "east")
    specs.write_text(swapped.replace("primary: X", "primary: west"), encoding="utf-8")

    for flags in (("--allow-replace",), ("--allow-replace", "--allow-data-loss")):
        back = reconcile("apply", "--env", "east", "--yes", *flags, cwd=root)
        assert back.returncode == 1, said(back)
        assert "would delete messages west lacks" in said(back), said(back)
        assert "sequence 60" in said(back)
        assert counted(east) == east_before and counted(west) == west_before
        assert _info(east.url, "ORDERS")["config"].get("mirror") is None


def test_a_failover_back_onto_the_fenced_old_origin_is_refused(ready: Ready) -> None:
    """Hole: after a failover east -> west, the roles swapped in the spec but east not
    made a mirror again, a failover west -> east took east's fenced stream (no mirror)
    for a promoted one: it fenced west, and neither side took writes."""
    east, west, root = ready
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    run(_publish(west.url, "orders.new", 5))  # the promoted side takes writes: 55
    specs = root / "specs" / "orders.yaml"
    text = specs.read_text(encoding="utf-8")
    swapped = text.replace("primary: east", "primary: X").replace("west", "east")
    specs.write_text(swapped.replace("primary: X", "primary: west"), encoding="utf-8")
    east_before, west_before = counted(east), counted(west)

    back = reconcile("failover", "--from", "west", "--to", "east", "--yes", cwd=root)
    assert back.returncode == 1, said(back)
    assert "fenced" in back.stderr and "--allow-replace" in back.stderr
    assert counted(east) == east_before and counted(west) == west_before
    assert _info(west.url, "ORDERS")["config"]["subjects"] == ["orders.>"]  # not fenced
    run(_publish(west.url, "orders.new", 1))
    assert last_seq(west) == 56


def test_an_origin_given_its_subjects_back_by_another_client_is_not_reported_done(
    ready: Ready,
) -> None:
    """Hole: killed after the promotion, the fence edited away by another client and
    writes acknowledged by east meanwhile; the re-run fenced east again, created the
    consumer and reported success though east's new writes are on no promoted stream.
    Now it fences east again (both sides took writes), names the sequence and stops
    there: no consumer created, exit 1. (The same as east coming back after an unplanned
    failover with writes the mirror never got.)"""
    east, west, root = ready
    _killed_at(root, "promoted", west)
    assert is_fenced(east)
    link(west, up=False, leafnodes=dict(west.settings["leafnodes"]))
    updated(east, {"subjects": ["orders.>"]})  # the fence marker edited away
    run(_publish(east.url, "orders.new", 4))  # acknowledged by east: 51..54
    run(_publish(west.url, "orders.new", 6))  # and by the promoted west: 51..56
    east_before, west_before = counted(east), counted(west)

    again = reconcile(*FAILOVER, cwd=root)
    assert again.returncode == 1, said(again)
    assert "sequence 54" in again.stderr
    assert counted(east) == east_before and counted(west) == west_before
    assert is_fenced(east) and consumers(west) == []  # fenced again; the pair stops there


@pytest.mark.parametrize("side", ["east", "west"])
def test_a_stream_another_owner_manages_is_never_fenced_or_promoted(
    ready: Ready, side: str
) -> None:
    """Hole: the failover wrote streams whatever their owner marker said (apply refuses
    another owner's without --take-over)."""
    east, west, root = ready
    server = east if side == "east" else west
    metadata = dict(_info(server.url, "ORDERS")["config"].get("metadata") or {})
    owner = "billing\x1b[2J"  # a name on the server: escaped when it is shown
    updated(server, {"metadata": {**metadata, MANAGED_KEY: MANAGED_VALUE, OWNER_KEY: owner}})
    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 1, said(result)
    assert "billing" in result.stderr and side in result.stderr
    assert "\x1b" not in said(result)
    unchanged(east, west)


def test_a_consumer_someone_made_on_the_mirror_is_not_taken_for_the_failovers(
    ready: Ready,
) -> None:
    """Hole: a declared consumer already on the unpromoted mirror (made by someone else,
    at a position of theirs) was kept as if the failover had made it: delivering only
    new messages, it skipped the 30 the origin's consumer had not acknowledged."""
    east, west, root = ready
    made = {"durable_name": "shipper", "ack_policy": "explicit", "deliver_policy": "new"}
    reply = run(_request(west.url, "$JS.API.CONSUMER.CREATE.ORDERS.shipper", {
        "stream_name": "ORDERS", "config": made, "action": "create"}))  # fmt: skip
    assert "error" not in reply, reply
    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 1, said(result)
    assert "shipper" in result.stderr and "nothing was changed" in result.stderr
    assert not is_fenced(east) and last_seq(east) == 50
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    run(_publish(east.url, "orders.new", 1))
    assert last_seq(east) == 51


def test_a_consumer_someone_paused_is_not_moved_nor_resumed_by_a_rerun(ready: Ready) -> None:
    """Hole: a consumer paused until the failover's own far date was taken for one an
    interrupted failover left: a re-run moved it back to the origin's ack floor and
    resumed it. Only a paused consumer that has delivered nothing is the failover's."""
    _, west, root = ready
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    assert fetch(west, "shipper", 10, ack=True) == list(range(21, 31))
    pause = {"pause_until": "2999-01-01T00:00:00Z"}
    paused = run(_request(west.url, "$JS.API.CONSUMER.PAUSE.ORDERS.shipper", pause))
    assert "error" not in paused, paused

    again = reconcile(*FAILOVER, cwd=root)
    assert again.returncode == 0, said(again)
    info = run(_request(west.url, "$JS.API.CONSUMER.INFO.ORDERS.shipper"))
    assert info.get("paused") and info["ack_floor"]["stream_seq"] == 30  # as the person left it


def test_a_consumer_left_paused_is_resumed_by_an_unplanned_rerun(ready: Ready) -> None:
    """Hole: killed between a consumer's creation (paused) and its move, then re-run
    unplanned (the origin lost): no ack floor to move it to, and it was left paused for
    good. Now it is resumed where it was created: at the stream's first message."""
    east, west, root = ready
    _killed_at(root, "consumer paused", west)
    east.kill()
    result = reconcile(*FAILOVER, "--unplanned", cwd=root)
    assert result.returncode == 0, said(result)
    info = run(_request(west.url, "$JS.API.CONSUMER.INFO.ORDERS.shipper"))
    assert not info.get("paused")
    assert fetch(west, "shipper", 50, ack=False) == list(range(1, 51))  # nothing skipped


def _kv_put(server: NatsServer, key: str, value: bytes) -> None:
    async def put() -> None:
        import nats

        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await js.publish(f"$KV.RECONCILE_LOCKS.{key}", value)
        finally:
            await nc.close()

    run(put())


def test_a_forged_resume_record_decides_nothing_and_is_never_printed_raw(ready: Ready) -> None:
    east, west, root = ready
    forged = {"stream": "ORDERS\x1b[2J", "phase": "done", "from": "east", "to": "west"}
    _kv_put(west, "failover.ORDERS", json.dumps(forged).encode())
    with Publishers([east.url, west.url]) as publishers:
        time.sleep(0.3)
        result = reconcile(*FAILOVER, cwd=root)
        assert result.returncode == 0, said(result)
        time.sleep(0.5)
    assert "\x1b" not in said(result)
    check_after(east, west, publishers.acked, 50)


def test_a_failover_waits_for_an_apply_holding_the_lock_and_changes_nothing(
    ready: Ready,
) -> None:
    """A lease held on the origin (by an apply elsewhere; its holder's name carries
    terminal controls): the failover waits its --lock-timeout, then refuses, escaped,
    neither side changed."""
    east, west, root = ready
    lease = {
        "owner": "mallory\x1b[2J\u202e", "host": "elsewhere", "pid": 1, "run": "x",
        "acquired_at": "2026-01-01T00:00:00Z", "expires_at": "2999-01-01T00:00:00Z",
    }  # fmt: skip
    _kv_put(east, "apply", json.dumps(lease).encode())
    result = reconcile(*FAILOVER, "--lock-timeout", "1s", cwd=root)
    assert result.returncode == 1, said(result)
    assert "mallory" in result.stderr
    assert "\x1b" not in said(result) and "\u202e" not in said(result)
    unchanged(east, west)
    entry = {"last_by_subj": "$KV.RECONCILE_LOCKS.apply"}
    on_west = run(_request(west.url, "$JS.API.STREAM.MSG.GET.KV_RECONCILE_LOCKS", entry))
    assert "message" not in on_west or not base64.b64decode(on_west["message"].get("data") or "")


def test_two_failovers_at_once_fail_over_once(ready: Ready) -> None:
    east, west, root = ready
    args = [sys.executable, "-m", "reconciler", *FAILOVER]
    with Publishers([east.url, west.url]) as publishers:
        time.sleep(0.3)
        runs = [
            subprocess.Popen(args, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)
        ]
        codes = [process.wait(timeout=120) for process in runs]
        time.sleep(0.5)
    assert codes == [0, 0], [p.stderr.read() for p in runs if p.stderr]
    check_after(east, west, publishers.acked, 50)


def test_a_secret_in_the_origins_url_is_never_printed(ready: Ready) -> None:
    """The origin's URL, with a password, given by reference (the project file refuses
    one written in it): never printed, the origin reached or not."""
    east, _, root = ready
    project = root / "reconcile.yaml"
    text = project.read_text(encoding="utf-8")
    project.write_text(text.replace(f"'{east.url}'", "{env: EAST_URL}"), encoding="utf-8")
    secret = {"EAST_URL": east.url.replace("nats://", "nats://admin:S3cretPw@")}
    for flags in (("--check",), ("--check", "--format", "json")):  # the origin reached
        result = reconcile(*FAILOVER, *flags, cwd=root, env=secret)
        assert result.returncode == 0, said(result)
        assert "S3cretPw" not in said(result), said(result)
    east.kill()
    for flags in ((), ("--unplanned", "--check"), ("--unplanned", "--format", "json")):
        result = reconcile(*FAILOVER, *flags, cwd=root, env=secret)
        assert "cannot" in said(result) and "127.0.0.1" in said(result), said(result)
        assert "S3cretPw" not in said(result), said(result)
        assert "Traceback" not in said(result)


def test_ctrl_c_at_the_question_changes_nothing(ready: Ready) -> None:
    east, west, root = ready
    term = Terminal("failover", "--from", "east", "--to", "west", cwd=root)
    assert term.read_until(QUESTION), term.text
    term.type(b"\x03")
    code = term.finish()
    assert code != 0, term.text
    assert "Traceback" not in term.text
    unchanged(east, west)


def test_a_rerun_with_other_flags_after_a_kill_finishes_or_rolls_back(ready: Ready) -> None:
    east, west, root = ready
    _killed_at(root, "fenced", west)  # neither side takes writes now
    rolled = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert rolled.returncode == 0, said(rolled)
    assert not is_fenced(east)
    run(_publish(east.url, "orders.new", 2))
    assert last_seq(east) == 52

    _killed_at(root, "promoted", west)
    refused = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert refused.returncode == 1 and "promoted" in refused.stderr, said(refused)
    assert is_fenced(east) and _info(west.url, "ORDERS")["config"].get("mirror") is None
    with Publishers([east.url, west.url]) as publishers:
        time.sleep(0.3)
        done = reconcile(*FAILOVER, "--unplanned", cwd=root)  # the origin can be read
        assert done.returncode == 0, said(done)
        time.sleep(0.5)
    check_after(east, west, publishers.acked, 52)


def test_an_origin_whose_subjects_differ_from_the_spec_is_refused(ready: Ready) -> None:
    """Hole: east's live subjects differ from the spec's (legacy.> added by hand); the
    fence took them all, and a rollback or a refused wait gave back only the declared
    ones, the promotion too: writes on legacy.> were answered by nobody afterwards."""
    east, west, root = ready
    updated(east, {"subjects": ["orders.>", "legacy.>"]})
    east_before, west_before = counted(east), counted(west)
    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 1, said(result)
    assert "legacy.>" in result.stderr and "nothing was changed" in result.stderr
    assert _info(east.url, "ORDERS")["config"]["subjects"] == ["orders.>", "legacy.>"]
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    assert counted(east) == east_before and counted(west) == west_before
    run(_publish(east.url, "legacy.old", 1))  # east still acknowledges both
    assert last_seq(east) == 51


def test_a_mirror_of_another_stream_is_never_promoted_unplanned(ready: Ready) -> None:
    """Hole: with the origin lost, nothing but the standby's own config says what it
    mirrors: west's ORDERS made again by someone as a mirror of east's OTHER was promoted
    as ORDERS. Its ``mirror`` must name the stream and the API the spec declares."""
    east, west, root = ready
    other = {"name": "OTHER", "subjects": ["other.>"]}
    assert "error" not in run(_request(east.url, "$JS.API.STREAM.CREATE.OTHER", other))
    run(_publish(east.url, "other.new", 10))
    metadata = _info(west.url, "ORDERS")["config"]["metadata"]
    assert "error" not in run(_request(west.url, "$JS.API.STREAM.DELETE.ORDERS"))
    made = {
        "name": "ORDERS",
        "metadata": metadata,  # the owner marker copied: ours, as far as it says
        "mirror": {"name": "OTHER", "external": {"api": "$JS.east.API"}},
    }
    assert "error" not in run(_request(west.url, "$JS.API.STREAM.CREATE.ORDERS", made))
    wait_for(lambda: last_seq(west) == 10)
    east.kill()
    result = reconcile(*FAILOVER, "--unplanned", cwd=root)
    assert result.returncode == 1, said(result)
    assert "OTHER" in result.stderr and "nothing was changed" in result.stderr
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "OTHER"
    assert last_seq(west) == 10 and consumers(west) == []


def test_ctrl_c_between_the_fence_and_the_promotion_gives_the_origin_its_writes_back(
    ready: Ready,
) -> None:
    """Hole: Ctrl-C while east was fenced and west not yet promoted printed "aborted"
    and left neither side taking writes, without a word. Now east gets its subjects back
    (unless west was promoted after all) and says so."""
    east, west, root = ready
    pause = {"RECONCILE_FAILOVER_PAUSE": "fenced"}
    term = Terminal("failover", "--from", "east", "--to", "west", "--yes", cwd=root, env=pause)
    wait_for(lambda: recorded_phase(west) == "fenced", timeout=60)
    assert is_fenced(east)
    term.type(b"\x03")
    code = term.finish()
    assert code == 130, term.text
    assert "Traceback" not in term.text
    assert not is_fenced(east), term.text
    assert "east takes writes again" in term.text
    # what is left, and how to see each pair (it said only "aborted")
    assert "interrupted during the failover" in term.text
    assert "failover --check --from east --to west" in term.text
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    run(_publish(east.url, "orders.new", 1))
    assert last_seq(east) == 51


def test_a_message_deleted_from_the_mirror_is_never_failed_over_without(ready: Ready) -> None:
    """Hole: a message of the mirror deleted by another client (STREAM.MSG.DELETE): the
    mirror still reached east's last sequence, was promoted, and the verify only said the
    lower count: acknowledged message 30 was on no promoted side. Now every sequence east
    holds must be on the mirror: refused before anything changes, naming it."""
    _east, west, _root = ready
    gone = run(_request(west.url, "$JS.API.STREAM.MSG.DELETE.ORDERS", {"seq": 30}))
    assert gone.get("success"), gone
    refused_untouched(ready, "30")


def test_a_consumer_someone_made_after_the_promotion_is_not_taken_for_the_failovers(
    ready: Ready,
) -> None:
    """Hole: killed right after the promotion; someone made ``shipper`` on the promoted
    west (delivering only new messages, no owner marker); the re-run kept it as its own
    and reported done: messages 21..50, unacknowledged by east's consumer, skipped.
    A declared consumer on the standby must carry this project's owner marker."""
    east, west, root = ready
    _killed_at(root, "promoted", west)
    made = {"durable_name": "shipper", "ack_policy": "explicit", "deliver_policy": "new"}
    body = {"stream_name": "ORDERS", "config": made, "action": "create"}
    assert "error" not in run(_request(west.url, "$JS.API.CONSUMER.CREATE.ORDERS.shipper", body))
    east_before, west_before = counted(east), counted(west)
    again = reconcile(*FAILOVER, cwd=root)
    assert again.returncode == 1, said(again)
    assert "shipper" in again.stderr and "nothing was changed" in again.stderr
    assert counted(east) == east_before and counted(west) == west_before
    info = run(_request(west.url, "$JS.API.CONSUMER.INFO.ORDERS.shipper"))
    assert info["config"]["deliver_policy"] == "new"  # theirs, untouched
