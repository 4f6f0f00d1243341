"""Disaster recovery's leftovers (noticed by the DR attack pass, left open): a restore
into the standby environment, a rollback with the standby unreachable, the verify's
probe, a consumer made again on the origin during the failover. Real nats-server
processes (two JetStream domains joined by a leafnode); both sides counted with a raw
client before and after. Each test names the hole it closes."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is each test's argument)
from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, joined_domains, options, run
from test_dr_attacks import counted, said, updated
from test_dr_failover import _killed_at, fetch, is_fenced, ready  # noqa: F401 (ready: a fixture)
from test_dr_rules import FAILOVER
from test_dr_standby import ORDERS, applied, consumers, dr_project, last_seq, wait_for
from test_lifecycle import _info, _publish, _request
from test_restore_rules import _user_streams

from reconciler.errors import ReconcileError
from reconciler.execution.failover import FailoverRequest, fail_over, failover_request
from reconciler.execution.failover_steps import PROBE_HEADER, probe
from reconciler.execution.stages import Observer, PlanRequest, environment_target
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.specs.project import load_project

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

Ready = tuple[NatsServer, NatsServer, Path]


def east_backed_up(
    server_factory: Callable[..., NatsServer], tmp_path: Path, specs: str = ORDERS
) -> tuple[NatsServer, NatsServer, Path, Path]:
    """Two JetStream domains joined by a leafnode, the DR project declaring ``specs``
    applied in east, 30 messages published there and east's backup taken: east, west,
    the project's root and the backup folder."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west, specs)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 30))
    out = tmp_path / "backup"
    taken = reconcile("backup", "--env", "east", "--out", str(out), cwd=root)
    assert taken.returncode == 0, said(taken)
    return east, west, root, out


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
    east, west, root, out = east_backed_up(server_factory, tmp_path)
    east_before = counted(east)

    result = reconcile("restore", str(out), "--env", "west", "--yes", cwd=root)
    assert result.returncode == 1, said(result)
    assert "orders.yaml:" in result.stderr and "--env east" in result.stderr, said(result)
    assert "prevent_destroy" not in result.stderr, said(result)  # no lifecycle said so
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


def _forged_mirror(out: Path, api: str) -> None:
    """East's backup of ORDERS rewritten by hand as a mirror of an ORDERS reached through
    ``api`` (another domain's), in its manifest and its ``backup.json`` alike."""
    manifest = json.loads((out / "manifest.json").read_text())
    metadata = out / "ORDERS" / "backup.json"
    stream = json.loads(metadata.read_text())
    for config in (manifest["streams"][0]["config"], stream["config"]):
        config.pop("subjects", None)
        config["mirror"] = {"name": "ORDERS", "external": {"api": api}}
    metadata.write_text(json.dumps(stream))
    body = metadata.read_bytes()
    manifest["streams"][0]["files"]["backup.json"] = {
        "sha256": hashlib.sha256(body).hexdigest(),
        "size": len(body),
    }
    (out / "manifest.json").write_text(json.dumps(manifest))


