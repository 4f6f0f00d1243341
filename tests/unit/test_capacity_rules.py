"""The capacity computation (planning.capacity), pure: plans built from spec files
against live states and ``$JS.API.INFO`` answers shaped as nats-server 2.15.1 sends them
(docs/capacity.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from reconciler.model.migration import Record, planned_limits, temp_name
from reconciler.model.normalize import ownership_marker
from reconciler.model.state import LiveState, ServerInfo, StreamState
from reconciler.planning.capacity import Assessment, assess, reservation, scopes
from reconciler.planning.plan import build_plan
from reconciler.planning.steps import Migrate, Plan
from reconciler.planning.totals import Total
from reconciler.render.capacity import capacity_lines
from reconciler.specs.validate import load_specs

MiB = 1024 * 1024
SERVER = ServerInfo("2.15.1", 5)
CLUSTER = ServerInfo("2.15.1", 5, clustered=True, cluster_size=3)


def info(**limits: Any) -> dict[str, Any]:
    """An account's INFO answer with ``limits`` (the rest unlimited), nothing used."""
    base = {
        "max_memory": -1,
        "max_storage": -1,
        "max_streams": -1,
        "max_consumers": -1,
        "max_ack_pending": -1,
        "memory_max_stream_bytes": -1,
        "storage_max_stream_bytes": -1,
        "max_bytes_required": False,
    }
    return {"memory": 0, "storage": 0, "streams": 0, "consumers": 0, "limits": base | limits}


def stream(name: str, max_bytes: int = -1, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "subjects": [f"{name.lower()}.>"],
        "max_bytes": max_bytes,
        "storage": "file",
        "num_replicas": 1,
        **extra,
    }


def assessed(
    tmp_path: Path,
    text: str,
    account: dict[str, Any],
    live: dict[str, dict[str, Any]] | None = None,
    *,
    server: ServerInfo = SERVER,
    consumers: dict[tuple[str, str], dict[str, Any]] | None = None,
    prune: bool = False,
) -> Assessment:
    (tmp_path / "specs.yaml").write_text(text)
    specs = load_specs([tmp_path / "specs.yaml"])
    state = LiveState(server, streams=live or {}, consumers=consumers or {})
    the_plan = build_plan(specs, state, prune=prune)
    return assess(the_plan, state, account, specs)


def total(found: Assessment, what: str, tier: str | None = None) -> Total:
    return next(t for t in found.capacity.totals if t.what == what and t.tier == tier)


def test_unlimited_limits_are_none_and_never_warn(tmp_path: Path) -> None:
    found = assessed(tmp_path, "kind: Stream\nname: A\nmax_bytes: 100GiB\n", info())
    assert found.errors == ()
    assert found.capacity.warnings == ()
    assert total(found, "file").limit is None
    assert total(found, "file").after == 100 * 1024 * MiB


def test_flat_limits_count_replicas_tiers_do_not() -> None:
    config = stream("A", 10 * MiB, num_replicas=3)
    assert reservation(config, tiered=False) == 30 * MiB
    assert reservation(config, tiered=True) == 10 * MiB
    assert reservation(stream("B", -1, num_replicas=3), tiered=False) == 0


def test_tiered_accounts_have_one_scope_per_tier() -> None:
    account = info(max_storage=0)
    account["tiers"] = {
        "R1": {"storage": 5, "limits": info(max_storage=64 * MiB)["limits"]},
        "R3": {"storage": 0, "limits": info(max_storage=90 * MiB, max_streams=2)["limits"]},
    }
    found = scopes(account)
    assert list(found) == ["R1", "R3"]
    assert found["R3"].max_streams == 2
    assert found["R1"].bytes_limit["file"] == 64 * MiB
    assert found["R1"].used["file"] == 5
    assert list(scopes(info())) == [None]


def test_an_over_commit_names_each_resource_adding_at_its_max_bytes_line(tmp_path: Path) -> None:
    text = (
        "kind: Stream\nname: A\nmax_bytes: 40MiB\n---\n"
        "kind: Stream\nname: B\nmax_bytes: 30MiB\n---\n"
        "kind: Stream\nname: KEEP\nmax_bytes: 10MiB\n"
    )
    live = {"KEEP": stream("KEEP", 10 * MiB)}
    found = assessed(tmp_path, text, info(max_storage=64 * MiB), live)
    assert sorted(p.location.line for p in found.errors if p.location) == [3, 7]
    assert "80.0 MiB" in found.errors[0].message
    assert "64.0 MiB" in found.errors[0].message
    file_total = total(found, "file")
    assert (file_total.before, file_total.after) == (10 * MiB, 80 * MiB)


