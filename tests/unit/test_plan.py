"""Plans: matching by identity, steps and notes, ordering, safety, and the JSON document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from live_samples import SERVER, live_of

from reconciler.errors import SpecError, UnsupportedField
from reconciler.locations import Location
from reconciler.model.normalize import desired_config
from reconciler.model.state import LiveState, ServerInfo
from reconciler.planning.drift import from_plan
from reconciler.planning.memo import Memo
from reconciler.planning.plan import ADOPT_REASON, build_plan
from reconciler.planning.steps import Create, Delete, Plan, Replace, Unchanged, Update
from reconciler.specs.spec import CLAIM_KEY, MANAGED_KEY, Kind, Spec

SCHEMA = json.loads((Path(__file__).parents[2] / "schemas" / "plan.schema.json").read_text())
SECOND = 1_000_000_000


def spec(kind: Kind, name: str, stream: str | None = None, **config: Any) -> Spec:
    external = bool(config.pop("external", False))
    line = 1 + sum(map(ord, name)) % 50
    return Spec(kind, name, config, Location("specs.yaml", line), stream=stream, external=external)


def merged(*states: LiveState) -> LiveState:
    streams: dict[str, Any] = {}
    consumers: dict[tuple[str, str], Any] = {}
    for state in states:
        streams.update(state.streams)
        consumers.update(state.consumers)
    return LiveState(server=SERVER, streams=streams, consumers=consumers)


ORDERS = spec("Stream", "ORDERS", subjects=["orders.>"])
WORKER = spec("Consumer", "worker", "ORDERS", ack_policy="explicit")


def test_missing_resources_are_created_streams_before_consumers() -> None:
    plan = build_plan([WORKER, ORDERS], LiveState(server=SERVER))
    assert [(type(s), s.name) for s in plan.changes] == [(Create, "ORDERS"), (Create, "worker")]
    assert plan.summary == {"create": 2, "update": 0, "replace": 0, "delete": 0, "unchanged": 0}
    assert plan.changes[0].config == desired_config(ORDERS, SERVER)
    assert plan.changes[0].source == ORDERS.source


def test_a_create_lists_the_fields_set_away_from_the_defaults() -> None:
    plan = build_plan([spec("Stream", "S", max_age=3600 * SECOND)], LiveState(server=SERVER))
    fields = {f.path: (f.before, f.after) for f in plan.changes[0].fields}
    assert fields == {"max_age": (None, 3600 * SECOND)}


def test_applied_specs_plan_no_changes() -> None:
    specs = [ORDERS, WORKER, spec("KeyValue", "cfg", history=3), spec("ObjectStore", "blobs")]
    plan = build_plan(specs, live_of(*specs))
    assert not plan.has_changes
    assert plan.summary["unchanged"] == 4
    assert all(isinstance(entry, Unchanged) for entry in plan.unchanged)


def test_a_changed_field_is_an_update_with_before_and_after() -> None:
    changed = spec("Stream", "ORDERS", subjects=["orders.>"], max_age=7200 * SECOND)
    plan = build_plan([changed], live_of(ORDERS))
    (step,) = plan.changes
    assert isinstance(step, Update) and not step.destructive
    assert [(f.path, f.before, f.after) for f in step.fields] == [("max_age", 0, 7200 * SECOND)]
    assert step.reasons == ()


def test_an_immutable_change_is_a_destructive_replace_with_its_reason() -> None:
    memory = spec("Stream", "ORDERS", subjects=["orders.>"], storage="memory")
    plan = build_plan([memory], live_of(ORDERS))
    (step,) = plan.changes
    assert isinstance(step, Replace) and step.destructive
    assert "storage cannot be changed" in step.reasons
    assert plan.destructive_steps == (step,)


def test_consumers_of_a_replaced_stream_are_recreated_after_it() -> None:
    memory = spec("Stream", "ORDERS", subjects=["orders.>"], storage="memory")
    plan = build_plan([memory, WORKER], live_of(ORDERS, WORKER))
    stream_step, consumer_step = plan.changes
    assert isinstance(stream_step, Replace)
    assert "its consumers are deleted with it: worker" in stream_step.reasons
    assert isinstance(consumer_step, Create)
    assert consumer_step.reasons == ("re-created: stream ORDERS is replaced",)
    assert [[s.name for s in wave] for wave in plan.waves()] == [["ORDERS"], ["worker"]]


def test_unmanaged_live_resources_are_listed_never_touched() -> None:
    legacy = spec("Stream", "LEGACY")
    plan = build_plan([ORDERS], merged(live_of(ORDERS), live_of(legacy, managed=False)), prune=True)
    assert not plan.has_changes
    assert [(n.kind, n.name) for n in plan.unmanaged] == [("Stream", "LEGACY")]


def test_live_buckets_are_named_as_buckets() -> None:
    plan = build_plan([], live_of(spec("KeyValue", "cfg"), managed=False))
    assert [(n.kind, n.name) for n in plan.unmanaged] == [("KeyValue", "cfg")]


def test_managed_undeclared_resources_are_orphans_without_prune() -> None:
    old = spec("Stream", "OLD")
    plan = build_plan([ORDERS], live_of(ORDERS, old))
    assert not plan.has_changes
    assert [(n.name, n.reasons) for n in plan.orphans] == [
        ("OLD", ("no spec declares it: deleted with --prune",))
    ]


def test_prune_deletes_managed_undeclared_resources() -> None:
    old = spec("Stream", "OLD")
    gone = spec("Consumer", "gone", "ORDERS")
    plan = build_plan([ORDERS], live_of(ORDERS, old, gone), prune=True)
    assert [(type(s), s.kind, s.name) for s in plan.changes] == [
        (Delete, "Consumer", "gone"),
        (Delete, "Stream", "OLD"),
    ]
    consumer_delete, stream_delete = plan.changes
    assert consumer_delete.destructive and stream_delete.destructive  # consumer state is data
    assert "acknowledgement state" in consumer_delete.losses[0].summary
    assert stream_delete.reasons == ("its messages are deleted",)
    assert plan.summary["delete"] == 2


def test_declaring_an_unmanaged_resource_adopts_it_with_an_update() -> None:
    plan = build_plan([ORDERS], live_of(ORDERS, managed=False))
    (step,) = plan.changes
    assert isinstance(step, Update)
    assert step.reasons == (ADOPT_REASON,)
    assert [f.path for f in step.fields] == [f"metadata.{MANAGED_KEY}"]


def _claimed(live: LiveState, claim: str) -> LiveState:
    """``live`` with the Pulumi provider's claim in every resource's metadata."""

    def claimed(config: Any) -> dict[str, Any]:
        return {**config, "metadata": {**config["metadata"], CLAIM_KEY: claim}}

    return LiveState(
        server=live.server,
        streams={name: claimed(c) for name, c in live.streams.items()},
        consumers={key: claimed(c) for key, c in live.consumers.items()},
    )


def test_a_pulumi_claim_on_the_server_is_no_change_and_an_update_keeps_it() -> None:
    """The claim the Pulumi provider records (``CLAIM_KEY``) is the tool's own metadata:
    a plan (so drift, a Pulumi diff or refresh) never shows it, and an update, which
    replaces the whole metadata, sends it back."""
    specs = [ORDERS, WORKER, spec("KeyValue", "cfg", history=3)]
    live = _claimed(live_of(*specs), "c1")
    plan = build_plan(specs, live)
    assert not plan.has_changes and plan.summary["unchanged"] == 3
    assert {r.status for r in from_plan(plan).resources} == {"in_sync"}
    changed = [spec("Stream", "ORDERS", subjects=["orders.>"], max_age=3600 * SECOND)]
    changed.append(spec("Consumer", "worker", "ORDERS", ack_policy="explicit", max_deliver=3))
    steps = build_plan(changed, live).changes
    assert [(type(s), [f.path for f in s.fields]) for s in steps] == [
        (Update, ["max_age"]),
        (Update, ["max_deliver"]),
    ]
    assert all(s.config["metadata"][CLAIM_KEY] == "c1" for s in steps if isinstance(s, Update))
    declared = spec("Stream", "ORDERS", subjects=["orders.>"], metadata={CLAIM_KEY: "mine"})
    assert not build_plan([declared], live).has_changes  # a spec cannot write one either


def test_external_stream_is_never_a_step_but_hosts_consumers() -> None:
    shared = spec("Stream", "SHARED", external=True)
    limited = spec("Stream", "SHARED", consumer_limits={"max_ack_pending": 7})
    consumer = spec("Consumer", "mine", "SHARED", ack_policy="explicit")
    plan = build_plan([shared, consumer], live_of(limited, managed=False))
    (step,) = plan.changes
    assert isinstance(step, Create) and step.name == "mine"
    assert step.config is not None and step.config["max_ack_pending"] == 7
    assert not plan.unmanaged


def test_missing_external_stream_is_a_plan_error_at_its_file_line() -> None:
    shared = spec("Stream", "SHARED", external=True)
    with pytest.raises(SpecError, match=r"specs\.yaml:\d+: external stream SHARED does not exist"):
        build_plan([shared], LiveState(server=SERVER))


def test_consumer_of_an_unknown_stream_is_a_plan_error() -> None:
    with pytest.raises(SpecError, match="stream ORDERS is neither declared nor on the server"):
        build_plan([WORKER], LiveState(server=SERVER))


def test_a_field_the_server_does_not_know_stops_the_plan() -> None:
    old = ServerInfo(version="2.10.26", api_level=0)
    ttl = spec("Stream", "T", allow_msg_ttl=True)
    with pytest.raises(UnsupportedField, match=r"needs nats-server 2\.11 or newer"):
        build_plan([ttl], LiveState(server=old))


def test_origins_come_before_the_streams_that_mirror_or_source_them() -> None:
    mirror = spec("Stream", "A_MIRROR", mirror={"name": "Z_ORIGIN"})
    agg = spec("Stream", "AGG", sources=[{"name": "A_MIRROR"}])
    origin = spec("Stream", "Z_ORIGIN")
    plan = build_plan([agg, mirror, origin], LiveState(server=SERVER))
    assert [s.name for s in plan.changes] == ["Z_ORIGIN", "A_MIRROR", "AGG"]
    assert [[s.name for s in wave] for wave in plan.waves()] == [
        ["Z_ORIGIN"],
        ["A_MIRROR"],
        ["AGG"],
    ]


def test_deletes_run_last_and_in_reverse_dependency_order() -> None:
    origin = spec("Stream", "ORIGIN")
    copy = spec("Stream", "COPY", mirror={"name": "ORIGIN"})
    new = spec("Stream", "NEW")
    plan = build_plan([new], live_of(origin, copy), prune=True)
    assert [(s.action, s.name) for s in plan.changes] == [
        ("create", "NEW"),
        ("delete", "COPY"),
        ("delete", "ORIGIN"),
    ]


def test_independent_steps_share_a_wave() -> None:
    specs = [spec("Stream", "A"), spec("Stream", "B"), spec("KeyValue", "c")]
    waves = build_plan(specs, LiveState(server=SERVER)).waves()
    assert [[s.name for s in wave] for wave in waves] == [["A", "B", "c"]]


def test_unknown_live_fields_are_preserved_in_the_config_to_send() -> None:
    live = live_of(ORDERS)
    raw = {**live.streams["ORDERS"], "future_flag": True}
    changed = spec("Stream", "ORDERS", subjects=["orders.>"], description="d")
    plan = build_plan([changed], LiveState(server=SERVER, streams={"ORDERS": raw}))
    (step,) = plan.changes
    assert step.preserve == {"future_flag": True}
    assert step.config is not None and step.config["future_flag"] is True
    assert [f.path for f in step.fields] == ["description"]


def test_plan_json_follows_the_schema() -> None:
    memory = spec("Stream", "ORDERS", subjects=["orders.>"], storage="memory")
    state = merged(
        live_of(ORDERS, WORKER, spec("Stream", "OLD")), live_of(spec("Stream", "X"), managed=False)
    )
    plan = build_plan([memory, WORKER, spec("KeyValue", "cfg")], state, prune=True)
    document = plan.to_json()
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert document["format_version"] == 1
    assert document["summary"] == {
        "create": 2,
        "update": 0,
        "replace": 1,
        "delete": 1,
        "unchanged": 0,
    }
    replace = next(c for c in document["changes"] if c["action"] == "replace")
    assert replace["destructive"] is True and replace["source"].startswith("specs.yaml:")
    assert {"path": "storage", "before": "file", "after": "memory"} in replace["fields"]
    assert document["unmanaged"] == [{"kind": "Stream", "name": "X", "stream": None}]


def test_the_schema_rejects_a_plan_without_a_summary() -> None:
    document = Plan(server=SERVER).to_json()
    del document["summary"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(SCHEMA).validate(document)


def test_the_apply_lock_bucket_is_never_listed() -> None:
    plan = build_plan([], live_of(spec("KeyValue", "RECONCILE_LOCKS"), managed=False))
    assert not plan.unmanaged and not plan.has_changes


def test_a_sourcing_cycle_still_orders_every_step() -> None:
    a = spec("Stream", "A", sources=[{"name": "B"}])
    b = spec("Stream", "B", sources=[{"name": "A"}])
    c = spec("Stream", "C")
    plan = build_plan([a, b, c], LiveState(server=SERVER))
    waves = plan.waves()
    assert [s.name for s in waves[0]] == ["C"]
    assert sorted(s.name for wave in waves for s in wave) == ["A", "B", "C"]


def test_deleting_a_stream_names_the_consumers_going_with_it() -> None:
    old = spec("Stream", "OLD")
    plan = build_plan([], live_of(old, spec("Consumer", "c1", "OLD")), prune=True)
    (step,) = plan.changes
    assert step.reasons == ("its messages are deleted", "its consumers are deleted with it: c1")


def test_a_create_lists_only_the_declared_fields() -> None:
    push = spec("Consumer", "PUSH", stream="ORDERS", deliver_subject="out", ack_policy="explicit")
    mirror = spec("Stream", "COPY", mirror={"name": "ORDERS"})
    kv = spec("KeyValue", "cfg", history=5, ttl=3_600_000_000_000)
    plan = build_plan([ORDERS, push, mirror, kv], LiveState(server=SERVER))
    fields = {step.name: {f.path for f in step.fields} for step in plan.changes}
    assert fields["PUSH"] == {"deliver_subject", "ack_policy"}  # not max_waiting: 0
    assert fields["COPY"] == {"mirror"}  # not subjects: (absent)
    assert fields["cfg"] == {"max_msgs_per_subject", "max_age"}


def test_plans_and_apply_results_have_a_repr_that_does_not_grow_with_them() -> None:
    """asyncio.run() on Python 3.11/3.12 builds the repr of what a coroutine returns:
    at 100k steps a dataclass repr costs seconds and hundreds of MB."""
    from reconciler.execution.apply import ApplyResult
    from reconciler.identity import ResourceRef
    from reconciler.model.state import ServerInfo
    from reconciler.planning.steps import Create, Plan

    def sized(n: int) -> tuple[str, str]:
        steps = tuple(
            Create(ref=ResourceRef("Stream", f"S{i}"), config={"name": f"S{i}"}) for i in range(n)
        )
        plan = Plan(server=ServerInfo("2.12.8", 3), changes=steps)
        return repr(plan), repr(ApplyResult(plan=plan, dry_run=False, applied=steps))

    small, large = sized(1), sized(5_000)
    assert len(large[0]) - len(small[0]) < 10 and len(large[1]) - len(small[1]) < 20


def test_a_live_state_has_a_repr_that_does_not_grow_with_it() -> None:
    """The same for what a read returns (``export`` and ``snapshot`` asyncio.run() one)."""

    def sized(n: int) -> str:
        consumers = {("S", f"C{i}"): {"durable_name": f"C{i}"} for i in range(n)}
        return repr(LiveState(server=SERVER, streams={"S": {"name": "S"}}, consumers=consumers))

    small, large = sized(1), sized(21_000)
    assert "C0" not in large and len(large) - len(small) < 10


def test_a_memo_answers_only_for_exactly_the_inputs_it_was_computed_from() -> None:
    """A re-plan with the memo of an earlier plan is the plan computed from scratch, for
    every input that changed since: the live config, the spec, the stream a consumer is
    planned against; other servers and other owners never share answers."""
    audit = spec("Consumer", "audit", "ORDERS", ack_policy="explicit", ack_wait=30 * SECOND)
    specs = [ORDERS, WORKER, audit]
    live = live_of(*specs)
    first = Memo.for_plan(SERVER, "default")
    fresh = build_plan(specs, live, memo=first)
    assert len(fresh.unchanged) == 3 and first.hits == 0 and len(first.found) == 3

    def replan(specs: list[Spec], live: LiveState) -> tuple[Plan, int]:
        memo = Memo(first.salt, first.found)
        remembered = build_plan(specs, live, memo=memo)
        assert remembered == build_plan(specs, live)  # never another answer
        return remembered, memo.hits

    assert replan(specs, live) == (fresh, 3)
    drifted = dict(live.consumers)
    drifted[("ORDERS", "audit")] = {**drifted[("ORDERS", "audit")], "ack_wait": 5 * SECOND}
    out_of_band = LiveState(server=SERVER, streams=live.streams, consumers=drifted)
    plan, hits = replan(specs, out_of_band)
    assert [(s.action, s.name) for s in plan.steps] == [("update", "audit")] and hits == 2
    bigger = spec("Stream", "ORDERS", subjects=["orders.>"], max_msgs=10)
    plan, hits = replan([bigger, WORKER, audit], live)
    assert [(s.action, s.name) for s in plan.steps] == [("update", "ORDERS")]
    assert hits == 0  # the consumers are planned against another stream config
    newer = ServerInfo(version="2.14.0", api_level=4)
    assert Memo.for_plan(newer, "default").salt != first.salt
    assert Memo.for_plan(SERVER, "shop").salt != first.salt


def test_one_memo_keeps_same_named_specs_of_two_environments_apart() -> None:
    """The fleet plans every environment's ORDERS with one memo per server: a spec with
    the same name and another config is never answered with the first one's digest."""
    dev = spec("Stream", "ORDERS", subjects=["orders.>"])
    prod = spec("Stream", "ORDERS", subjects=["orders.>"], max_msgs=10)
    live = live_of(dev)
    memo = Memo.for_plan(SERVER, "default")
    memo.prepare([dev])
    assert build_plan([dev], live, memo=memo).unchanged
    assert memo.key(dev, live.streams["ORDERS"]) != memo.key(prod, live.streams["ORDERS"])
    plan = build_plan([prod], live, memo=memo)
    assert [(s.action, s.name) for s in plan.steps] == [("update", "ORDERS")]


