"""Updates that delete stored messages in place are destructive: planned as such, with an
estimate, and refused unless --allow-data-loss. Messages are published first and counted
after every apply, on a real nats-server."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from servers import NatsServer, run

from reconciler.errors import RefusedPlan
from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.planning.steps import Update

pytestmark = pytest.mark.integration

#: (name, spec before, spec after, stream, subjects to publish to, published, kept after)
CASES: list[tuple[str, str, str, str, list[str], int, int | None]] = [
    ("max_msgs", "max_msgs: 1000", "max_msgs: 10", "S", ["s.a"], 100, 10),
    ("max_bytes", "max_bytes: 1MiB", "max_bytes: 1KiB", "S", ["s.a"], 100, None),
    ("max_age", "max_age: 7d", "max_age: 1s", "S", ["s.a"], 100, None),
    ("per_subject", "max_msgs_per_subject: 100", "max_msgs_per_subject: 1", "S", ["s.a"], 100, 1),
    ("retention", "retention: limits", "retention: interest", "S", ["s.a"], 100, 0),
]
BUCKETS: list[tuple[str, str, str, str, str]] = [
    ("kv_history", "KeyValue", "history: 10", "history: 1", "KV_b"),
    ("kv_ttl", "KeyValue", "history: 8\nttl: 1d", "history: 8\nttl: 1s", "KV_b"),
    ("kv_undeclared_history", "KeyValue", "history: 8", "description: mine", "KV_b"),
    ("obj_ttl", "ObjectStore", "ttl: 1d", "ttl: 1s", "OBJ_b"),
]


def stream_spec(fields: str) -> str:
    return f"kind: Stream\nname: S\nsubjects: ['s.>']\nstorage: memory\n{fields}\n"


def bucket_spec(kind: str, fields: str) -> str:
    return f"kind: {kind}\nname: b\nstorage: memory\n{fields}\n"


def write(tmp_path: Path, text: str) -> list[Path]:
    path = tmp_path / "specs.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return [path]


def options(server: NatsServer) -> ConnectionOptions:
    return ConnectionOptions(servers=server.url)


async def _publish(server: NatsServer, subjects: list[str], count: int) -> None:
    async with open_client(options(server)) as client:
        for i in range(count):
            await client.publish(subjects[i % len(subjects)], json.dumps({"n": i}).encode())


async def _count(server: NatsServer, stream: str) -> int:
    async with open_client(options(server)) as client:
        info = await client.stream_info(stream)
        return int(info["state"]["messages"])


def count(server: NatsServer, stream: str) -> int:
    return run(_count(server, stream))


def fewer_than(server: NatsServer, stream: str, n: int, *, seconds: float = 10.0) -> int:
    """The stream's count once it is below ``n`` (max_age deletes as messages age)."""
    deadline = time.monotonic() + seconds
    while (left := count(server, stream)) >= n and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def check_refused_then_allowed(
    tmp_path: Path, server: NatsServer, after: str, stream: str, published: int
) -> list[Any]:
    paths = write(tmp_path, after)
    plan = run(engine.plan(paths, options(server)))
    lossy = [s for s in plan.changes if isinstance(s, Update) and s.destructive]
    assert lossy, plan.to_json()
    assert all(change["destructive"] and change["loss"] for change in plan.to_json()["changes"])
    for flags in ({}, {"allow_replace": True}):  # --allow-replace does not allow it
        with pytest.raises(RefusedPlan, match="--allow-data-loss"):
            run(engine.apply(paths, options(server), lock_timeout=None, **flags))
        assert count(server, stream) == published  # nothing changed
    run(engine.apply(paths, options(server), lock_timeout=None, allow_data_loss=True))
    assert not run(engine.plan(paths, options(server))).has_changes
    return [loss for step in lossy for loss in step.losses]


@pytest.mark.parametrize(("name", "before", "after", "stream", "subjects", "n", "kept"), CASES)
def test_a_lossy_stream_update_is_refused_without_allow_data_loss(
    clean_server: NatsServer,
    tmp_path: Path,
    name: str,
    before: str,
    after: str,
    stream: str,
    subjects: list[str],
    n: int,
    kept: int | None,
    figures,
) -> None:
    run(
        engine.apply(write(tmp_path, stream_spec(before)), options(clean_server), lock_timeout=None)
    )
    run(_publish(clean_server, subjects, n))
    assert count(clean_server, stream) == n
    losses = check_refused_then_allowed(tmp_path, clean_server, stream_spec(after), stream, n)
    left = fewer_than(clean_server, stream, n)
    assert left < n
    if kept is not None:
        assert left == kept
        computed = [loss.messages for loss in losses if loss.messages is not None]
        assert computed == [] or computed[0] <= n - left
    figures.add("shrink_kinds")
    figures.add("messages_checked", 3 * n)


@pytest.mark.parametrize(("name", "kind", "before", "after", "stream"), BUCKETS)
def test_a_lossy_bucket_update_is_refused_without_allow_data_loss(
    clean_server: NatsServer,
    tmp_path: Path,
    name: str,
    kind: str,
    before: str,
    after: str,
    stream: str,
    figures,
) -> None:
    run(
        engine.apply(
            write(tmp_path, bucket_spec(kind, before)), options(clean_server), lock_timeout=None
        )
    )
    keys = [f"k{i % 2}" for i in range(8)]  # two keys, four revisions each
    subjects = [f"$KV.b.{k}" for k in keys] if kind == "KeyValue" else ["$O.b.C.chunk"]
    run(_publish(clean_server, subjects, 8))
    assert count(clean_server, stream) == 8
    check_refused_then_allowed(tmp_path, clean_server, bucket_spec(kind, after), stream, 8)
    assert fewer_than(clean_server, stream, 8) < 8
    figures.add("shrink_kinds")
    figures.add("messages_checked", 3 * 8)


def test_a_growing_limit_is_an_ordinary_update(clean_server: NatsServer, tmp_path: Path) -> None:
    run(
        engine.apply(
            write(tmp_path, stream_spec("max_msgs: 10")), options(clean_server), lock_timeout=None
        )
    )
    run(_publish(clean_server, ["s.a"], 10))
    paths = write(tmp_path, stream_spec("max_msgs: 1000\ndescription: more room"))
    plan = run(engine.plan(paths, options(clean_server)))
    assert plan.changes and not plan.destructive_steps
    run(engine.apply(paths, options(clean_server), lock_timeout=None))
    assert count(clean_server, "S") == 10


def test_pruning_or_replacing_a_consumer_loses_its_state_and_needs_a_flag(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    consumer = "---\nkind: Consumer\nstream: S\nname: C\nack_policy: explicit\n"
    paths = write(tmp_path, stream_spec("") + consumer)
    run(engine.apply(paths, options(clean_server), lock_timeout=None))
    alone = write(tmp_path, stream_spec(""))
    plan = run(engine.plan(alone, options(clean_server), prune=True))
    (delete,) = plan.to_json()["changes"]
    assert delete["action"] == "delete" and delete["destructive"]
    assert "acknowledgement state" in delete["loss"][0]["summary"]
    with pytest.raises(RefusedPlan):
        run(engine.apply(alone, options(clean_server), prune=True, lock_timeout=None))

    async def consumers() -> list[str]:
        async with open_client(options(clean_server)) as client:
            return [c["name"] for c in await client.list_consumers("S")]

    assert run(consumers()) == ["C"]
    run(
        engine.apply(
            alone, options(clean_server), prune=True, allow_replace=True, lock_timeout=None
        )
    )
    assert run(consumers()) == []
