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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import Cluster, NatsServer

from reconciler.errors import SpecError
from reconciler.execution import run
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
    }
    streams = next(t for t in capacity["totals"] if t["resource"] == "streams")
    assert (streams["before"], streams["after"], streams["limit"]) == (0, 1, 10)
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
    assert "would make 3 streams; the account allows 2 (0 now)" in planned.stderr
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
    # --no-lock: the apply lock's own bucket sets no max_bytes either (the server refuses
    # it with err 10113 on such an account: docs/capacity.md)
    applied = reconcile(
        "apply", str(specs), "--server", server.url, *USER, "--yes", "--no-lock", cwd=tmp_path
    )

    for result in (planned, applied):
        assert result.returncode == 1
        assert f"{specs / 'streams.yaml'}:7" in result.stderr  # the UNBOUNDED document
        assert "requires every stream to set it (max_bytes_required)" in result.stderr
    assert census(server) == {}


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