def test_a_backup_made_a_mirror_of_another_domains_orders_is_never_restored_as_the_standby(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole (left by the last attack pass): the standby rule took any mirror of a stream
    named as the spec's, so a backup rewritten as a mirror of ORDERS in a domain someone
    else runs, restored with ``--env west``, made west's standby copy that domain's
    stream instead of east's. West's stream must now be the mirror its spec declares
    (the origin's name, reached through east's API, all of it:
    ``model.standby.mirrors_the_origin``): refused, nothing made, neither side changed,
    and the backup's own words are not said."""
    east, west, root, out = east_backed_up(server_factory, tmp_path)
    _forged_mirror(out, "$JS.elsewhere.API")
    east_before = counted(east)

    result = reconcile("restore", str(out), "--env", "west", "--yes", cwd=root)
    assert result.returncode == 1, said(result)
    assert "orders.yaml:" in result.stderr and "elsewhere" not in said(result), said(result)
    assert run(_user_streams(west)) == []  # nothing restored in west
    assert counted(east) == east_before

    applied(root, "west")  # the mirror the spec declares: east's, copied whole
    wait_for(lambda: last_seq(west) == 30)
    assert _info(west.url, "ORDERS")["config"]["mirror"]["external"]["api"] == "$JS.east.API"


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
    assert "nats stream edit -f '--subjects=orders.>' -- ORDERS" in rolled.stderr
    assert is_fenced(east) and counted(east) == east_before

    west.start()
    again = reconcile(*FAILOVER, "--rollback", cwd=root)
    assert again.returncode == 0, said(again)
    assert not is_fenced(east)
    run(_publish(east.url, "orders.new", 2))  # east acknowledges writes again
    assert counted(east)[0] == 52
    wait_for(lambda: counted(west) == counted(east))  # west mirrors them: still a mirror
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"


FORGED = {"stream": "ORDERS", "error": {"code": 503, "err_code": 10077, "description": "x"}}


def test_a_forged_responder_naming_the_stream_never_passes_the_verifys_probe(
    server_factory: Callable[..., NatsServer],
) -> None:
    """Hole: the verify's probe (a publish on the stream's subjects that the stream must
    refuse) took any reply naming the stream for its answer: a responder subscribed on
    orders.> answering with an error of its own (here, with no stream taking the
    subject at all) made the failover's verify pass. Only the stream's own refusal of the
    probe (err_code 10071, nothing stored) passes now; a core subscriber of the subject
    still receives the probe, marked by its header, and nothing is stored."""
    server = server_factory()
    other = {"name": "ORDERS", "subjects": ["elsewhere.>"]}
    assert "error" not in run(_request(server.url, "$JS.API.STREAM.CREATE.ORDERS", other))

    async def probed(*, forge: bool) -> tuple[str, list[dict[str, str]]]:
        nc = await nats.connect(server.url)
        heard: list[dict[str, str]] = []

        async def forged(msg: Any) -> None:
            heard.append(dict(msg.headers or {}))
            await msg.respond(json.dumps(FORGED).encode())

        async def listening(msg: Any) -> None:
            heard.append(dict(msg.headers or {}))

        sub = await nc.subscribe("orders.>", cb=forged if forge else listening)
        await nc.flush()
        try:
            async with open_client(options(server)) as client:
                await probe(client, "ORDERS", ["orders.>"])
            return "passed", heard
        except ReconcileError as err:
            return str(err), heard
        finally:
            # the probe reaches this subscriber on its own connection, maybe after the
            # stream's answer: waited for (it failed once under load, heard empty)
            for _ in range(500):
                if heard:
                    break
                await asyncio.sleep(0.01)
            await sub.unsubscribe()
            await nc.close()

    said_, heard = run(probed(forge=True))
    assert said_ != "passed" and len(heard) == 1, said_
    assert last_seq(server) == 0

    updated(server, {"subjects": ["orders.>"]})  # the stream takes the subject: it answers
    said_, heard = run(probed(forge=False))
    assert said_ == "passed", said_
    assert last_seq(server) == 0  # the probe stored nothing
    assert [PROBE_HEADER in headers for headers in heard] == [True]  # marked for them


def _east_to_west(root: Path) -> FailoverRequest:
    """The project's failover from east to west, approved, as a library caller makes it."""
    project = load_project(root / "reconcile.yaml")
    east, west = (
        PlanRequest.for_target(environment_target(project, name, ConnectionOptions(), "shop"))
        for name in ("east", "west")
    )
    return failover_request(east, west, approved=True)


class _MadeAgainAtThePromotion(Observer):
    """Hears the failover; when it says the standby is promoted (just before the
    consumers are created), another client deletes east's ``shipper`` and makes it again
    with no owner marker, delivering only new messages (its ack floor: 50)."""

    def __init__(self, east: NatsServer) -> None:
        self.east = east
        self.heard: list[str] = []

    def notice(self, message: str) -> None:
        self.heard.append(message)
        if "promoted" in message and "west" in message:
            worker = threading.Thread(target=lambda: run(self._made_again()))
            worker.start()  # its own event loop; the failover's waits meanwhile
            worker.join()

    async def _made_again(self) -> None:
        await _request(self.east.url, "$JS.API.CONSUMER.DELETE.ORDERS.shipper")
        made = {"durable_name": "shipper", "ack_policy": "explicit", "deliver_policy": "new"}
        body = {"stream_name": "ORDERS", "config": made, "action": "create"}
        reply = await _request(self.east.url, "$JS.API.CONSUMER.CREATE.ORDERS.shipper", body)
        assert "error" not in reply, reply


def test_a_consumer_made_again_on_the_origin_during_the_failover_never_decides_a_start(
    ready: Ready,
) -> None:
    """Hole: the origin's consumers were judged (this project's owner marker) before the
    fence, not when each standby consumer was created. East's ``shipper`` (ack floor 20)
    made again by someone in between (no marker, delivering only new messages: ack floor
    50) decided west's start: 51, messages 21..50 skipped for good. The owner rule is
    now applied again just before each create: west's ``shipper`` is not created, the
    pair is reported unfinished, naming it, and nothing is skipped."""
    east, west, root = ready
    request = _east_to_west(root)
    observer = _MadeAgainAtThePromotion(east)
    result = run(fail_over(request, observer))

    assert result.done == () and len(result.problems) == 1, result
    assert "shipper" in result.problems[0], result.problems
    assert consumers(west) == []  # no consumer started at someone else's position
    assert is_fenced(east) and _info(west.url, "ORDERS")["config"].get("mirror") is None
    assert counted(west) == counted(east) and counted(west)[0] == 50

    run(_request(east.url, "$JS.API.CONSUMER.DELETE.ORDERS.shipper"))  # the remedy it names
    again = run(fail_over(request))
    assert again.done == ("ORDERS",) and again.problems == (), again
    assert fetch(west, "shipper", 50, ack=False) == list(range(1, 51))  # nothing skipped


class _LegacyAtTheFence(Observer):
    """Hears the failover as a library caller's listener that shows nothing; when east
    is fenced, another client makes a stream on orders.legacy.> in west, so the
    promotion that follows is refused (subjects overlap) with east fenced."""

    def __init__(self, west: NatsServer) -> None:
        self.west = west
        self.heard: list[str] = []

    def notice(self, message: str) -> None:
        self.heard.append(message)
        if "east fenced" in message:
            legacy = {"name": "LEGACY", "subjects": ["orders.legacy.>"]}
            subject = "$JS.API.STREAM.CREATE.LEGACY"
            worker = threading.Thread(target=lambda: run(_request(self.west.url, subject, legacy)))
            worker.start()
            worker.join()


def test_a_partial_failover_is_reported_in_the_result_whatever_the_observer(
    ready: Ready,
) -> None:
    """Hole: ``fail_over``'s default observer (QUIET) hears nothing, and the result held
    only the server's refusal: a library caller whose pair was refused after the fence
    was not told that east had been given its subjects back (nor, on success, that fewer
    messages were promoted than east holds): that was only a remark to the observer.
    The result now keeps every remark, and the pair's problem says what east was left
    as; east takes writes again, west is still a mirror, both counted alike."""
    east, west, root = ready
    request = _east_to_west(root)
    before = counted(east), counted(west)
    observer = _LegacyAtTheFence(west)
    result = run(fail_over(request, observer))

    assert result.done == () and len(result.problems) == 1, result
    assert result.remarks == tuple(observer.heard) and len(result.remarks) >= 2
    assert not is_fenced(east) and "east" in result.problems[0]
    assert (counted(east), counted(west)) == before and consumers(west) == []
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    run(_publish(east.url, "orders.new", 1))  # east acknowledges writes again
    assert counted(east)[0] == 51


class _BrokenAtThePromotion(Observer):
    """A listener that raises when it hears west promoted: an error no check foresaw,
    raised inside the pair's steps (as a reply nobody expected, or a bug, would be)."""

    def notice(self, message: str) -> None:
        if "promoted" in message:
            raise RuntimeError("the listener broke: token=s3cr3t")


def test_an_unforeseen_error_in_a_pair_is_its_report_and_a_rerun_finishes_it(
    ready: Ready,
) -> None:
    """Hole (left by the DR leftovers pass): a pair's steps caught only ReconcileError,
    so any other error left ``fail_over`` by ``gather`` while the other pairs ran on under
    locks and clients closing: no result, no report, the origin fenced. It is now that
    pair's problem (its type and where, never its text), and a rerun finishes it."""
    east, west, root = ready
    request = _east_to_west(root)
    before = counted(east)

    result = run(fail_over(request, _BrokenAtThePromotion()))

    assert result.done == () and len(result.problems) == 1, result
    problem = result.problems[0]
    assert "ORDERS" in problem and "RuntimeError" in problem and "--check" in problem
    assert "s3cr3t" not in problem
    assert counted(east) == before  # nothing lost, whatever step it stopped at
    again = run(fail_over(request))
    assert again.done == ("ORDERS",) and again.problems == (), again
    assert is_fenced(east) and _info(west.url, "ORDERS")["config"].get("mirror") is None
    assert counted(west)[0] == before[0]
    run(_publish(west.url, "orders.new", 1))  # west takes writes
    assert counted(west)[0] == before[0] + 1
