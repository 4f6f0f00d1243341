"""The disaster-recovery paths attacked again (the fourth pass), as a hostile user and a
careless operator would: two real JetStream domains joined by a leafnode, both sides
counted with a raw client before and after. Each test names the hole it closes."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is an argument)
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, joined_domains, run
from test_dr_attacks import counted, said
from test_dr_failover import fetch, ready  # noqa: F401 (ready: a fixture)
from test_dr_leftovers import east_backed_up
from test_dr_restores import backed_up_then_failed_over
from test_dr_rules import FAILOVER
from test_dr_standby import (
    AUDIT,
    ORDERS,
    applied,
    consumers,
    dr_project,
    last_seq,
    mirrored,
    standby_stream,
    wait_for,
)
from test_lifecycle import _info, _publish, _request
from test_restore_rules import _user_streams

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

Ready = tuple[NatsServer, NatsServer, Path]


def rewritten(out: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """The backup's first stream's config edited by hand (``edit``, in place) in its
    manifest and its ``backup.json`` alike, the digest recomputed: anyone who can write
    the folder can (docs/backup.md#protect-the-folder)."""
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["streams"][0]
    metadata = out / entry["folder"] / "backup.json"
    stream = json.loads(metadata.read_text())
    for config in (entry["config"], stream["config"]):
        edit(config)
    metadata.write_text(json.dumps(stream))
    body = metadata.read_bytes()
    entry["files"]["backup.json"] = {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body)}
    (out / "manifest.json").write_text(json.dumps(manifest))


#: ORDERS without its consumer: a backup of it brings none (a consumer alone refuses
#: the standby's restore: test_a_backups_consumers_never_come_with_the_standby_mirror).
ORDERS_ONLY = ORDERS.split("---")[0]


def as_the_mirror(config: dict[str, Any]) -> None:
    """East's ORDERS made the very mirror west's spec declares."""
    config.pop("subjects", None)
    config["mirror"] = {"name": "ORDERS", "external": {"api": "$JS.east.API"}}


