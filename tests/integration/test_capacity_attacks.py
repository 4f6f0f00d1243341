"""Attacks on the capacity check (docs/capacity.md): plans the check passed that the
server then refused half-way, on real servers with account JetStream limits. Each test
counts the streams and messages before and after."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer
from test_action import GitHubStandIn, Workspace, github  # noqa: F401 (a fixture)
from test_capacity import USER, MiB, _publish, census, limited, stream_yaml, write_specs

from reconciler.errors import SpecError
from reconciler.execution import run
from reconciler.execution.requests import Quiet
from reconciler.jetstream import ConnectionOptions
from reconciler.planning.steps import Plan


def _apply(specs: Path, server: NatsServer, cwd: Path, *flags: str) -> Any:
    return reconcile("apply", str(specs), "--server", server.url, *USER, "--yes", *flags, cwd=cwd)


def _plan(specs: Path, server: NatsServer, cwd: Path, *flags: str) -> Any:
    return reconcile("plan", str(specs), "--server", server.url, *USER, *flags, cwd=cwd)


CONSUMER = "kind: Consumer\nname: worker\nstream: ORDERS\nack_policy: explicit\n"


def test_a_consumer_over_the_accounts_max_ack_pending_is_refused_before_any_step(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The account's max_ack_pending (100) caps every consumer: the server refused the
    consumer with err 10121 after apply had created its stream (a half-applied plan the
    capacity check passed). Now refused before the stream, and so is a consumer leaving
    it out (the tool sends its default, 1,000: the server refused it alike); one within
    the limit applies and delivers."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB, max_ack_pending=100)
    over = write_specs(
        tmp_path / "over", stream_yaml("ORDERS", "1MiB"), CONSUMER + "max_ack_pending: 1000\n"
    )

    unset = write_specs(tmp_path / "unset", stream_yaml("ORDERS", "1MiB"), CONSUMER)
    for result in (_plan(over, server, tmp_path), _apply(over, server, tmp_path)):
        assert result.returncode == 1, result.stdout + result.stderr
        assert f"{over / 'streams.yaml'}:11" in result.stderr  # the max_ack_pending line
        assert "max_ack_pending 1000 is over the account's limit of 100" in result.stderr
        assert "Traceback" not in result.stderr
    left_out = _apply(unset, server, tmp_path)
    assert left_out.returncode == 1, left_out.stdout + left_out.stderr
    assert f"{unset / 'streams.yaml'}:7" in left_out.stderr  # the consumer's document
    assert "sets no max_ack_pending (sent as 1000)" in left_out.stderr
    assert census(server) == {}

    fits = write_specs(
        tmp_path / "fits", stream_yaml("ORDERS", "1MiB"), CONSUMER + "max_ack_pending: 100\n"
    )
    assert _apply(fits, server, tmp_path).returncode == 0
    asyncio.run(_publish(server, "orders.new", 5))
    assert census(server) == {"ORDERS": 5}
    again = reconcile("drift", str(fits), "--server", server.url, *USER, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr  # converged


def test_the_apply_locks_bucket_counts_toward_max_streams_in_the_plan(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """An account allowing 2 streams and a plan making 2: plan said yes (with a
    warning), then apply made its lock bucket (a stream) and refused; the bucket
    stayed, so the same specs were refused from then on, --no-lock too. Now plan counts
    the bucket apply will make and refuses first, naming it; 1 stream plans and applies."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB, max_streams=2)
    two = write_specs(tmp_path / "two", stream_yaml("A", "1MiB"), stream_yaml("B", "1MiB"))

    planned = _plan(two, server, tmp_path)

    assert planned.returncode == 1, planned.stdout + planned.stderr
    assert "would make 3 streams; the account allows 2 (0 now)" in planned.stderr
    assert "apply makes KV_RECONCILE_LOCKS (its lock) first, one of them" in planned.stderr
    assert census(server) == {}
    one = write_specs(tmp_path / "one", stream_yaml("A", "1MiB"))
    fits = _plan(one, server, tmp_path)
    assert fits.returncode == 0, fits.stdout + fits.stderr
    assert "streams: 0 -> 2 of 2 (100%)" in fits.stdout  # A and the bucket, said below
    assert "(the figures include KV_RECONCILE_LOCKS: apply makes it first" in fits.stdout
    as_json = json.loads(_plan(one, server, tmp_path, "--format", "json").stdout)
    assert as_json["capacity"]["ahead"] == ["KV_RECONCILE_LOCKS"]
    assert _apply(one, server, tmp_path).returncode == 0
    asyncio.run(_publish(server, "a.x", 4))
    assert census(server) == {"A": 4}
    assert _apply(two, server, tmp_path).returncode == 1
    assert census(server) == {"A": 4}