def test_replicas_multiply_on_a_flat_account(tmp_path: Path) -> None:
    text = "kind: Stream\nname: A\nmax_bytes: 30MiB\nnum_replicas: 3\n"
    found = assessed(tmp_path, text, info(max_storage=64 * MiB), server=CLUSTER)
    assert total(found, "file").after == 90 * MiB
    assert len(found.errors) == 1


def test_a_plan_within_ten_percent_warns_and_ninety_percent_is_the_edge(tmp_path: Path) -> None:
    near = assessed(
        tmp_path, "kind: Stream\nname: A\nmax_bytes: 58MiB\n", info(max_storage=64 * MiB)
    )
    assert near.errors == ()
    assert [w.warning for w in near.capacity.warnings] == [True]
    assert "91%" in near.capacity.warnings[0].message
    far = assessed(
        tmp_path, "kind: Stream\nname: A\nmax_bytes: 57MiB\n", info(max_storage=64 * MiB)
    )
    assert far.capacity.warnings == ()


def test_a_plan_adding_nothing_never_warns_nor_fails(tmp_path: Path) -> None:
    """An account already over a limit lowered since: a plan that adds nothing passes."""
    live = {"A": stream("A", 70 * MiB)}
    found = assessed(
        tmp_path, "kind: Stream\nname: A\nmax_bytes: 70MiB\n", info(max_storage=64 * MiB), live
    )
    assert found.errors == ()
    assert found.capacity.warnings == ()


def test_deletes_count_until_the_end_but_free_the_final_total(tmp_path: Path) -> None:
    live = {"OLD": stream("OLD", 50 * MiB, metadata=ownership_marker("default"))}
    found = assessed(
        tmp_path,
        "kind: Stream\nname: NEW\nmax_bytes: 50MiB\n",
        info(max_storage=64 * MiB),
        live,
        prune=True,
    )
    file_total = total(found, "file")
    assert (file_total.before, file_total.after, file_total.peak) == (50 * MiB, 50 * MiB, 100 * MiB)
    assert len(found.errors) == 1
    assert "apply deletes last" in found.errors[0].message


def test_a_shrink_and_a_grow_count_at_the_larger_until_applied(tmp_path: Path) -> None:
    live = {"A": stream("A", 40 * MiB)}
    found = assessed(
        tmp_path, "kind: Stream\nname: A\nmax_bytes: 10MiB\n", info(max_storage=64 * MiB), live
    )
    file_total = total(found, "file")
    assert (file_total.before, file_total.after, file_total.peak) == (40 * MiB, 10 * MiB, 40 * MiB)
    assert found.errors == ()


def test_an_unlimited_stream_needs_one_byte_free(tmp_path: Path) -> None:
    text = "kind: Stream\nname: FULL\nmax_bytes: 64MiB\n---\nkind: Stream\nname: FREE\n"
    found = assessed(tmp_path, text, info(max_storage=64 * MiB))
    assert [p.location.line for p in found.errors if p.location] == [5]
    assert "at least one byte" in found.errors[0].message


def test_memory_and_file_are_summed_apart(tmp_path: Path) -> None:
    text = "kind: Stream\nname: M\nstorage: memory\nmax_bytes: 20MiB\n"
    found = assessed(tmp_path, text, info(max_storage=10 * MiB, max_memory=32 * MiB))
    assert found.errors == ()
    assert total(found, "memory").after == 20 * MiB
    assert total(found, "file").after == 0


def test_buckets_count_with_their_replicas_line(tmp_path: Path) -> None:
    text = "kind: KeyValue\nname: cfg\nmax_bytes: 8MiB\nreplicas: 3\n"
    found = assessed(tmp_path, text, info(max_storage=20 * MiB), server=CLUSTER)
    assert total(found, "file").after == 24 * MiB
    assert [p.location.line for p in found.errors if p.location] == [3]


def test_max_streams_counts_creates(tmp_path: Path) -> None:
    text = "kind: Stream\nname: A\n---\nkind: Stream\nname: B\n"
    found = assessed(tmp_path, text, info(max_streams=2), {"X": stream("X")})
    assert total(found, "streams").after == 3
    assert len(found.errors) == 2
    assert "would make 3 streams; the account allows 2 (1 now)" in found.errors[0].message


def test_max_bytes_required_and_the_largest_stream(tmp_path: Path) -> None:
    text = "kind: Stream\nname: NONE\n---\nkind: Stream\nname: HUGE\nmax_bytes: 2GiB\n"
    account = info(max_bytes_required=True, storage_max_stream_bytes=1024 * MiB)
    found = assessed(tmp_path, text, account)
    messages = {p.location.line: p.message for p in found.errors if p.location}
    assert "max_bytes_required" in messages[1]
    assert "over the largest file stream the account allows (1.0 GiB)" in messages[6]