def test_consumer_creates_of_one_stream_list_the_fields_each_would_list_alone() -> None:
    """The planner compares every consumer create of a stream with one bare consumer (a
    name decides only the name fields): each create lists exactly what it would list
    planned on its own, and never its name."""

    def consumer(name: str, **config: Any) -> Spec:
        # as validation leaves a consumer: its name in both name fields
        config = {"name": name, "durable_name": name, **config}
        return Spec("Consumer", name, config, Location("specs.yaml", 1), stream="ORDERS")

    consumers = [
        consumer("a", ack_policy="explicit"),
        consumer("b", ack_policy="explicit", max_deliver=5),
        consumer("c", deliver_subject="push.c", ack_policy="none"),
        consumer("d", filter_subject="orders.d", inactive_threshold=60 * SECOND),
    ]
    together = build_plan([ORDERS, *consumers], LiveState(server=SERVER))
    fields = {s.name: s.fields for s in together.changes if s.ref.kind == "Consumer"}
    for item in consumers:
        alone = build_plan([ORDERS, item], LiveState(server=SERVER))
        assert fields[item.name] == alone.changes[1].fields
        assert not {"name", "durable_name"} & {f.path for f in fields[item.name]}
    assert {f.path for f in fields["b"]} == {"ack_policy", "max_deliver"}


