"""Capacity and quota in the plan (issue 32), on real servers: an account with JetStream
limits in the server's config refuses an over-committed plan before its first step (in
plan and in apply, through the CLI), warns within 10% of a limit, and every plan shows
the reserved totals before and after (docs/capacity.md).

Every refusal is checked by counting: the streams and the messages in them are the same
before and after the refused apply.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from credentials import _jwt, make_nkey
from servers import SERVER_MATRIX, Cluster, NatsServer

from reconciler.errors import SpecError
from reconciler.execution import run
from reconciler.execution.requests import Quiet
from reconciler.jetstream import ConnectionOptions

MiB = 1024 * 1024
#: apply's lock bucket: one more stream of the account once an apply ran (unlimited size)
LOCKS = "KV_RECONCILE_LOCKS"
USER = ["--user", "team", "--password", "s3cret"]


def limited(server_factory: Callable[..., NatsServer], **limits: Any) -> NatsServer:
    """A server whose account TEAM (user team) has the JetStream ``limits``."""
    accounts = {
        "TEAM": {"jetstream": limits, "users": [{"user": "team", "password": "s3cret"}]},
    }
    return server_factory(config={"accounts": accounts})


def options(server: NatsServer) -> ConnectionOptions:
    return ConnectionOptions(servers=server.url, user="team", password="s3cret")


def stream_yaml(name: str, max_bytes: str | None, *, storage: str = "file", extra: str = "") -> str:
    size = f"max_bytes: {max_bytes}\n" if max_bytes is not None else ""
    head = f"kind: Stream\nname: {name}\nsubjects: [{name.lower()}.>]\nstorage: {storage}\n"
    return head + size + extra


def write_specs(folder: Path, *documents: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "streams.yaml").write_text("---\n".join(documents))
    return folder


async def _census(server: NatsServer) -> dict[str, int]:
    """Every stream of the account and how many messages it holds (the apply lock's
    bucket left out)."""
    nc = await nats.connect(server.url, user="team", password="s3cret")
    try:
        names = json.loads((await nc.request("$JS.API.STREAM.NAMES", b"{}")).data)
        found = {}
        for name in set(names.get("streams") or []) - {LOCKS}:
            info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"")).data)
            found[name] = int(info["state"]["messages"])
        return found
    finally:
        await nc.close()


async def _publish(server: NatsServer, subject: str, count: int) -> None:
    nc = await nats.connect(server.url, user="team", password="s3cret")
    try:
        js = nc.jetstream()
        for i in range(count):
            await js.publish(subject, f"m{i}".encode())
    finally:
        await nc.close()


class _Notices(Quiet):
    """A library call's observer that keeps the notices (warnings among them)."""

    def __init__(self, into: list[str]) -> None:
        self.into = into

    def notice(self, message: str) -> None:
        self.into.append(message)


def census(server: NatsServer) -> dict[str, int]:
    return asyncio.run(_census(server))