def test_the_account_limits_consumers_per_stream(tmp_path: Path) -> None:
    consumer = "kind: Consumer\nstream: S\nname: {}\nack_policy: explicit\n"
    declared = "kind: Stream\nname: S\nexternal: true\n---\n"
    text = declared + "---\n".join(consumer.format(f"c{i}") for i in range(3))
    live = {"S": stream("S"), "T": stream("T")}
    held = {("S", "old"): {"name": "old"}, ("T", "t1"): {"name": "t1"}, ("T", "t2"): {"name": "t2"}}
    found = assessed(tmp_path, text, info(max_consumers=3), live, consumers=held)
    assert len(found.errors) == 3  # S would hold 4; T's 2 are another stream's
    assert "4 consumers on stream S; the limit is 3 per stream" in found.errors[0].message


def test_a_tier_without_limits_is_refused(tmp_path: Path) -> None:
    account = info()
    account["tiers"] = {"R1": {"limits": info(max_storage=64 * MiB)["limits"]}}
    text = "kind: Stream\nname: A\nnum_replicas: 3\nmax_bytes: 1MiB\n"
    found = assessed(tmp_path, text, account, server=CLUSTER)
    assert [p.location.line for p in found.errors if p.location] == [3]
    assert "no limits for tier R3" in found.errors[0].message


def test_the_text_section_shows_before_after_and_the_share(tmp_path: Path) -> None:
    (tmp_path / "specs.yaml").write_text("kind: Stream\nname: A\nmax_bytes: 32MiB\n")
    specs = load_specs([tmp_path / "specs.yaml"])
    state = LiveState(SERVER)
    the_plan = build_plan(specs, state)
    found = assess(the_plan, state, info(max_storage=64 * MiB), specs)
    from dataclasses import replace

    lines = capacity_lines(replace(the_plan, capacity=found.capacity))
    assert "    file storage reserved: 0 B -> 32.0 MiB of 64.0 MiB (50%)" in lines
    # unchanged, no limit: no line
    assert not any(line.startswith("    memory storage reserved:") for line in lines)


def test_the_markdown_section_and_the_plan_json(tmp_path: Path) -> None:
    from dataclasses import replace

    from reconciler.render.markdown import render_markdown

    (tmp_path / "specs.yaml").write_text("kind: Stream\nname: A\nmax_bytes: 60MiB\n")
    specs = load_specs([tmp_path / "specs.yaml"])
    state = LiveState(SERVER)
    the_plan = build_plan(specs, state)
    found = assess(the_plan, state, info(max_storage=64 * MiB, max_streams=10), specs)
    shown = replace(the_plan, capacity=found.capacity)

    markdown = render_markdown(shown)
    assert "- file storage reserved: 0 B -> 60.0 MiB of 64.0 MiB (94%)" in markdown
    assert "- streams: 0 -> 1 of 10 (10%)" in markdown
    document = shown.to_json()["capacity"]
    assert document["warnings"][0]["severity"] == "warning"
    assert {t["resource"] for t in document["totals"]} == {"file", "memory", "streams"}
    assert the_plan.to_json()["capacity"] is None  # a plan nobody assessed says so


def _migrating(
    tmp_path: Path, text: str, live: dict[str, dict[str, Any]], held: StreamState | None = None
) -> tuple[list[Any], LiveState, Plan]:
    (tmp_path / "specs.yaml").write_text(text)
    specs = load_specs([tmp_path / "specs.yaml"])
    state = LiveState(SERVER, streams=live, stream_state={"ORDERS": held} if held else {})
    return specs, state, build_plan(specs, state, migrate=True)


#: ORDERS (file, max_bytes 40 MiB, discard new) to workqueue: a migration.
WORKQUEUE = "kind: Stream\nname: ORDERS\nmax_bytes: 40MiB\ndiscard: new\nretention: workqueue\n"


def _orders(**extra: Any) -> dict[str, Any]:
    return stream("ORDERS", 40 * MiB, discard="new", metadata=ownership_marker("default"), **extra)


