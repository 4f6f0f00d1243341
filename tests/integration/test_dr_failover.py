"""``reconcile failover`` on two JetStream domains joined by a leafnode (docs/dr.md), run
as a user runs it (a subprocess), with publishers retrying until acknowledged throughout:
every acknowledged message ends on the promoted side exactly once, and the consumers go
on from where the origin's had acknowledged, with no gap. Killed (-9) at each step, a
re-run finishes."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import interrupted_at_the_lock, reconcile, started
from servers import NatsServer, joined_domains, run, unused_port
from test_dr_standby import ORDERS, applied, dr_project, last_seq, link, wait_for
from test_lifecycle import _info, _publish, _request

from reconciler.execution import lock
from reconciler.execution.lock import Holder
from reconciler.jetstream import ConnectionOptions, open_client

#: After each step (and between a consumer's creation, paused, and its move to the ack floor)
PHASES = ("fenced", "converged", "promoted", "consumer paused", "consumers")


class Publishers:
    """Publishers on both sides, each retrying a message until it is acknowledged
    (``Nats-Msg-Id`` set); ``acked`` holds every acknowledged payload."""

    def __init__(self, urls: list[str], subject: str = "orders.new") -> None:
        self.urls = urls
        self.subject = subject
        self.acked: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._all()), daemon=True)

    def __enter__(self) -> Publishers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)

    async def _all(self) -> None:
        await asyncio.gather(*(self._one(n, url) for n, url in enumerate(self.urls)))

    async def _one(self, number: int, url: str) -> None:
        nc = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
        try:
            index = 0
            while not self.stopping.is_set():
                payload = f"p{number}-{index}"
                while not await self._acked(nc, payload):
                    await asyncio.sleep(0.01)
                self.acked.append(payload)
                index += 1
        finally:
            await nc.close()

    async def _acked(self, nc: Any, payload: str) -> bool:
        try:
            reply = await nc.request(
                self.subject, payload.encode(), timeout=1, headers={"Nats-Msg-Id": payload}
            )
        except Exception:  # no responders while fenced, a timeout: send it again
            return False
        answer = json.loads(reply.data or b"{}")
        return "error" not in answer and answer.get("stream") == "ORDERS"


def _url(target: NatsServer | str) -> str:
    return target if isinstance(target, str) else target.url


def stored(target: NatsServer | str, stream: str = "ORDERS") -> list[str]:
    """Every payload the stream holds, in sequence order (``target``: a server or a URL)."""

    async def read() -> list[str]:
        nc = await nats.connect(_url(target))
        try:
            reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=10)
            info = json.loads(reply.data)
            last = int(info["state"]["last_seq"])

            async def one(seq: int) -> str | None:
                body = json.dumps({"seq": seq}).encode()
                subject = f"$JS.API.STREAM.MSG.GET.{stream}"
                answer = json.loads((await nc.request(subject, body, timeout=10)).data)
                if "message" not in answer:
                    return None
                return base64.b64decode(answer["message"].get("data") or "").decode()

            found: list[str | None] = []
            for start in range(1, last + 1, 100):
                chunk = range(start, min(start + 100, last + 1))
                found += await asyncio.gather(*(one(seq) for seq in chunk))
            return [payload for payload in found if payload is not None]
        finally:
            await nc.close()

    return run(read())


def fetch(target: NatsServer | str, consumer: str, count: int, *, ack: bool) -> list[int]:
    """Pull ``count`` messages of ``consumer`` on ORDERS: their stream sequences."""

    async def pull() -> list[int]:
        nc = await nats.connect(_url(target))
        try:
            js = nc.jetstream()
            sub = await js.pull_subscribe_bind(durable=consumer, stream="ORDERS")
            messages = await sub.fetch(count, timeout=5)
            if ack:
                for message in messages:
                    await message.ack_sync()
            return [m.metadata.sequence.stream for m in messages]
        finally:
            await nc.close()

    return run(pull())


def is_fenced(server: NatsServer) -> bool:
    return _info(server.url, "ORDERS")["config"]["subjects"] == ["_reconcile.fenced.ORDERS"]


def recorded_phase(server: NatsServer) -> str | None:
    body = {"last_by_subj": "$KV.RECONCILE_LOCKS.failover.ORDERS"}
    reply = run(_request(server.url, "$JS.API.STREAM.MSG.GET.KV_RECONCILE_LOCKS", body))
    if "message" not in reply:
        return None
    return str(json.loads(base64.b64decode(reply["message"]["data"]))["phase"])


@pytest.fixture
def ready(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> tuple[NatsServer, NatsServer, Path]:
    """East primary with 50 messages, 20 acknowledged by its consumer; west's mirror."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 50))
    assert fetch(east, "shipper", 20, ack=True) == list(range(1, 21))
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 50)
    return east, west, root