def test_an_over_committed_max_bytes_is_refused_before_any_step(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB, max_streams=10)
    first = write_specs(tmp_path / "first", stream_yaml("ORDERS", "40MiB"))
    done = reconcile("apply", str(first), "--server", server.url, *USER, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    asyncio.run(_publish(server, "orders.new", 25))
    before = census(server)
    assert before == {"ORDERS": 25}

    # ORDERS stays; two new streams together ask for 30 MiB more than the 24 MiB left
    specs = write_specs(
        tmp_path / "more",
        stream_yaml("ORDERS", "40MiB"),
        stream_yaml("AUDIT", "20MiB"),
        stream_yaml("EVENTS", "10MiB"),
    )
    planned = reconcile("plan", str(specs), "--server", server.url, *USER, cwd=tmp_path)
    applied = reconcile("apply", str(specs), "--server", server.url, *USER, "--yes", cwd=tmp_path)

    for result in (planned, applied):
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        assert "streams.yaml:" in result.stderr  # FILE:LINE of the max_bytes
        assert "Stream AUDIT" in result.stderr or "Stream EVENTS" in result.stderr
        assert "64.0 MiB" in result.stderr
    assert census(server) == before  # nothing created, no message lost


def test_every_over_committing_resource_is_named_with_its_line(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    specs = write_specs(
        tmp_path / "specs",
        stream_yaml("AUDIT", "40MiB"),
        stream_yaml("EVENTS", "30MiB"),
        stream_yaml("CACHE", "4MiB", storage="memory"),
    )
    with pytest.raises(SpecError) as refused:
        asyncio.run(run.plan([specs], options(server)))
    lines = {str(p.location): p.message for p in refused.value.problems}
    file = specs / "streams.yaml"
    assert set(lines) == {f"{file}:5", f"{file}:11"}  # the two max_bytes lines, not CACHE
    assert all("70.0 MiB" in message and "64.0 MiB" in message for message in lines.values())
    assert census(server) == {}


def test_a_plan_within_ten_percent_of_a_limit_warns_and_shows_the_totals(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB, max_streams=10)
    specs = write_specs(tmp_path / "specs", stream_yaml("ORDERS", "60MiB"))

    planned = reconcile("plan", str(specs), "--server", server.url, *USER, cwd=tmp_path)
    as_json = reconcile(
        "plan", str(specs), "--server", server.url, *USER, "--format", "json", cwd=tmp_path
    )

    assert planned.returncode == 0, planned.stderr
    assert "warning: file storage reserved after this plan: 60.0 MiB of 64.0 MiB (94%" in (
        planned.stderr
    )
    assert "file storage reserved: 0 B -> 60.0 MiB of 64.0 MiB (94%)" in planned.stdout
    capacity = json.loads(as_json.stdout)["capacity"]
    file_total = next(t for t in capacity["totals"] if t["resource"] == "file")
    assert file_total == {
        "resource": "file",
        "tier": None,
        "before": 0,
        "after": 60 * MiB,
        "peak": 60 * MiB,
        "limit": 64 * MiB,
        "used": 0,
        "scope": "account",
    }
    streams = next(t for t in capacity["totals"] if t["resource"] == "streams")
    # ORDERS and the lock bucket apply makes first (KV_RECONCILE_LOCKS)
    assert (streams["before"], streams["after"], streams["limit"]) == (0, 2, 10)
    assert [w["severity"] for w in capacity["warnings"]] == ["warning"]


def test_a_delete_frees_no_room_for_a_create_of_the_same_apply(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """apply deletes last (measured: the create was refused with err 10047 and the
    delete skipped), so the plan counts a deleted stream until the end: refused before
    any step, saying how to do it; pruning first, then creating, works."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    first = write_specs(tmp_path / "first", stream_yaml("OLD", "50MiB"))
    assert reconcile("apply", str(first), "--server", server.url, *USER, "--yes", cwd=tmp_path)
    asyncio.run(_publish(server, "old.x", 3))
    assert census(server) == {"OLD": 3}

    swapped = write_specs(tmp_path / "swapped", stream_yaml("NEW", "50MiB"))
    flags = ("--server", server.url, *USER, "--yes", "--prune", "--allow-replace")
    applied = reconcile("apply", str(swapped), *flags, cwd=tmp_path)

    assert applied.returncode == 1
    assert "apply deletes last" in applied.stderr
    assert census(server) == {"OLD": 3}
    empty = write_specs(tmp_path / "empty")
    (empty / "streams.yaml").write_text("")
    assert reconcile("apply", str(empty), *flags, cwd=tmp_path).returncode == 0
    assert reconcile("apply", str(swapped), *flags, cwd=tmp_path).returncode == 0
    assert census(server) == {"NEW": 0}


def test_max_streams_over_commit_is_refused(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB, max_streams=2)
    specs = write_specs(
        tmp_path / "specs",
        stream_yaml("A", "1MiB"),
        stream_yaml("B", "1MiB"),
        stream_yaml("C", "1MiB"),
    )
    planned = reconcile("plan", str(specs), "--server", server.url, *USER, cwd=tmp_path)
    applied = reconcile("apply", str(specs), "--server", server.url, *USER, "--yes", cwd=tmp_path)

    assert planned.returncode == 1
    assert "would make 4 streams; the account allows 2 (0 now)" in planned.stderr
    assert "apply makes KV_RECONCILE_LOCKS (its lock) first" in planned.stderr
    assert applied.returncode == 1
    assert "streams; the account allows 2" in applied.stderr  # the lock bucket is one more
    assert census(server) == {}


def test_max_bytes_required_refuses_a_stream_without_max_bytes(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB, max_bytes_required=True)
    specs = write_specs(
        tmp_path / "specs", stream_yaml("BOUNDED", "1MiB"), stream_yaml("UNBOUNDED", None)
    )
    planned = reconcile("plan", str(specs), "--server", server.url, *USER, cwd=tmp_path)
    applied = reconcile("apply", str(specs), "--server", server.url, *USER, "--yes", cwd=tmp_path)

    for result in (planned, applied):
        assert result.returncode == 1
        assert f"{specs / 'streams.yaml'}:7" in result.stderr  # the UNBOUNDED document
        assert "requires every stream to set it (max_bytes_required)" in result.stderr
    assert census(server) == {}


def test_apply_takes_its_lock_on_an_account_that_requires_max_bytes(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The apply lock's bucket is bounded where the account requires it (the server
    refused the unbounded bucket with err 10113, so only --no-lock could apply)."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB, max_bytes_required=True)
    specs = write_specs(tmp_path / "specs", stream_yaml("BOUNDED", "1MiB"))

    applied = reconcile("apply", str(specs), "--server", server.url, *USER, "--yes", cwd=tmp_path)

    assert applied.returncode == 0, applied.stderr
    assert census(server) == {"BOUNDED": 0}


def test_an_unlimited_stream_needs_one_byte_free(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The server refuses even a stream without max_bytes when the account's
    reservations fill its limit (measured: err 10047); the plan says so first."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    specs = write_specs(
        tmp_path / "specs", stream_yaml("FULL", "64MiB"), stream_yaml("UNBOUNDED", None)
    )
    applied = reconcile("apply", str(specs), "--server", server.url, *USER, "--yes", cwd=tmp_path)

    assert applied.returncode == 1
    assert "needs at least one byte" in applied.stderr
    assert census(server) == {}


def test_replicas_over_a_single_server_are_still_refused_in_the_plan(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    specs = write_specs(tmp_path / "specs", stream_yaml("R3", "1MiB", extra="num_replicas: 3\n"))
    applied = reconcile("apply", str(specs), "--server", server.url, *USER, "--yes", cwd=tmp_path)

    assert applied.returncode == 1
    assert "3 replicas need a JetStream cluster" in applied.stderr
    assert census(server) == {}


@pytest.mark.cluster
def test_a_cluster_plan_counts_every_replica(cluster: Cluster, tmp_path: Path) -> None:
    specs = write_specs(
        tmp_path / "specs",
        stream_yaml("CAP_R3", "10MiB", extra="num_replicas: 3\n"),
        stream_yaml("CAP_R1", "5MiB"),
    )
    opts = ConnectionOptions(servers=cluster.urls)
    the_plan = asyncio.run(run.plan([specs], opts))

    assert the_plan.capacity is not None
    file_total = next(t for t in the_plan.capacity.totals if t.what == "file")
    assert file_total.after - file_total.before == 35 * MiB  # 3 x 10 MiB + 5 MiB


@pytest.fixture(scope="module")
def limited_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three servers whose account TEAM may reserve 64 MiB of file storage (no tiers)."""
    nodes = Cluster(tmp_path_factory.mktemp("limited"), name="cap")
    account = {"jetstream": {"max_file": 64 * MiB, "max_mem": 8 * MiB}}
    account["users"] = [{"user": "team", "password": "s3cret"}]
    for node in nodes.nodes:
        node.settings["accounts"] = {"TEAM": account}
        node.settings["no_auth_user"] = "team"  # the fixture's own readiness checks
    nodes.start()
    yield nodes
    nodes.stop()


async def _create_raw(url: str, config: dict[str, Any]) -> dict[str, Any]:
    nc = await nats.connect(url, user="team", password="s3cret")
    try:
        subject = f"$JS.API.STREAM.CREATE.{config['name']}"
        reply = await nc.request(subject, json.dumps(config).encode(), timeout=10)
        answer: dict[str, Any] = json.loads(reply.data)
        return answer
    finally:
        await nc.close()


@pytest.mark.cluster
def test_replicas_multiply_the_reservation_as_the_server_counts_them(
    limited_cluster: Cluster, tmp_path: Path
) -> None:
    """R3 x 25 MiB is 75 MiB of a 64 MiB account: the plan refuses it, and the server
    itself refuses that config (err 10047), so the plan counts as the server does;
    R3 x 21 MiB (63 MiB) is planned with a warning and applied."""
    opts = ConnectionOptions(servers=limited_cluster.urls, user="team", password="s3cret")
    big = write_specs(tmp_path / "big", stream_yaml("WIDE", "25MiB", extra="num_replicas: 3\n"))
    with pytest.raises(SpecError) as refused:
        asyncio.run(run.plan([big], opts))
    assert "75.0 MiB" in str(refused.value)
    assert "(tier" not in str(refused.value)

    raw = {"name": "RAW", "subjects": ["raw.>"], "max_bytes": 25 * MiB, "num_replicas": 3}
    answer = asyncio.run(_create_raw(limited_cluster.url, raw))
    assert answer["error"]["err_code"] == 10047

    fits = write_specs(tmp_path / "fits", stream_yaml("WIDE", "21MiB", extra="num_replicas: 3\n"))
    notices: list[str] = []
    applied = asyncio.run(
        run.apply([fits], opts, approved=True, observer=_Notices(notices), lock_timeout=None)
    )
    assert applied.ok
    assert any("63.0 MiB of 64.0 MiB (98%" in line for line in notices)
    assert applied.plan.capacity is not None
    file_total = next(t for t in applied.plan.capacity.totals if t.what == "file")
    assert (file_total.before, file_total.after) == (0, 63 * MiB)


def tiered_operator(directory: Path, r1: dict[str, Any]) -> tuple[dict[str, Any], Path]:
    """Decentralised auth whose account has tiered JetStream limits (only an account JWT
    can set tiers): the server settings and a user's .creds file."""
    op_pub, op_seed = make_nkey("operator")
    acc_pub, acc_seed = make_nkey("account")
    sys_pub, _ = make_nkey("account")
    user_pub, user_seed = make_nkey("user")
    unlimited = {k: -1 for k in ("subs", "data", "payload", "imports", "exports", "conn")}
    operator = _jwt({"type": "operator"}, subject=op_pub, issuer_seed=op_seed, name="op")
    limits = {**unlimited, "wildcards": True, "tiered_limits": {"R1": r1}}
    account = _jwt(
        {"type": "account", "limits": limits}, subject=acc_pub, issuer_seed=op_seed, name="app"
    )
    system = _jwt(
        {"type": "account", "limits": unlimited}, subject=sys_pub, issuer_seed=op_seed, name="SYS"
    )
    user = _jwt(
        {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1},
        subject=user_pub,
        issuer_seed=acc_seed,
        name="deployer",
    )
    creds = directory / "user.creds"
    directory.mkdir(parents=True, exist_ok=True)
    creds.write_text(
        f"-----BEGIN NATS USER JWT-----\n{user}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user_seed}\n------END USER NKEY SEED------\n"
    )
    settings = {
        "operator": operator,
        "system_account": sys_pub,
        "resolver": "MEMORY",
        "resolver_preload": {acc_pub: account, sys_pub: system},
    }
    return settings, creds


def test_a_tiered_account_is_checked_per_tier(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """An account JWT with an R1 tier (64 MiB of file storage, 3 streams): the plan reads
    the tier from $JS.API.INFO, refuses 70 MiB naming the tier and shows the tier's
    totals."""
    r1 = {"mem_storage": 8 * MiB, "disk_storage": 64 * MiB, "streams": 3, "consumer": -1}
    settings, creds = tiered_operator(tmp_path / "auth", r1)
    server = server_factory(config=settings)
    opts = ConnectionOptions(servers=server.url, creds=str(creds))

    big = write_specs(tmp_path / "big", stream_yaml("BIG", "70MiB"))
    with pytest.raises(SpecError) as refused:
        asyncio.run(run.plan([big], opts))
    assert "of the account's 64.0 MiB (tier R1)" in str(refused.value)

    fits = write_specs(tmp_path / "fits", stream_yaml("FITS", "30MiB"))
    the_plan = asyncio.run(run.plan([fits], opts))
    assert the_plan.capacity is not None
    tiers = {(t.what, t.tier): (t.after, t.limit) for t in the_plan.capacity.totals}
    assert tiers[("file", "R1")] == (30 * MiB, 64 * MiB)
    assert tiers[("streams", "R1")] == (2, 3)  # FITS and the lock bucket apply makes


async def _raw(server: NatsServer, config: dict[str, Any]) -> int | None:
    """Create ``config`` with the raw API as the account's user: the error code, or None."""
    nc = await nats.connect(server.url, user="team", password="s3cret")
    try:
        subject = f"$JS.API.STREAM.CREATE.{config['name']}"
        reply = json.loads((await nc.request(subject, json.dumps(config).encode())).data)
        return int(reply["error"]["err_code"]) if "error" in reply else None
    finally:
        await nc.close()


@pytest.mark.parametrize("version", [*SERVER_MATRIX, None], ids=[*SERVER_MATRIX, "newest"])
def test_the_plan_refuses_exactly_what_each_server_refuses(
    server_factory: Callable[..., NatsServer], tmp_path: Path, version: str | None
) -> None:
    """At a 64 MiB limit's edge, on every server of the matrix: the plan says no where
    the server says no (err 10047), and only there. 40 + 24 MiB fill it exactly
    (accepted); then one byte more is refused, and so is a stream without max_bytes;
    with 24 MiB + 1 byte in the place of 24 MiB it is refused, an unlimited one is not."""
    server = server_factory(
        version=version,
        config={
            "accounts": {
                "TEAM": {
                    "jetstream": {"max_file": 64 * MiB, "max_mem": 8 * MiB},
                    "users": [{"user": "team", "password": "s3cret"}],
                }
            }
        },
    )

    def plans(*documents: str) -> bool:
        specs = write_specs(tmp_path / f"specs{len(list(tmp_path.iterdir()))}", *documents)
        planned = reconcile("plan", str(specs), "--server", server.url, *USER, cwd=tmp_path)
        assert planned.returncode in (0, 1) and "Traceback" not in planned.stderr
        return planned.returncode == 0

    def creates(name: str, size: int) -> bool:
        config = {"name": name, "subjects": [f"{name.lower()}.>"], "max_bytes": size}
        code = asyncio.run(_raw(server, config))
        assert code in (None, 10047)
        return code is None

    base = stream_yaml("BASE", "40MiB")
    assert plans(base, stream_yaml("EXACT", "24MiB"))
    assert creates("BASE", 40 * MiB) and creates("EXACT", 24 * MiB)
    exact = stream_yaml("EXACT", "24MiB")
    assert not plans(base, exact, stream_yaml("BYTE", "1"))
    assert not creates("BYTE", 1)
    assert not plans(base, exact, stream_yaml("UNLIMITED", None))
    assert not creates("UNLIMITED", -1)

    asyncio.run(_delete_raw(server, "EXACT"))
    assert not plans(base, stream_yaml("NEAR", str(24 * MiB + 1)))
    assert not creates("NEAR", 24 * MiB + 1)
    assert plans(base, stream_yaml("UNLIMITED", None))
    assert creates("UNLIMITED", -1)


async def _delete_raw(server: NatsServer, name: str) -> None:
    nc = await nats.connect(server.url, user="team", password="s3cret")
    try:
        await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"")
    finally:
        await nc.close()