def test_drift_reports_an_over_commit_and_keeps_its_exit_codes(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """drift is a report (0 in sync, 2 drift): specs the account has no room for made it
    fail with exit 1 and no report. Now the report is shown, exit 2 (what the plan
    would add is drift), and the over-commit is a warning naming the resource's line;
    plan and apply still refuse, and nothing is created."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    fits = write_specs(tmp_path / "fits", stream_yaml("ORDERS", "40MiB"))
    assert _apply(fits, server, tmp_path).returncode == 0
    asyncio.run(_publish(server, "orders.new", 3))
    over = write_specs(
        tmp_path / "over", stream_yaml("ORDERS", "40MiB"), stream_yaml("AUDIT", "30MiB")
    )

    drift = reconcile("drift", str(over), "--server", server.url, *USER, cwd=tmp_path)

    assert drift.returncode == 2, drift.stdout + drift.stderr
    assert "AUDIT" in drift.stdout
    assert f"{over / 'streams.yaml'}:11: warning: max_bytes: Stream AUDIT reserves 30.0 MiB" in (
        drift.stderr
    )
    assert "plan and apply refuse it" in drift.stderr
    assert "Traceback" not in drift.stderr
    in_sync = reconcile("drift", str(fits), "--server", server.url, *USER, cwd=tmp_path)
    assert in_sync.returncode == 0, in_sync.stdout + in_sync.stderr
    assert _plan(over, server, tmp_path).returncode == 1
    assert _apply(over, server, tmp_path).returncode == 1
    assert census(server) == {"ORDERS": 3}


class _AsTeam:
    """The server as the Action's ``server`` input names it: with the user in the URL."""

    def __init__(self, server: NatsServer) -> None:
        self.url = server.url.replace("nats://", "nats://team:s3cret@")


def test_the_actions_drift_mode_reports_an_over_commit_as_the_cli_does(
    server_factory: Callable[..., NatsServer],
    tmp_path: Path,
    github: GitHubStandIn,  # noqa: F811
) -> None:
    """The Action's mode drift, like reconcile drift: exit 2 with the report and the
    over-commit as a warning (it failed with exit 1 and no report); nothing created."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    workspace = Workspace(tmp_path / "ws", github)
    workspace.spec.write_text(stream_yaml("AUDIT", "70MiB"), encoding="utf-8")
    as_team = cast(NatsServer, _AsTeam(server))

    drift = workspace.step(as_team, mode="drift")

    assert drift.code == 2, drift.stdout + drift.stderr
    assert drift.outputs["has-changes"] == "true"
    assert "plan and apply refuse it" in drift.stdout + drift.stderr
    assert workspace.step(as_team, mode="plan").code == 1
    assert census(server) == {}


def test_a_user_who_may_not_read_the_accounts_limits_is_refused_naming_the_subject(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Decided: refused, not skipped. Every plan reads $JS.API.INFO (the API level, and
    the limits the capacity check sums); a plan that cannot be checked could be refused
    half-way. One line, before anything, naming the subject as it must be granted: it
    was printed lowercased ('$js.api.info'), and subjects are case-sensitive, so that
    grant would not have helped. Nothing is created."""
    denied = {"publish": {"allow": [">"], "deny": ["$JS.API.INFO"]}}
    user = {"user": "team", "password": "s3cret", "permissions": denied}
    limits = {"max_file": 64 * MiB, "max_mem": 8 * MiB}
    server = server_factory(config={"accounts": {"TEAM": {"jetstream": limits, "users": [user]}}})
    specs = write_specs(tmp_path / "specs", stream_yaml("ORDERS", "1MiB"))

    for result in (_plan(specs, server, tmp_path), _apply(specs, server, tmp_path, "--no-lock")):
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        assert (
            result.stderr == "error: permission denied: the user may not publish to $JS.API.INFO\n"
        )
    assert census(server) == {}


async def _description(server: NatsServer, stream: str) -> str:
    nc = await nats.connect(server.url, user="team", password="s3cret")
    try:
        info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"")).data)
        return str(info["config"].get("description") or "")
    finally:
        await nc.close()