def check_after(east: NatsServer, west: NatsServer, acked: list[str], before: int) -> None:
    """Every acknowledged message once on the promoted side; the origin fenced and no
    longer written; the consumer goes on from the origin's ack floor + 1, no gap."""
    payloads = stored(west)
    assert not (set(acked) - set(payloads)), "an acknowledged message is missing"
    ours = [payload for payload in payloads if payload.startswith("p")]  # the publishers'
    assert len(ours) == len(set(ours)), "a message is stored twice"
    assert _info(west.url, "ORDERS")["config"].get("mirror") is None
    assert is_fenced(east)
    fenced_last = last_seq(east)
    run(_publish(east.url, "orders.new", 3))  # through east's clients: stored on west
    assert last_seq(east) == fenced_last
    total = last_seq(west)
    sequences = fetch(west, "shipper", total, ack=False)
    assert sequences[0] == 21  # the origin's ack floor was 20: nothing skipped
    assert sequences == list(range(21, 21 + len(sequences)))
    assert before <= len(payloads)


def test_a_planned_failover_loses_no_acknowledged_message(
    ready: tuple[NatsServer, NatsServer, Path],
) -> None:
    east, west, root = ready
    with Publishers([east.url, west.url]) as publishers:
        time.sleep(0.5)
        result = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
        assert result.returncode == 0, result.stdout + result.stderr
        time.sleep(0.5)
    assert "fenced" in result.stderr + result.stdout
    assert len(publishers.acked) > 10
    check_after(east, west, publishers.acked, 50)
    # a re-run verifies again (test_dr_leftovers20.py: a failed verify is never taken for
    # a passed one), and changes nothing
    again = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "verify again" in again.stdout and "Failover complete" in again.stdout
    assert "east fenced:" not in again.stderr and "west promoted" not in again.stderr


def _killed_at(root: Path, phase: str, west: NatsServer) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}
    process = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "failover", "--from", "east", "--to", "west", "--yes"],
        cwd=root,
        env=environ | {"RECONCILE_FAILOVER_PAUSE": phase},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: recorded_phase(west) == phase, timeout=60)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()


@pytest.mark.slow  # a fault run (a kill at each step): .ci/run's second stage
@pytest.mark.parametrize("phase", PHASES)
def test_a_failover_killed_at_each_step_is_finished_by_a_rerun(
    ready: tuple[NatsServer, NatsServer, Path], phase: str
) -> None:
    east, west, root = ready
    with Publishers([east.url, west.url]) as publishers:
        time.sleep(0.3)
        _killed_at(root, phase, west)
        result = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
        assert result.returncode == 0, result.stdout + result.stderr
        time.sleep(0.5)
    check_after(east, west, publishers.acked, 50)