def test_an_unchanged_entry_made_fast_is_the_dataclass_s_own_value() -> None:
    """``Unchanged.of`` skips the frozen dataclass's ``__init__``: the entry it makes is
    equal to, hashes and prints like, copies and pickles like the one ``__init__`` makes."""
    import copy
    import dataclasses
    import pickle
    import tracemalloc

    from reconciler.identity import ResourceRef

    ref, where = ResourceRef("Consumer", "C1", "ORDERS"), Location("orders.yaml", 7)
    written = {"ack_wait": "30s"}
    fast = Unchanged.of(ref, where, written)
    slow = Unchanged(ref=ref, source=where, written=written)
    assert fast == slow and repr(fast) == repr(slow)
    assert dataclasses.asdict(fast) == dataclasses.asdict(slow)
    assert pickle.loads(pickle.dumps(fast)) == slow and copy.deepcopy(fast) == slow
    assert dataclasses.replace(fast, reasons=("x",)) == dataclasses.replace(slow, reasons=("x",))
    assert all(getattr(fast, f.name) == getattr(slow, f.name) for f in dataclasses.fields(slow))

    def held(make: Any) -> int:  # the bytes 1,000 entries hold (no dict of their own)
        tracemalloc.start()
        made = [make() for _ in range(1_000)]
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert len(made) == 1_000
        return size

    by_init = held(lambda: Unchanged(ref=ref, source=where, written=written))
    assert held(lambda: Unchanged.of(ref, where, written)) <= by_init * 1.1