async def _storage(server: NatsServer, stream: str) -> str:
    nc = await nats.connect(server.url, user="team", password="s3cret")
    try:
        info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"")).data)
        return str(info["config"]["storage"])
    finally:
        await nc.close()


def test_a_migration_on_a_full_account_is_refused_before_any_step(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """A migration's temporary stream has no max_bytes, and the server needs one byte
    free to create it: with the account's 64 MiB all reserved, plan passed, apply
    updated FILL and then the migration was refused (err 10047), half-applied. Now
    refused before any step; with a byte of room it migrates and keeps every message."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    full = write_specs(tmp_path / "full", stream_yaml("OLD", "40MiB"), stream_yaml("FILL", "24MiB"))
    assert _apply(full, server, tmp_path).returncode == 0
    asyncio.run(_publish(server, "old.x", 10))
    workqueue = stream_yaml("OLD", "40MiB", extra="retention: workqueue\n")
    changed = stream_yaml("FILL", "24MiB", extra="description: changed\n")
    migrate = write_specs(tmp_path / "migrate", workqueue, changed)

    planned = _plan(migrate, server, tmp_path, "--migrate")
    applied = _apply(migrate, server, tmp_path, "--migrate")

    for result in (planned, applied):
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        assert "migrating Stream OLD needs a temporary stream without max_bytes" in result.stderr
        assert "one byte of file storage free" in result.stderr
    assert census(server) == {"OLD": 10, "FILL": 0}
    assert asyncio.run(_description(server, "FILL")) == ""
    smaller = stream_yaml("FILL", "23MiB", extra="description: changed\n")
    shrunk = write_specs(tmp_path / "shrunk", stream_yaml("OLD", "40MiB"), smaller)
    assert _apply(shrunk, server, tmp_path).returncode == 0  # a MiB of room, first
    room = write_specs(tmp_path / "room", workqueue, smaller)
    assert _apply(room, server, tmp_path, "--migrate").returncode == 0
    assert census(server) == {"OLD": 10, "FILL": 0}


async def _publish_kib(server: NatsServer, subject: str, count: int) -> None:
    """``count`` messages of a KiB each (a temporary stream's byte limit from memory to
    file is smaller than the target's by the bytes a file stream counts more, about 2%
    for these)."""
    nc = await nats.connect(server.url, user="team", password="s3cret")
    try:
        js = nc.jetstream()
        for i in range(count):
            await js.publish(subject, f"{i:04d}".encode() * 256)
    finally:
        await nc.close()


def test_a_migrations_temporary_stream_max_bytes_counts_at_the_handover(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """ORDERS (memory, max_bytes 5 MiB, discard new) migrating to file on an account of
    max_mem 8 MiB: at the handover the temporary stream takes a max_bytes in memory
    (4.9 MiB for these messages), which the server reserves beside ORDERS's 5 MiB. Plan
    counted none for it and said there was room; apply failed at the handover (err
    10028: ORDERS kept its messages, MIGRATING_ORDERS was left). Now plan and apply
    refuse before anything, at the max_bytes line, naming the account's limit and what
    the migration would reserve. With 3 MiB (3 + 2.9 of 8) it migrates, every message
    kept."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    memory = stream_yaml("ORDERS", "5MiB", storage="memory", extra="discard: new\n")
    assert _apply(write_specs(tmp_path / "memory", memory), server, tmp_path).returncode == 0
    asyncio.run(_publish_kib(server, "orders.new", 100))
    target = write_specs(tmp_path / "file", stream_yaml("ORDERS", "5MiB", extra="discard: new\n"))

    planned = _plan(target, server, tmp_path, "--migrate")
    applied = _apply(target, server, tmp_path, "--migrate")

    for result in (planned, applied):
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        assert f"{target / 'streams.yaml'}:5" in result.stderr  # the max_bytes line
        assert "migrating Stream ORDERS reserves" in result.stderr
        assert "of it its temporary stream's max_bytes" in result.stderr
        assert "would reserve 9.9 MiB (max_bytes x replicas) of the account's 8.0 MiB" in (
            result.stderr
        )
    assert census(server) == {"ORDERS": 100}  # nothing made, nothing lost

    smaller = stream_yaml("ORDERS", "3MiB", storage="memory", extra="discard: new\n")
    assert _apply(write_specs(tmp_path / "smaller", smaller), server, tmp_path).returncode == 0
    room = write_specs(tmp_path / "room", stream_yaml("ORDERS", "3MiB", extra="discard: new\n"))
    migrated = _apply(room, server, tmp_path, "--migrate")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert census(server) == {"ORDERS": 100}
    assert asyncio.run(_storage(server, "ORDERS")) == "file"


def _bucket(max_bytes: str, *values: str) -> tuple[str, ...]:
    entries = (
        f"kind: KeyValueEntry\nbucket: cfg\nkey: k{i}\nvalue: {value}\n"
        for i, value in enumerate(values)
    )
    return (f"kind: KeyValue\nname: cfg\nmax_bytes: {max_bytes}\n", *entries)


def test_entries_that_overflow_their_buckets_max_bytes_are_refused_before_any_step(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """A bucket refuses a put that would pass its max_bytes (discard new): plan passed,
    apply created the bucket and its first entry, then err 10077. Now refused before
    any step, naming the bucket; with room both entries are written."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    value = "x" * 3000
    over = write_specs(tmp_path / "over", *_bucket("4KiB", value, value))

    for result in (_plan(over, server, tmp_path), _apply(over, server, tmp_path)):
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        assert "KeyValue cfg" in result.stderr and "max_bytes 4.0 KiB" in result.stderr
    assert census(server) == {}

    fits = write_specs(tmp_path / "fits", *_bucket("8KiB", value, value))
    assert _apply(fits, server, tmp_path).returncode == 0
    assert census(server) == {"KV_cfg": 2}


def test_entries_added_to_a_bucket_count_what_it_holds(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """An existing bucket: the bytes it holds count; a new entry that would pass its
    max_bytes is refused before any step, the entries written before are kept."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    value = "x" * 3000
    first = write_specs(tmp_path / "first", *_bucket("8KiB", value, value))
    assert _apply(first, server, tmp_path).returncode == 0

    third = write_specs(tmp_path / "third", *_bucket("8KiB", value, value, value))
    result = _apply(third, server, tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "KeyValue cfg: its entries' writes need up to" in result.stderr
    assert census(server) == {"KV_cfg": 2}


def test_a_full_account_without_the_lock_bucket_is_refused_by_plan_not_by_the_lock(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Every byte reserved and no lock bucket yet: plan said yes, apply then failed
    making its lock ('insufficient storage resources', no word of the lock). Now plan
    says why; apply --no-lock, which makes no bucket, is not refused for it."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB, max_streams=2)
    full = write_specs(tmp_path / "full", stream_yaml("OLD", "40MiB"), stream_yaml("FILL", "24MiB"))
    assert _apply(full, server, tmp_path, "--no-lock").returncode == 0
    asyncio.run(_publish(server, "old.x", 6))
    changed = stream_yaml("OLD", "40MiB", extra="description: changed\n")
    described = write_specs(tmp_path / "described", changed, stream_yaml("FILL", "24MiB"))

    planned = _plan(described, server, tmp_path)

    assert planned.returncode == 1, planned.stdout + planned.stderr
    assert "apply makes KV_RECONCILE_LOCKS (its lock) first" in planned.stderr
    assert "one byte of file storage free" in planned.stderr
    assert "the account has 2 streams of the 2 it allows" in planned.stderr
    assert "(apply --no-lock makes none)" in planned.stderr
    assert census(server) == {"OLD": 6, "FILL": 0}
    unlocked = _apply(described, server, tmp_path, "--no-lock")
    assert unlocked.returncode == 0, unlocked.stdout + unlocked.stderr
    assert asyncio.run(_description(server, "OLD")) == "changed"
    assert census(server) == {"OLD": 6, "FILL": 0}


def test_entry_updates_and_value_sizes_are_checked_before_any_step(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Two more refusals the plan passed (measured on 2.15): an update of every key of
    a bucket keeping one revision was refused at the first write, err 10077 (the server
    counts the new message before dropping the old); a value whose value and headers pass
    the bucket's max_value_size was refused after the bucket and the first entry were
    written, err 10054. Now both refused before any step; what fits applies."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    value = "x" * 3000
    first = write_specs(tmp_path / "a", *_bucket("8KiB", value, value))
    assert _apply(first, server, tmp_path).returncode == 0
    assert census(server) == {"KV_cfg": 2}
    rewritten = write_specs(tmp_path / "b", *_bucket("8KiB", value + "z", value + "z"))

    update = _apply(rewritten, server, tmp_path)

    assert update.returncode == 1, update.stdout + update.stderr
    assert "KeyValue cfg: its entries' writes need up to" in update.stderr
    assert census(server) == {"KV_cfg": 2}

    sized = "kind: KeyValue\nname: small\nmax_value_size: 400\n"
    entry = "kind: KeyValueEntry\nbucket: small\nkey: {key}\nvalue: {value}\n"
    fits = entry.format(key="a", value="ok")
    big = write_specs(tmp_path / "c", sized, fits, entry.format(key="b", value="y" * 390))

    refused = _apply(big, server, tmp_path)

    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "KeyValueEntry small/b: its value (390 bytes) and headers" in refused.stderr
    assert census(server) == {"KV_cfg": 2}
    assert _apply(write_specs(tmp_path / "d", sized, fits), server, tmp_path).returncode == 0
    assert census(server) == {"KV_cfg": 2, "KV_small": 1}


class _TakesRoomAtYes(Quiet):
    """A person who says yes while another client takes the account's room."""

    asks = True

    def __init__(self, server: NatsServer) -> None:
        self.server = server

    async def confirm(self, plan: Plan) -> bool:
        nc = await nats.connect(self.server.url, user="team", password="s3cret")
        try:
            config = {"name": "OTHER", "subjects": ["other.>"], "max_bytes": 30 * MiB}
            await nc.request("$JS.API.STREAM.CREATE.OTHER", json.dumps(config).encode())
        finally:
            await nc.close()
        return True


def test_room_taken_while_the_question_waits_is_checked_again_after_yes(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The plan shown fits (40 of 64 MiB); another client reserves 30 MiB before the
    person says yes: the plan made again after the yes is refused, nothing applied."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    specs = write_specs(tmp_path / "specs", stream_yaml("ORDERS", "40MiB"))
    opts = ConnectionOptions(servers=server.url, user="team", password="s3cret")

    with pytest.raises(SpecError) as refused:
        asyncio.run(run.apply([specs], opts, observer=_TakesRoomAtYes(server)))

    assert "Stream ORDERS reserves 40.0 MiB more" in str(refused.value)
    assert "(now 30.0 MiB)" in str(refused.value)
    assert census(server) == {"OTHER": 0}