def test_a_mirror_that_cannot_catch_up_is_refused_and_the_origin_takes_writes_again(
    ready: tuple[NatsServer, NatsServer, Path],
) -> None:
    east, west, root = ready
    leafnodes = dict(west.settings["leafnodes"])
    link(west, up=False, leafnodes=leafnodes)
    applied(root, "west")  # its restart dropped the mirror's window (docs/dr.md)
    run(_publish(east.url, "orders.new", 7))  # the mirror cannot get these

    check = reconcile("failover", "--from", "east", "--to", "west", "--check", cwd=root)
    assert check.returncode == 2, check.stdout + check.stderr
    assert "lag 7" in check.stdout  # 57 - 50, each read on its own side (the mirror says 0)
    assert "no contact with the origin" in check.stdout

    result = reconcile(
        "failover", "--from", "east", "--to", "west", "--wait", "2s", "--yes", cwd=root
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "lag 7" in result.stderr
    assert _info(east.url, "ORDERS")["config"]["subjects"] == ["orders.>"]  # unfenced
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    run(_publish(east.url, "orders.new", 1))
    assert last_seq(east) == 58

    link(west, up=True, leafnodes=leafnodes)
    applied(root, "west")
    with Publishers([east.url]) as publishers:
        time.sleep(0.3)
        result = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
        assert result.returncode == 0, result.stdout + result.stderr
        time.sleep(0.5)
    check_after(east, west, publishers.acked, 58)


def test_a_standby_server_before_2_12_is_refused_with_its_version(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    east = server_factory(name="east", domain="east")
    west = server_factory(name="west", domain="west", version="2.11.11")
    root = dr_project(tmp_path, east, west)
    applied(root, "east")
    result = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    assert result.returncode == 1
    assert "2.11.11" in result.stderr and "2.12" in result.stderr
    assert _info(east.url, "ORDERS")["config"]["subjects"] == ["orders.>"]  # not fenced


def test_nothing_undoes_a_failover_and_a_failback_is_a_full_copy(
    ready: tuple[NatsServer, NatsServer, Path],
) -> None:
    east, west, root = ready
    result = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    run(_publish(west.url, "orders.new", 5))  # the promoted side takes writes: 55

    # the specs still say east is primary: neither side may undo the failover
    unfence = reconcile("apply", "--env", "east", "--yes", "--allow-replace", cwd=root)
    assert unfence.returncode == 1 and "fenced by a failover" in unfence.stderr + unfence.stdout
    assert is_fenced(east)
    back = reconcile("apply", "--env", "west", "--yes", "--allow-replace", cwd=root)
    assert back.returncode == 1 and "takes the writes" in back.stderr + back.stdout
    assert last_seq(west) == 55 and _info(west.url, "ORDERS")["config"].get("mirror") is None

    # the roles swapped in the spec: west converges as is, east becomes its mirror by a
    # replace (the server cannot turn a stream into a mirror: a full copy)
    specs = root / "specs" / "orders.yaml"
    text = specs.read_text(encoding="utf-8")
    swapped = text.replace("primary: east", "primary: WEST").replace(
        "environment: west", "environment: east"
    )
    specs.write_text(swapped.replace("WEST", "west"), encoding="utf-8")
    plan = reconcile("plan", "--env", "west", "--detailed-exitcode", cwd=root)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    refused = reconcile("apply", "--env", "east", "--yes", cwd=root)
    assert refused.returncode == 1  # a replace: --allow-replace
    applied_back = reconcile("apply", "--env", "east", "--yes", "--allow-replace", cwd=root)
    assert applied_back.returncode == 0, applied_back.stdout + applied_back.stderr
    wait_for(lambda: last_seq(east) == 55)
    assert fetch(west, "shipper", 10, ack=True) == list(range(21, 31))

    with Publishers([west.url, east.url]) as publishers:
        time.sleep(0.3)
        result = reconcile("failover", "--from", "west", "--to", "east", "--yes", cwd=root)
        assert result.returncode == 0, result.stdout + result.stderr
        time.sleep(0.5)
    payloads = stored(east)
    assert not (set(publishers.acked) - set(payloads))
    ours = [p for p in payloads if p.startswith("p")]
    assert len(ours) == len(set(ours))
    assert fetch(east, "shipper", 1, ack=False) == [31]  # west's ack floor was 30


def test_an_unplanned_failover_needs_its_flag_and_states_the_possible_loss(
    ready: tuple[NatsServer, NatsServer, Path],
) -> None:
    east, west, root = ready
    east.kill()
    refused = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    assert refused.returncode == 1 and "--unplanned" in refused.stderr
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"

    result = reconcile(
        "failover", "--from", "east", "--to", "west", "--unplanned", "--yes", cwd=root
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "possible loss" in result.stdout and "sequence 50" in result.stdout
    assert _info(west.url, "ORDERS")["config"].get("mirror") is None
    assert fetch(west, "shipper", 1, ack=False) == [1]  # no ack floor known: from the first

    east.start()  # the old origin is back, its subjects with it: the re-run fences it
    wait_for(lambda: bool(west.monitor("leafz").get("leafnodes")))
    again = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    assert again.returncode == 0, again.stdout + again.stderr
    assert is_fenced(east)


def test_on_2_12_consumers_start_by_sequence_at_the_ack_floor(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    east, west = joined_domains(server_factory, version="2.12.8")  # no CONSUMER.RESET
    root = dr_project(tmp_path, east, west)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 30))
    assert fetch(east, "shipper", 12, ack=True) == list(range(1, 13))
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 30)
    result = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    consumer = run(_request(west.url, "$JS.API.CONSUMER.INFO.ORDERS.shipper"))["config"]
    assert consumer["deliver_policy"] == "by_start_sequence" and consumer["opt_start_seq"] == 13
    assert fetch(west, "shipper", 18, ack=False) == list(range(13, 31))


def _sent(url: str, payload: str) -> dict[str, Any]:
    """``payload`` published on orders.new with ``Nats-Msg-Id: payload``: the answer."""

    async def send() -> dict[str, Any]:
        nc = await nats.connect(url)
        try:
            headers = {"Nats-Msg-Id": payload}
            reply = await nc.request("orders.new", payload.encode(), timeout=5, headers=headers)
            answer: dict[str, Any] = json.loads(reply.data)
            return answer
        finally:
            await nc.close()

    return run(send())


def test_a_retry_whose_acknowledgement_was_lost_at_the_fence_is_stored_once(
    ready: tuple[NatsServer, NatsServer, Path],
) -> None:
    """A publisher's message stored by east, its acknowledgement lost just before the
    fence, is sent again with the same ``Nats-Msg-Id``: the promoted stream answers it as
    a duplicate (the mirror carries the origin's duplicate_window, so it knows the ids
    of the messages it mirrored: docs/jetstream-notes.md) and holds it once."""
    east, west, root = ready
    first = _sent(east.url, "lost-ack")  # stored at 51; say its answer never arrived
    assert first["seq"] == 51
    wait_for(lambda: last_seq(west) == 51)
    result = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    again = _sent(west.url, "lost-ack")  # the retry reaches the promoted side
    assert again.get("duplicate") is True and again["seq"] == 51, again
    assert stored(west).count("lost-ack") == 1
    assert last_seq(west) == 51


def test_a_restart_of_the_standby_drops_the_mirrors_window_and_apply_gives_it_back(
    ready: tuple[NatsServer, NatsServer, Path],
) -> None:
    """A restart of west's server drops its mirror's duplicate_window (the config it
    reports has none: every matrix server, docs/jetstream-notes.md), so west's plan is no
    longer empty: it shows the window's update, and `apply --env west` (or the agent's
    heal) puts it back. A message mirrored after that, its acknowledgement lost at the
    fence, is stored once (docs/dr.md, Retries and exactly once)."""
    east, west, root = ready
    west.restart()
    wait_for(lambda: bool(west.monitor("leafz").get("leafnodes")))
    assert not _info(west.url, "ORDERS")["config"].get("duplicate_window")
    plan = reconcile("plan", "--env", "west", "--detailed-exitcode", cwd=root)
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "duplicate_window" in plan.stdout
    applied(root, "west")
    assert _info(west.url, "ORDERS")["config"].get("duplicate_window")
    assert _sent(east.url, "lost-ack")["seq"] == 51  # its answer never arrived, say
    wait_for(lambda: last_seq(west) == 51)
    result = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    again = _sent(west.url, "lost-ack")
    assert again.get("duplicate") is True and again["seq"] == 51, again
    assert stored(west).count("lost-ack") == 1


def test_a_window_given_by_an_update_knows_only_the_ids_mirrored_after_it(
    ready: tuple[NatsServer, NatsServer, Path],
) -> None:
    """The server fact a failover's wait rests on (docs/jetstream-notes.md): a mirror
    without a window records no id, and an update giving it one records only the ids of
    the messages mirrored after it. Promoted, a retry of the one mirrored before is
    stored again, a retry of the one mirrored after is a duplicate."""
    east, west, root = ready

    def windowed(nanoseconds: int) -> None:
        config = dict(_info(west.url, "ORDERS")["config"])
        config["duplicate_window"] = nanoseconds
        answer = run(_request(west.url, "$JS.API.STREAM.UPDATE.ORDERS", config))
        assert "error" not in answer, answer

    windowed(0)  # as a restart of west's server leaves it
    assert _sent(east.url, "before")["seq"] == 51
    wait_for(lambda: last_seq(west) == 51)
    windowed(120_000_000_000)
    assert _sent(east.url, "after")["seq"] == 52
    wait_for(lambda: last_seq(west) == 52)
    result = reconcile("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _sent(west.url, "after").get("duplicate") is True
    assert _sent(west.url, "before").get("duplicate") is None  # stored again
    assert stored(west).count("before") == 2 and stored(west).count("after") == 1


#: ORDERS with a window of 24 s: a failover's wait for the window is that long at most.
ORDERS_24S = ORDERS.replace("max_age: 7d\n", "max_age: 7d\nduplicate_window: 24s\n")
WINDOW = 24_000_000_000


def _restarted_standby(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> tuple[NatsServer, NatsServer, Path]:
    """East with 50 messages declaring a 24 s window, west's mirror of them, then west's
    server restarted: its mirror has no window any more (docs/jetstream-notes.md)."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west, ORDERS_24S)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 50))
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 50)
    assert _info(west.url, "ORDERS")["config"]["duplicate_window"] == WINDOW
    west.restart()
    wait_for(lambda: bool(west.monitor("leafz").get("leafnodes")))
    assert not _info(west.url, "ORDERS")["config"].get("duplicate_window")
    return east, west, root


def test_a_single_standby_server_naming_a_cluster_keeps_its_mirrors_window(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """West is one server whose config names a cluster (``cluster {name}``, no routes):
    its INFO reads as a cluster advertising no member (``no_advertise``), and the rule
    that a clustered mirror compares no window made apply create the mirror without
    one (the plan said ``duplicate_window: 0s``), which a single server keeps: every
    failover then waited a whole window, an unplanned one promoted a mirror knowing no
    ``Nats-Msg-Id``, and a restart's drop was never shown. The mirror gets its window,
    and the plan shows its drop after a restart (docs/dr.md)."""
    port = unused_port()
    leafnodes = {"host": "127.0.0.1", "port": port}
    east = server_factory(name="east", domain="east", config={"leafnodes": leafnodes})
    remote = {"remotes": [{"url": f"nats-leaf://127.0.0.1:{port}"}]}
    named = {"leafnodes": remote, "cluster": {"name": "west-site"}}
    west = server_factory(name="west", domain="west", config=named)
    wait_for(lambda: bool(west.monitor("leafz").get("leafnodes")))
    root = dr_project(tmp_path, east, west, ORDERS_24S)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 5))
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 5)
    assert _info(west.url, "ORDERS")["config"].get("duplicate_window") == WINDOW
    west.restart()
    wait_for(lambda: bool(west.monitor("leafz").get("leafnodes")))
    plan = reconcile("plan", "--env", "west", cwd=root)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "duplicate_window: 0s → 24s" in plan.stdout, plan.stdout


@pytest.mark.slow  # waits for a 24 s window by design: .ci/run's second stage
def test_a_failover_gives_a_restarted_standby_its_window_back_before_the_fence(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """After a restart of west's server (its mirror's window dropped) and no apply, the
    failover gives the mirror its window back before the fence, shown in its plan, and
    fences only once the messages mirrored without it are out of it (the origin takes
    the writes meanwhile). A message east stores then, its acknowledgement lost at the
    fence, is sent again with the same ``Nats-Msg-Id`` within the window: the promoted
    stream answers it as a duplicate and holds it once. Before, the mirror was promoted
    knowing no id, and the retry was stored a second time."""
    east, west, root = _restarted_standby(server_factory, tmp_path)
    # a message mirrored just now: the failover waits for it to be out of the window, a
    # wait long enough on a loaded machine for the message below to be sent before the
    # fence, and retried after the promotion within the window (10 s and more each way)
    assert _sent(east.url, "fresh")["seq"] == 51
    wait_for(lambda: last_seq(west) == 51)
    time.sleep(10)
    process = started("failover", "--from", "east", "--to", "west", "--yes", cwd=root)

    def restored() -> bool:
        return _info(west.url, "ORDERS")["config"].get("duplicate_window") == WINDOW

    try:
        wait_for(lambda: restored() or process.poll() is not None)
        assert restored(), "the failover did not give the mirror its window back"
        assert not is_fenced(east)  # the wait before the fence: east takes the writes
        first = _sent(east.url, "lost-ack")  # its answer never arrived, say
        assert first["seq"] == 52
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, out + err
    assert "restore the mirror's duplicate_window 0s -> 24s" in out
    again = _sent(west.url, "lost-ack")  # the retry reaches the promoted side
    assert again.get("duplicate") is True and again["seq"] == 52, again
    assert stored(west).count("lost-ack") == 1
    assert last_seq(west) == 52


def test_ctrl_c_while_a_failover_waits_for_the_window_fences_nothing_and_says_when_to_run_again(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Ctrl-C while the failover waits for the mirror's restored window: exit 130, east
    not fenced and west still its mirror, every message where it was. A run again
    before the window has passed would not wait (the window is there, nothing says since
    when): the message now says to run it once the window has passed."""
    east, west, root = _restarted_standby(server_factory, tmp_path)
    assert _sent(east.url, "fresh")["seq"] == 51
    wait_for(lambda: last_seq(west) == 51)
    process = started("failover", "--from", "east", "--to", "west", "--yes", cwd=root)
    try:
        wait_for(
            lambda: (
                _info(west.url, "ORDERS")["config"].get("duplicate_window") == WINDOW
                or process.poll() is not None
            )
        )
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, out + err
    assert "window has passed" in err and "Traceback" not in err, err
    assert not is_fenced(east)
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    assert last_seq(east) == last_seq(west) == 51


def test_an_unplanned_failover_gives_a_restarted_standby_its_window_at_the_promotion(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """With east lost, nothing more comes to the mirror: the promotion itself gives it
    the window, so the promoted stream detects duplicates among its own writes, and the
    plan says the ids of the messages it mirrored without one are not known. Before, it
    was promoted with none: a publisher's retry on west was stored twice."""
    east, west, root = _restarted_standby(server_factory, tmp_path)
    east.kill()
    result = reconcile(
        "failover", "--from", "east", "--to", "west", "--unplanned", "--yes", cwd=root
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert _sent(west.url, "new-on-west")["seq"] == 51
    again = _sent(west.url, "new-on-west")  # its answer lost, say: sent again
    assert again.get("duplicate") is True and again["seq"] == 51, again
    assert stored(west).count("new-on-west") == 1
    assert _info(west.url, "ORDERS")["config"]["duplicate_window"] == WINDOW
    assert "duplicate_window 0s -> 24s" in result.stdout
    assert "knows no Nats-Msg-Id" in result.stdout


def test_ctrl_c_while_a_failover_waits_for_a_lock_says_nothing_was_changed(
    ready: tuple[NatsServer, NatsServer, Path],
) -> None:
    """Ctrl-C while `reconcile failover` waited for the standby's apply lock (held by
    another run) exited saying only `aborted`: not whether a stream had been fenced.
    Now it exits 130 saying nothing was changed, and nothing was: the origin takes
    writes, the mirror is still a mirror, every message where it was."""
    east, west, root = ready

    async def locked() -> None:
        async with open_client(ConnectionOptions(servers=west.url)) as client:
            await lock.acquire(
                client, Holder("someone", "elsewhere", os.getpid(), "run"), timeout=0
            )

    run(locked())
    done = interrupted_at_the_lock(
        "failover", "--from", "east", "--to", "west", "--yes", "--lock-timeout", "600", cwd=root
    )
    assert done.returncode == 130, done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert said[-1] == "interrupted before the failover began: nothing was changed", said
    assert not is_fenced(east)
    assert _info(west.url, "ORDERS")["config"].get("mirror") is not None
    assert last_seq(east) == 50 and last_seq(west) == 50