def test_a_migrations_temporary_stream_reserves_its_max_bytes_from_the_handover(
    tmp_path: Path,
) -> None:
    """A discard-new target gives the temporary stream a max_bytes at the handover (the
    target's, from file to file), reserved in the old stream's storage beside the old
    stream, then beside the new one: 40 MiB to workqueue peaks at 80 MiB, over a 64 MiB
    account, refused at the max_bytes line (not a matter of deletes); the after figure
    has no temporary stream. Before, the peak was 40 MiB: the server refused the
    handover (err 10028)."""
    specs, state, plan = _migrating(tmp_path, WORKQUEUE, {"ORDERS": _orders()})
    [step] = plan.changes
    assert isinstance(step, Migrate)
    found = assess(plan, state, info(max_storage=64 * MiB), specs)
    file_total = total(found, "file")
    assert (file_total.before, file_total.after, file_total.peak) == (40 * MiB, 40 * MiB, 80 * MiB)
    [error] = found.errors
    assert error.location is not None and error.location.line == 3
    assert "migrating Stream ORDERS reserves 40.0 MiB more file storage" in error.message
    assert "40.0 MiB of it its temporary stream's max_bytes" in error.message
    assert "apply deletes last" not in error.message
    assert assess(plan, state, info(max_storage=80 * MiB), specs).errors == ()


def test_from_memory_to_file_the_temporary_stream_reserves_less_than_the_target(
    tmp_path: Path,
) -> None:
    """A file stream counts each message up to 18 bytes more than a memory one, so the
    temporary stream (memory) takes a max_bytes short of the target's by that much on
    every message it may take (model.migration._bytes_bound): what the server reserves
    (measured: the plan and the server agree within 50 bytes of 8 MiB)."""
    text = WORKQUEUE.replace("retention: workqueue", "storage: file").replace("40MiB", "5MiB")
    old = stream("ORDERS", 5 * MiB, storage="memory", discard="new")
    old["metadata"] = ownership_marker("default")
    held = StreamState(messages=100, bytes=100 * 1046)
    specs, state, plan = _migrating(tmp_path, text, {"ORDERS": old}, held)
    [step] = plan.changes
    assert isinstance(step, Migrate)
    limits = planned_limits(step.config, "memory", held, mirrors=True)
    assert 4.8 * MiB < limits["max_bytes"] < 5 * MiB
    found = assess(plan, state, info(max_memory=8 * MiB), specs)
    assert total(found, "memory").peak == 5 * MiB + limits["max_bytes"]
    assert "its temporary stream's max_bytes" in found.errors[0].message


def test_a_migration_past_its_handover_or_rolled_back_before_it_reserves_nothing_more(
    tmp_path: Path,
) -> None:
    """Interrupted: with its limits already set (the handover done, its phase not yet
    written) the temporary stream's max_bytes is a live stream's, counted once; a
    rollback before the handover deletes the temporary stream, which reserves nothing
    more; going on from the handover still adds it."""
    specs, _, plan = _migrating(tmp_path, WORKQUEUE, {"ORDERS": _orders()})
    [step] = plan.changes
    assert isinstance(step, Migrate)
    origin = _orders()
    record = Record("ORDERS", "handover", dict(step.config), {}, origin=origin, created="t")

    def peak(temp_bytes: int, config: Any) -> int:
        temp = stream(temp_name("ORDERS"), temp_bytes, metadata=record.metadata())
        live = {"ORDERS": origin, temp_name("ORDERS"): temp}
        resumed = replace(step, phase="handover", config=config)
        moved = Plan(SERVER, changes=(resumed,))
        found = assess(moved, LiveState(SERVER, streams=live), info(), specs)
        return total(found, "file").peak

    assert peak(40 * MiB, step.config) == 80 * MiB  # counted once: it is live
    assert peak(-1, step.config) == 80 * MiB  # to come at the handover
    assert peak(-1, origin) == 40 * MiB  # a rollback: nothing copied back


def test_the_lock_bucket_is_said_among_the_streams_only_when_they_are_shown(
    tmp_path: Path,
) -> None:
    """A plan moving a stream to memory storage showed only the storage lines, then
    `(the streams include KV_RECONCILE_LOCKS: ...)` under them: a note on a figure the
    plan did not show. It goes with the `streams:` line it explains."""
    from reconciler.planning.totals import Capacity

    (tmp_path / "specs.yaml").write_text("kind: Stream\nname: A\nmax_bytes: 1MiB\n")
    the_plan = build_plan(load_specs([tmp_path / "specs.yaml"]), LiveState(SERVER))
    lock = "KV_RECONCILE_LOCKS"
    memory = Total("memory", None, 0, MiB, MiB, None)
    streams = Total("streams", None, 1, 2, 2, None)

    storage_only = capacity_lines(replace(the_plan, capacity=Capacity((memory,), lock=lock)))
    assert any(line.startswith("    memory storage reserved:") for line in storage_only)
    assert not any(lock in line for line in storage_only), storage_only

    counted = capacity_lines(replace(the_plan, capacity=Capacity((memory, streams), lock=lock)))
    assert "    streams: 1 -> 2 (no account limit)" in counted
    assert any(f"the streams include {lock}" in line for line in counted), counted