def test_a_mirror_republishing_onto_the_origins_subjects_is_never_restored_as_the_standby(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: the standby rule looked at a backup's ``mirror`` only. East's backup
    rewritten as the very mirror west's spec declares, plus ``republish: {src: ">",
    dest: "orders.loop.>"}`` (the server allows it on a mirror: a mirror has no subjects
    to form a cycle with), restored with ``--env west``: every message west copied was
    published again on orders.loop.*, which east's ORDERS takes over the leafnode, and
    copies again: one publish on east made 125 messages there in 3 s, without end. A
    standby must carry nothing a mirror does not (``model.standby.is_the_mirror``):
    refused, nothing made in west, east holds what it was given."""
    east, west, root, out = east_backed_up(server_factory, tmp_path, ORDERS_ONLY)

    def looping(config: dict[str, Any]) -> None:
        as_the_mirror(config)
        config["republish"] = {"src": ">", "dest": "orders.loop.>"}

    rewritten(out, looping)
    result = reconcile("restore", str(out), "--env", "west", "--yes", cwd=root)
    assert result.returncode == 1, said(result)
    assert "orders.yaml:" in result.stderr and "orders.loop" not in said(result), said(result)
    assert run(_user_streams(west)) == []  # nothing restored in west

    applied(root, "west")  # the mirror the spec declares
    run(_publish(east.url, "orders.new", 1))
    wait_for(lambda: last_seq(west) == 31)
    time.sleep(1)  # a loop would have stored more by now
    assert counted(east)[0] == 31 and last_seq(west) == 31


AUDITED = "---\n".join(
    [standby_stream('republish: {src: "orders.>", dest: "audit.orders.>"}'), AUDIT]
)


def test_the_standby_mirror_never_republishes_a_second_time_and_the_promotion_does(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: the standby's mirror carried the origin's ``republish`` (``mirror_config``
    kept it), and a mirror republishes what it copies: with east and west joined, each
    message published on east reached audit.orders.* twice, once from east's ORDERS and
    once from west's mirror: AUDIT (in east) held 10 for 5 published. The mirror now
    carries none (apply's plan drops it from one made before), and the failover's
    promotion gives it the declared one: once promoted, west republishes each of its
    writes once."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west, AUDITED)
    applied(root, "east")
    applied(root, "west")
    assert "republish" not in _info(west.url, "ORDERS")["config"]
    run(_publish(east.url, "orders.new", 5))
    wait_for(lambda: last_seq(west) == 5)
    time.sleep(1)  # a second republish, from the mirror, would be stored by now
    assert last_seq(east, "AUDIT") == 5

    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    republished = _info(west.url, "ORDERS")["config"].get("republish")
    assert republished == {"src": "orders.>", "dest": "audit.orders.>"}
    run(_publish(west.url, "orders.new", 3))  # west takes the writes and republishes them
    wait_for(lambda: last_seq(east, "AUDIT") == 8)
    time.sleep(1)
    assert last_seq(east, "AUDIT") == 8 and last_seq(west) == 8


#: ORDERS with a Cyrillic O first: it reads as ORDERS.
LOOKALIKE = "\u041eRDERS"


def a_dev_backup(server_factory: Callable[..., NatsServer], tmp_path: Path, name: str) -> Path:
    """A backup folder of another server's stream ``name`` on orders.> (4 messages)."""
    dev = server_factory()
    created = run(
        _request(dev.url, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": ["orders.>"]})
    )
    assert "error" not in created, created
    run(_publish(dev.url, "orders.new", 4))
    out = tmp_path / "dev-backup"
    taken = reconcile("backup", "--all", "--server", dev.url, "--out", str(out), cwd=tmp_path)
    assert taken.returncode == 0, said(taken)
    return out


def test_a_backups_stream_on_the_origins_subjects_is_never_restored_beside_the_standby(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: the standby rule judged only the stream named as the spec. A backup holding
    ``\\u041eRDERS`` (a Cyrillic O first: it reads as ORDERS) on orders.>, say a dev server's,
    restored with ``--env west``: west keeps only ORDERS's mirror, which has no subjects,
    so nothing overlapped, and a plain stream on orders.> was made in west: it took
    every write beside east's ORDERS (across the leafnode, a publish on east was stored
    on both sides) and the next failover's promotion was refused. A stream the restore
    would make in the standby environment on subjects of a stream it mirrors there is
    now prevented by the failover rules, naming the spec's line; nothing is made."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west)
    applied(root, "east")
    applied(root, "west")
    out = a_dev_backup(server_factory, tmp_path, LOOKALIKE)

    result = reconcile("restore", str(out), "--env", "west", "--yes", cwd=root)
    assert result.returncode == 1, said(result)
    assert "orders.yaml:" in result.stderr, said(result)
    assert run(_user_streams(west)) == ["ORDERS"]  # the mirror only
    run(_publish(east.url, "orders.new", 2))
    wait_for(lambda: last_seq(west) == 2)
    assert counted(east)[0] == 2 and run(_user_streams(west)) == ["ORDERS"]


#: An origin declaring what the server refuses on a mirror (2.12+ fields).
UNMIRRORED = 'kind: Stream\nname: AAA\nsubjects: ["aaa.>"]\n---\n' + standby_stream(
    "allow_atomic: true",
    "allow_msg_schedules: true",
    "allow_msg_ttl: true",
    "subject_delete_marker_ttl: 5m",
)


def test_an_origin_declaring_what_a_mirror_cannot_carry_gets_its_standby_and_promotion(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: the standby's mirror carried every field of its origin's spec but four, so
    an origin declaring ``allow_atomic``, ``allow_msg_schedules`` or
    ``subject_delete_marker_ttl`` (each valid) made a mirror the server refuses (errs
    10198, 10186, 10052): ``apply --env west`` created AAA, failed on ORDERS, and every
    re-run failed the same: no standby, ever. The mirror now carries none of them and
    the failover's promotion gives them back (one update)."""
    east, west, root = mirrored(server_factory, tmp_path, 5, UNMIRRORED)
    assert sorted(run(_user_streams(west))) == ["AAA", "ORDERS"]
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"

    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    promoted = _info(west.url, "ORDERS")["config"]
    assert promoted.get("mirror") is None
    assert promoted["allow_atomic"] and promoted["allow_msg_schedules"]
    assert promoted["subject_delete_marker_ttl"] == 300_000_000_000
    run(_publish(west.url, "orders.new", 2))  # west takes the writes
    assert last_seq(west) == 7 and counted(east)[0] == 5


def test_the_standbys_backup_is_never_restored_into_the_primary_as_a_mirror(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: east's ORDERS lost, the careless operator restored the backup at hand,
    west's (the mirror's), with ``--env east``: east's ORDERS was made a mirror of
    ORDERS through $JS.east.API, of itself: it took no write (publishers on orders.>
    got no answer), "Restore complete" was said and the pair's health said healthy.
    In the environment its spec calls the primary a stream is never made a mirror (the
    failover rules, ``planning.standby``): refused, naming the spec's line and the
    unplanned failover; restored with ``--server`` (no spec read), the pair's health
    now says the origin is a mirror (``failover --check`` exits 2)."""
    east, west, root = mirrored(server_factory, tmp_path, 30)
    out = tmp_path / "backup"
    taken = reconcile("backup", "--env", "west", "--out", str(out), cwd=root)
    assert taken.returncode == 0, said(taken)
    run(_request(east.url, "$JS.API.STREAM.DELETE.ORDERS", {}))  # east's ORDERS lost

    result = reconcile("restore", str(out), "--env", "east", "--yes", cwd=root)
    assert result.returncode == 1, said(result)
    assert "orders.yaml:" in result.stderr and "--unplanned" in result.stderr, said(result)
    assert run(_user_streams(east)) == []  # nothing restored in east
    assert counted(west)[0] == 30

    by_url = reconcile("restore", str(out), "--server", east.url, "--yes", cwd=tmp_path)
    assert by_url.returncode == 0, said(by_url)  # no spec read: the backup's config
    check = reconcile(*FAILOVER[:-1], "--check", cwd=root)
    assert check.returncode == 2, said(check)
    assert "the origin is a mirror" in said(check), said(check)


def test_a_mirror_of_a_part_of_the_origin_is_never_promoted_unplanned(
    ready: Ready, tmp_path: Path
) -> None:
    """Hole: the failover's rule for what the standby mirrors was its own copy of the
    restore's, weaker: the name and the API only. West's ORDERS made again by someone
    as a mirror of east's ORDERS filtered on orders.eu.> held east's last sequence (its
    last message was an orders.eu one), so the pair read lag 0, and with east lost an
    unplanned failover promoted it: 50 acknowledged messages in none of west's
    sequences, the consumer started after them. The failover now asks the one rule
    (``model.standby.mirrors_the_origin``: all of it, through the declared API and
    delivery subject): refused, nothing changed."""
    east, west, root = ready
    run(_publish(east.url, "orders.eu.1", 5))  # sequences 51-55
    metadata = _info(west.url, "ORDERS")["config"]["metadata"]
    assert "error" not in run(_request(west.url, "$JS.API.STREAM.DELETE.ORDERS"))
    part = {"name": "ORDERS", "external": {"api": "$JS.east.API"}, "filter_subject": "orders.eu.>"}
    made = {"name": "ORDERS", "metadata": metadata, "mirror": part}
    assert "error" not in run(_request(west.url, "$JS.API.STREAM.CREATE.ORDERS", made))
    wait_for(lambda: last_seq(west) == 55)
    assert _info(west.url, "ORDERS")["state"]["messages"] == 5
    east.kill()
    result = reconcile(*FAILOVER, "--unplanned", cwd=root)
    assert result.returncode == 1, said(result)
    assert "nothing was changed" in result.stderr, said(result)
    assert _info(west.url, "ORDERS")["config"]["mirror"]["filter_subject"] == "orders.eu.>"
    assert consumers(west) == []


def test_a_backups_consumers_never_come_with_the_standby_mirror(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: apply never makes a consumer on the standby's mirror (the failover creates
    them at the promotion), but a restore did: east's backup rewritten as the very
    mirror west's spec declares, its consumer shipper (acknowledged up to 20) with it,
    restored with ``--env west``: west's shipper delivered 21.. beside east's (each
    message worked twice) and every failover was refused for it. A backup bringing
    consumers is never restored as the standby (``planning.standby``): refused, nothing
    made in west."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 50))
    assert fetch(east, "shipper", 20, ack=True) == list(range(1, 21))
    out = tmp_path / "backup"
    taken = reconcile("backup", "--env", "east", "--out", str(out), cwd=root)
    assert taken.returncode == 0, said(taken)
    rewritten(out, as_the_mirror)

    result = reconcile("restore", str(out), "--env", "west", "--yes", cwd=root)
    assert result.returncode == 1, said(result)
    assert "orders.yaml:" in result.stderr, said(result)
    assert run(_user_streams(west)) == []  # nothing restored in west
    applied(root, "west")  # the mirror the spec declares, no consumer
    wait_for(lambda: last_seq(west) == 50)
    assert consumers(west) == []
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)


def test_the_lost_origin_is_never_made_again_with_its_subjects_while_the_standby_takes_writes(
    ready: Ready, tmp_path: Path
) -> None:
    """Hole: after a failover west takes the writes and east is fenced; east's disk then
    lost, its ORDERS gone. The rule keeping a fenced origin fenced read east's live
    stream, and there was none: ``restore --env east`` of last night's backup, and
    ``apply --env east`` alike, made ORDERS there again on orders.>, and a publish on
    east was stored on both sides (west 50 -> 53, east 3): both took writes. Where the
    spec calls it the primary, a stream is now made with its subjects only while the
    standby's does not take writes (read on the standby's server: ``pair_reads``);
    both refused, naming west and the spec's line, nothing made in east."""
    east, west, root = ready
    out = backed_up_then_failed_over(root, tmp_path)
    run(_request(east.url, "$JS.API.STREAM.DELETE.ORDERS", {}))  # east's disk lost
    west_before = counted(west)

    restored = reconcile("restore", str(out), "--env", "east", "--yes", cwd=root)
    assert restored.returncode == 1, said(restored)
    assert "orders.yaml:" in restored.stderr and "west" in restored.stderr, said(restored)
    applied_again = reconcile("apply", "--env", "east", "--yes", cwd=root)
    assert applied_again.returncode == 1, said(applied_again)
    assert "orders.yaml:" in applied_again.stderr, said(applied_again)
    assert run(_user_streams(east)) == []

    run(_publish(east.url, "orders.new", 3))  # through east's clients: west's only
    wait_for(lambda: counted(west)[0] == west_before[0] + 3)
    assert run(_user_streams(east)) == []


def test_a_backups_stream_on_the_origins_subjects_is_never_restored_beside_the_fenced_origin(
    ready: Ready, server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: after a failover east's ORDERS is fenced, its subjects moved aside, so no
    live stream of east holds orders.> any more: a backup's ``\\u041eRDERS`` on
    orders.>, restored with ``--env east``, was made there and took writes beside west's
    promoted ORDERS. No other stream is made on a pair's declared subjects in either of
    its environments (``planning.standby``): refused, nothing made in east."""
    east, west, root = ready
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    out = a_dev_backup(server_factory, tmp_path, LOOKALIKE)
    west_before = counted(west)

    result = reconcile("restore", str(out), "--env", "east", "--yes", cwd=root)
    assert result.returncode == 1, said(result)
    assert "orders.yaml:" in result.stderr, said(result)
    assert run(_user_streams(east)) == ["ORDERS"]  # the fenced origin only
    run(_publish(east.url, "orders.new", 2))  # through east's clients: west's only
    wait_for(lambda: counted(west)[0] == west_before[0] + 2)
    assert run(_user_streams(east)) == ["ORDERS"]


def test_a_reverted_role_swap_never_turns_the_new_mirror_back_into_a_second_primary(
    ready: Ready,
) -> None:
    """Hole: after a failover and the failback's apply (the roles swapped in git: west
    the primary, east its fresh mirror), the swap reverted by mistake before anything
    failed back: ``apply --env east`` planned dropping east's ``mirror`` and giving it
    orders.> (from 2.12 an update promotes a mirror): east took writes beside west's.
    The step giving east's mirror its subjects is judged as a create there: west's
    stream takes the writes, so it is prevented, naming west; east stays a mirror."""
    east, west, root = ready
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, said(done)
    specs = root / "specs" / "orders.yaml"
    declared = specs.read_text(encoding="utf-8")
    swapped = declared.replace("primary: east", "primary: WEST").replace(
        "environment: west", "environment: east"
    )
    specs.write_text(swapped.replace("WEST", "west"), encoding="utf-8")
    back = reconcile("apply", "--env", "east", "--yes", "--allow-replace", cwd=root)
    assert back.returncode == 0, said(back)
    wait_for(lambda: last_seq(east) == 50)
    specs.write_text(declared, encoding="utf-8")  # the swap reverted by mistake
    west_before = counted(west)

    reverted = reconcile("apply", "--env", "east", "--yes", "--allow-replace", cwd=root)
    assert reverted.returncode == 1, said(reverted)
    assert "orders.yaml:" in reverted.stderr and "west" in reverted.stderr, said(reverted)
    assert _info(east.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    run(_publish(west.url, "orders.new", 2))  # west takes the writes, east mirrors them
    wait_for(lambda: counted(east)[0] == west_before[0] + 2)
    assert counted(east) == counted(west)


def test_a_mirror_denying_purges_for_good_is_never_restored_as_the_standby(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: east's backup rewritten as the very mirror west's spec declares plus
    ``deny_purge`` and ``deny_delete`` (the spec declares neither) was restored with
    ``--env west``: no update cancels either (measured: "can not cancel deny purge"), so
    apply could never make it the declared mirror, and a failover's promotion kept both:
    the primary then refused every purge and delete, for good, short of replacing it.
    A standby carries a seal or deny only when its spec declares it
    (``model.standby.is_the_mirror``): refused, nothing made in west."""
    _east, west, root, out = east_backed_up(server_factory, tmp_path, ORDERS_ONLY)

    def denying(config: dict[str, Any]) -> None:
        as_the_mirror(config)
        config.update(deny_purge=True, deny_delete=True)

    rewritten(out, denying)
    result = reconcile("restore", str(out), "--env", "west", "--yes", cwd=root)
    assert result.returncode == 1, said(result)
    assert "orders.yaml:" in result.stderr, said(result)
    assert run(_user_streams(west)) == []
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 30)
    purged = run(_request(west.url, "$JS.API.STREAM.INFO.ORDERS"))["config"]
    assert not purged["deny_purge"] and not purged["deny_delete"]


def test_a_primary_made_while_its_standby_cannot_be_read_says_the_check_was_not_made(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The split-brain rule reads the standby's stream before a stream is made with its
    subjects in its primary; a standby that cannot be read refuses nothing (a job may
    hold only the primary's credentials, and a first apply comes before the standby's),
    but that the check was not made was said nowhere. The plan now says it on the step,
    naming the standby; the apply goes on and makes the stream, messages counted."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west, ORDERS_ONLY)
    west.stop()
    planned = reconcile("plan", "--env", "east", cwd=root)
    assert planned.returncode == 0, said(planned)  # a plan with a step: not refused
    assert "not checked: west, the standby, could not be read" in planned.stdout, said(planned)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 3))
    assert counted(east)[0] == 3
