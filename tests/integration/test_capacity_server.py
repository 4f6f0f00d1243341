"""The server's own JetStream limits (issue 39, docs/capacity.md), on real servers: a
server started with ``jetstream { max_file_store }`` and accounts without limits.

- Read from the monitoring endpoint (``--monitor``) or through a system account user
  (``--system-context``), an over-committed plan is refused before any step.
- Not read, the plan says the server's limits are unknown (never "no limit"); and when
  the server then refuses a step for room, apply removes again what it created itself
  while still empty, and says so; what holds messages, or is not its own any more, stays.
- A KeyValue entry over the server's ``max_payload`` is refused by the plan (it was a
  ``MaxPayloadError`` traceback after the bucket was made, on every re-run).

Every test counts the streams and their messages with a raw client before and after.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import SERVER_MATRIX, Cluster, NatsServer, run, unused_port
from test_capacity import MiB, limited, stream_yaml, write_specs
from test_capacity import options as limited_options
from test_lifecycle import _publish, _request

from reconciler.errors import ApplyFailed, SpecError
from reconciler.execution import run as engine
from reconciler.execution.apply import StepEvent
from reconciler.execution.requests import Quiet
from reconciler.jetstream import ConnectionOptions

LOCKS = "KV_RECONCILE_LOCKS"


def small_server(factory: Callable[..., NatsServer], tmp_path: Path, **config: Any) -> NatsServer:
    """A server whose own JetStream store is 20 MiB of file and 8 MiB of memory."""
    store = {"store_dir": str(tmp_path / "js"), "max_file_store": 20 * MiB}
    store["max_memory_store"] = 8 * MiB
    return factory(config={"jetstream": store, **config})


def census(url: str) -> dict[str, int]:
    """Every stream (the apply lock's bucket left out) and its messages, read raw."""
    names = run(_request(url, "$JS.API.STREAM.NAMES", {})).get("streams") or []
    found = {}
    for name in set(names) - {LOCKS}:
        info = run(_request(url, f"$JS.API.STREAM.INFO.{name}"))
        found[name] = int(info["state"]["messages"])
    return found


def _create_raw(url: str, name: str, max_bytes: int) -> None:
    config = {"name": name, "subjects": [f"{name.lower()}.>"], "max_bytes": max_bytes}
    answer = run(_request(url, f"$JS.API.STREAM.CREATE.{name}", config))
    assert "error" not in answer, answer


def test_server_limits_from_the_monitoring_endpoint_refuse_an_over_commit(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Two streams of 15 MiB on a server of 20 MiB: the plan said "30.0 MiB (no
    limit)" and apply made one of them. With --monitor both are refused, at their
    max_bytes lines, in plan and apply; nothing is created, no message is lost."""
    server = small_server(server_factory, tmp_path)
    _create_raw(server.url, "KEEP", 1 * MiB)
    run(_publish(server.url, "keep.x", 5))
    before = census(server.url)
    specs = write_specs(tmp_path / "specs", stream_yaml("A", "15MiB"), stream_yaml("B", "15MiB"))
    where = ["--server", server.url, "--monitor", server.monitor_url]

    planned = reconcile("plan", str(specs), *where, cwd=tmp_path)
    applied = reconcile("apply", str(specs), *where, "--yes", cwd=tmp_path)

    for result in (planned, applied):
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        assert f"{specs / 'streams.yaml'}:5" in result.stderr  # A's max_bytes
        assert f"{specs / 'streams.yaml'}:11" in result.stderr  # B's max_bytes
        assert "20.0 MiB (max_file_store" in result.stderr
    assert census(server.url) == before


@pytest.mark.parametrize("version", [*SERVER_MATRIX, None], ids=[*SERVER_MATRIX, "newest"])
def test_every_server_release_reports_its_limits_to_the_plan(
    server_factory: Callable[..., NatsServer], tmp_path: Path, version: str | None
) -> None:
    """/jsz carries the server's id, limits and reservations on 2.10 to 2.15: the plan
    refuses the same over-commit on each (a URL ending in /jsz is taken as it is)."""
    store = {"store_dir": str(tmp_path / "js"), "max_file_store": 20 * MiB}
    server = server_factory(version=version, config={"jetstream": store})
    _create_raw(server.url, "KEEP", 8 * MiB)
    specs = write_specs(tmp_path / "specs", stream_yaml("A", "15MiB"))
    fits = write_specs(tmp_path / "fits", stream_yaml("A", "12MiB"))

    for monitor in (server.monitor_url, f"{server.monitor_url}/jsz"):
        options = ConnectionOptions(servers=server.url, monitor=monitor)
        with pytest.raises(SpecError) as refused:
            run(engine.plan([specs], options))
        assert "23.0 MiB of the server's 20.0 MiB" in refused.value.problems[0].message
        planned = run(engine.plan([fits], options))
        assert planned.capacity is not None and planned.capacity.server_known
    assert census(server.url) == {"KEEP": 0}


def test_unread_server_limits_are_said_to_be_unknown_never_no_limit(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    server = small_server(server_factory, tmp_path)
    specs = write_specs(tmp_path / "specs", stream_yaml("A", "5MiB"))

    unread = reconcile("plan", str(specs), "--server", server.url, "--format", "json", cwd=tmp_path)
    text = reconcile("plan", str(specs), "--server", server.url, cwd=tmp_path)
    read = reconcile(
        "plan", str(specs), "--server", server.url, "--monitor", server.monitor_url, cwd=tmp_path
    )

    assert unread.returncode == text.returncode == read.returncode == 0, text.stderr
    said = json.loads(unread.stdout)["capacity"]["server_limits"]
    assert said["known"] is False and "--monitor" in said["said"]
    assert "(no limit)" not in text.stdout
    assert "the server's own limit is unknown" in text.stdout
    assert "server file storage reserved (every account): 0 B -> 5.0 MiB of 20.0 MiB" in read.stdout
    assert census(server.url) == {}


def _system_server(factory: Callable[..., NatsServer], tmp_path: Path) -> NatsServer:
    accounts = {
        "SYS": {"users": [{"user": "sys", "password": "sys-secret"}]},
        "APP": {"jetstream": "enabled", "users": [{"user": "app", "password": "app-secret"}]},
        "OTHER": {"jetstream": "enabled", "users": [{"user": "other", "password": "o"}]},
    }
    return small_server(factory, tmp_path, accounts=accounts, system_account="SYS")


@pytest.mark.parametrize(
    ("storage", "size"), [("file", "9MiB"), ("memory", "5MiB")], ids=["file", "memory"]
)
def test_the_system_account_reads_the_servers_limits_and_every_accounts_reservations(
    server_factory: Callable[..., NatsServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    storage: str,
    size: str,
) -> None:
    """Another account reserved 12 MiB of file (4 MiB of memory) on the server: this
    account's limits say nothing of it, the system account's JSZ does. A stream that
    would pass the server's store is refused naming its line; one that fits plans."""
    server = _system_server(server_factory, tmp_path)
    other = server.url.replace("nats://", "nats://other:o@")
    taken = {"file": 12 * MiB, "memory": 4 * MiB}[storage]
    config = {"name": "THEIRS", "subjects": ["theirs"], "max_bytes": taken, "storage": storage}
    assert "error" not in run(_request(other, "$JS.API.STREAM.CREATE.THEIRS", config))
    contexts = tmp_path / "config" / "nats" / "context"
    contexts.mkdir(parents=True)
    system = {"url": server.url, "user": "sys", "password": "sys-secret"}
    (contexts / "system.json").write_text(json.dumps(system))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    options = ConnectionOptions(
        servers=server.url, user="app", password="app-secret", system_context="system"
    )
    app = server.url.replace("nats://", "nats://app:app-secret@")
    over = write_specs(tmp_path / "over", stream_yaml("BIG", size, storage=storage))
    fits = write_specs(tmp_path / "fits", stream_yaml("SMALL", "1MiB", storage=storage))

    with pytest.raises(SpecError) as refused:
        run(engine.plan([over], options))
    fitting = run(engine.plan([fits], options))

    (problem,) = refused.value.problems
    assert str(problem.location) == f"{over / 'streams.yaml'}:5"
    assert "Stream BIG" in problem.message and "server's" in problem.message
    assert fitting.capacity is not None and fitting.capacity.server_known
    with pytest.raises(SpecError):
        run(engine.apply([over], options, approved=True))
    assert census(app) == {}  # nothing made in this account
    assert census(other) == {"THEIRS": 0}


class _Meddler(Quiet):
    """An apply's observer that, between its steps, does what another client might:
    publishes to one stream the apply created, deletes another and makes it again."""

    def __init__(self, url: str, actions: dict[str, Callable[[], Coroutine[Any, Any, None]]]):
        self.url = url
        self.actions = actions

    def step(self, event: StepEvent) -> None:
        action = self.actions.get(event.step.name)
        if event.outcome == "applied" and action is not None:
            thread = threading.Thread(target=asyncio.run, args=(action(),))
            thread.start()
            thread.join()


def test_an_apply_refused_for_room_removes_what_it_made_while_still_empty(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Server limits unknown: the plan passes, the server refuses Z for room after A,
    C and D were made. D (empty, this apply's own) is removed again; A, which got
    messages meanwhile, and C, deleted and made again by someone else, stay; so does
    KEEP, which this apply never made."""
    server = small_server(server_factory, tmp_path)
    _create_raw(server.url, "KEEP", 1 * MiB)
    run(_publish(server.url, "keep.x", 4))

    async def publish_to_a() -> None:
        await _publish(server.url, "a.x", 3)

    async def remake_c() -> None:
        await _request(server.url, "$JS.API.STREAM.DELETE.C")
        config = {"name": "C", "subjects": ["c.>"], "max_bytes": 4 * MiB}
        await _request(server.url, "$JS.API.STREAM.CREATE.C", config)

    specs = write_specs(
        tmp_path / "specs",
        stream_yaml("A", "4MiB"),
        stream_yaml("C", "4MiB"),
        stream_yaml("D", "1MiB"),
        stream_yaml("Z", "15MiB"),
    )
    observer = _Meddler(server.url, {"A": publish_to_a, "C": remake_c})

    with pytest.raises(ApplyFailed) as failed:
        run(
            engine.apply(
                [specs],
                ConnectionOptions(servers=server.url),
                observer=observer,
                approved=True,
                concurrency=1,
            )
        )

    report = failed.value.report
    assert report.removed == ["Stream D"]
    assert sorted(k.split(" (")[0] for k in report.kept) == ["Stream A", "Stream C"]
    assert "removed again" in str(failed.value)
    assert census(server.url) == {"KEEP": 4, "A": 3, "C": 0}


def test_the_cli_says_what_an_apply_refused_for_room_removed_again(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    server = small_server(server_factory, tmp_path)
    _create_raw(server.url, "KEEP", 1 * MiB)
    run(_publish(server.url, "keep.x", 4))
    specs = write_specs(tmp_path / "specs", stream_yaml("A", "15MiB"), stream_yaml("B", "15MiB"))

    applied = reconcile(
        "apply", str(specs), "--server", server.url, "--yes", "--concurrency", "1", cwd=tmp_path
    )

    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert "Traceback" not in applied.stderr
    assert "removed again (created by this apply, still empty): Stream A" in applied.stderr
    assert census(server.url) == {"KEEP": 4}
    again = reconcile("plan", str(specs), "--server", server.url, cwd=tmp_path)
    assert "+ create Stream A" in again.stdout  # converges from where it was


def test_a_keyvalue_entry_over_max_payload_is_refused_before_any_step(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """max_payload 4 KiB: a 6,000-byte entry crashed apply (MaxPayloadError) after the
    stream and the bucket were made, on every re-run. The plan refuses it, naming it."""
    server = small_server(server_factory, tmp_path, max_payload=4096)
    entry = "kind: KeyValueEntry\nbucket: cfg\nkey: {key}\nvalue: {value}\n"
    specs = write_specs(
        tmp_path / "specs",
        stream_yaml("ORDERS", "1MiB"),
        "kind: KeyValue\nname: cfg\n",
        entry.format(key="small", value="ok"),
        entry.format(key="big", value="x" * 6000),
    )

    for verb in ("plan", "apply", "apply"):
        yes = ["--yes"] if verb == "apply" else []
        result = reconcile(verb, str(specs), "--server", server.url, *yes, cwd=tmp_path)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        assert "KeyValueEntry cfg/big" in result.stderr
        assert "max_payload of 4096 bytes" in result.stderr
        assert f"{specs / 'streams.yaml'}:" in result.stderr
    assert census(server.url) == {}


def test_the_first_apply_explains_the_lock_bucket_among_the_streams(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Issue 40: the first apply on an empty server showed ``streams: 1 -> 2`` (the
    lock bucket it had just made) without a word; plan already said it."""
    server = small_server(server_factory, tmp_path)
    specs = write_specs(tmp_path / "specs", stream_yaml("A", "1MiB"))

    applied = reconcile("apply", str(specs), "--server", server.url, "--yes", cwd=tmp_path)

    assert applied.returncode == 0, applied.stderr
    assert "streams: 1 -> 2" in applied.stdout
    assert f"(the streams include {LOCKS}: apply's lock bucket" in applied.stdout
    assert census(server.url) == {"A": 0}


def test_a_backup_restores_into_a_server_with_a_small_max_payload(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """A restore sent 128 KiB per request: into a server started with ``max_payload:
    32768`` it failed (a MaxPayloadError traceback, then nothing restored). The chunks
    are cut to the server's max_payload: every message arrives."""
    origin = server_factory()
    target = server_factory(config={"max_payload": 32768})
    _create_raw(origin.url, "BIG", -1)

    async def fill() -> None:
        nc = await nats.connect(origin.url)
        try:
            for _ in range(300):
                await nc.request("big.x", os.urandom(1000), timeout=5)  # not compressible
        finally:
            await nc.close()

    run(fill())
    specs = write_specs(tmp_path / "specs", "kind: Stream\nname: BIG\nsubjects: [big.>]\n")
    backup = tmp_path / "backup"
    taken = reconcile(
        "backup", str(specs), "--out", str(backup), "--server", origin.url, cwd=tmp_path
    )
    assert taken.returncode == 0, taken.stderr

    restored = reconcile("restore", str(backup), "--server", target.url, "--yes", cwd=tmp_path)

    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "Traceback" not in restored.stderr
    assert census(target.url) == census(origin.url) == {"BIG": 300}


def test_a_monitoring_endpoint_that_fails_or_is_another_servers_stops_the_plan(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The user asked for the check: a monitoring URL that does not answer, or answers
    for another server, stops plan and apply with one line; nothing is created."""
    server = small_server(server_factory, tmp_path)
    elsewhere = server_factory()
    specs = write_specs(tmp_path / "specs", stream_yaml("A", "1MiB"))
    silent = f"http://127.0.0.1:{unused_port()}"

    for monitor in (silent, elsewhere.monitor_url):
        for verb in ("plan", "apply"):
            yes = ["--yes"] if verb == "apply" else []
            flags = ["--server", server.url, "--monitor", monitor, *yes]
            result = reconcile(verb, str(specs), *flags, cwd=tmp_path)
            assert result.returncode == 1, result.stdout + result.stderr
            assert "Traceback" not in result.stderr
            assert monitor in result.stderr or "reports server" in result.stderr
    assert census(server.url) == {}


def test_streams_made_by_another_client_meanwhile_roll_back_only_this_applys_own(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """An account at max_streams 3 (the lock bucket is one): the plan fits, then another
    client makes X between two steps, and the server refuses B (err 10027). A, made by
    this apply and empty, is removed again; X, someone else's, stays."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB, max_streams=3)
    team = server.url.replace("nats://", "nats://team:s3cret@")

    async def another_client() -> None:
        config = {"name": "X", "subjects": ["x.>"], "max_bytes": MiB}
        await _request(team, "$JS.API.STREAM.CREATE.X", config)

    specs = write_specs(tmp_path / "specs", stream_yaml("A", "1MiB"), stream_yaml("B", "1MiB"))
    with pytest.raises(ApplyFailed) as failed:
        run(
            engine.apply(
                [specs],
                limited_options(server),
                observer=_Meddler(team, {"A": another_client}),
                approved=True,
                concurrency=1,
            )
        )

    assert failed.value.report.removed == ["Stream A"]
    assert census(team) == {"X": 0}


def test_a_project_environment_names_the_monitoring_endpoint(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The project file's ``monitor:`` (from a variable) reads the server's limits for
    every plan and apply of the environment, as --monitor does."""
    server = small_server(server_factory, tmp_path)
    write_specs(tmp_path / "specs", stream_yaml("A", "15MiB"), stream_yaml("B", "15MiB"))
    (tmp_path / "reconcile.yaml").write_text(
        "owner: shop\nspecs: [specs]\nenvironments:\n"
        f"  prod:\n    servers: {server.url}\n    monitor: {{env: PROD_MONITOR}}\n"
    )
    env = {"PROD_MONITOR": server.monitor_url}

    planned = reconcile("plan", "--env", "prod", cwd=tmp_path, env=env)
    applied = reconcile("apply", "--env", "prod", "--yes", cwd=tmp_path, env=env)

    for result in (planned, applied):
        assert result.returncode == 1, result.stdout + result.stderr
        assert "20.0 MiB (max_file_store" in result.stderr
        assert "Traceback" not in result.stderr
    assert census(server.url) == {}


@pytest.mark.cluster
def test_a_cluster_says_its_servers_limits_are_not_checked(
    cluster: Cluster, tmp_path: Path
) -> None:
    """In a cluster each server has its own limits and the meta leader places each
    replica: one server's /jsz cannot say whether a stream fits, and the plan says so
    (not "no limit", and not a figure of one server passed off as the cluster's)."""
    specs = write_specs(tmp_path / "specs", stream_yaml("CAP_CL", "1MiB"))
    node = cluster.nodes[0]
    options = ConnectionOptions(servers=node.url, monitor=node.monitor_url)

    planned = run(engine.plan([specs], options))

    assert planned.capacity is not None and not planned.capacity.server_known
    assert "cluster" in planned.capacity.server
    assert all(total.scope == "account" for total in planned.capacity.totals)
