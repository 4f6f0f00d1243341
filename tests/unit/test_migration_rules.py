"""The pure rules of a migration: its record, its configs, room, what it can carry."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reconciler.identity import ResourceRef
from reconciler.locations import Location
from reconciler.model.migration import (
    FILLING_KEY,
    NOTHING,
    Record,
    Volume,
    at_position,
    blockers,
    consumer_copy,
    consumer_fates,
    copies_when_created,
    copy_bytes,
    counted_more,
    filling_config,
    new_sequence,
    over_limits,
    overflow,
    overfull,
    refusing_limits,
    remembered,
    rooms,
    serving_config,
    shortfalls,
    temp_config,
    temp_name,
)
from reconciler.model.state import ServerInfo, StreamState, holds_leftovers
from reconciler.planning.steps import Migrate, Plan
from reconciler.render.markdown import render_markdown
from reconciler.render.text import render_text

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
LIVE = {
    "name": "ORDERS",
    "subjects": ["orders.>"],
    "storage": "file",
    "retention": "workqueue",
    "max_msgs": 1000,
    "duplicate_window": 120_000_000_000,
    "subject_transform": {"src": "orders.>", "dest": "o.>"},
    "num_replicas": 3,
    "deny_delete": True,
    "metadata": {"io.jetstream-gitops/managed-by": "reconcile"},
}
TARGET = {**LIVE, "storage": "memory", "retention": "limits"}
TEMP = temp_name("ORDERS")


def record(phase: str = "copy", *, mirrors: bool = False) -> Record:
    subjects = {k: LIVE.get(k) for k in ("subjects", "subject_transform", "duplicate_window")}
    return Record("ORDERS", phase, TARGET, subjects, 41, keep_positions=True, mirrors=mirrors)


def test_the_record_round_trips_through_the_temporary_streams_metadata() -> None:
    config = temp_config(LIVE, record())
    assert Record.of(config) == record()
    assert Record.of(temp_config(LIVE, record(mirrors=True))) == record(mirrors=True)
    assert Record.of(LIVE) is None
    broken = {"metadata": {"io.jetstream-gitops/migration": "{not json"}}
    assert Record.of(broken) is None


def test_the_temporary_stream_holds_everything_and_takes_no_publishes() -> None:
    config = temp_config(LIVE, record())
    assert config["name"] == temp_name("ORDERS") == "MIGRATING_ORDERS"
    assert config["sources"] == [{"name": "ORDERS"}]
    assert "subjects" not in config and "duplicate_window" not in config
    assert "max_msgs" not in config and "deny_delete" not in config
    assert config["retention"] == "limits"  # a workqueue would lose what no one consumes
    assert (config["storage"], config["num_replicas"]) == ("file", 3)
    serving = serving_config(config, record())
    assert serving["subjects"] == ["orders.>"]
    assert serving["subject_transform"] == LIVE["subject_transform"]
    assert "sources" not in serving
    assert Record.of(serving) == record("serving")


def test_the_new_stream_fills_without_subjects_from_nothing_then_everything() -> None:
    waiting = filling_config(record("serving"), copying=False)
    assert "subjects" not in waiting and "subject_transform" not in waiting
    assert "duplicate_window" not in waiting  # a window would drop repeated msg ids
    assert waiting["sources"] == [{"name": "MIGRATING_ORDERS", "filter_subject": NOTHING}]
    assert waiting["first_seq"] == 41
    assert waiting["metadata"][FILLING_KEY] == "MIGRATING_ORDERS"
    copying = filling_config(record("refill"), copying=True)
    assert copying["sources"] == [{"name": "MIGRATING_ORDERS"}]
    assert new_sequence(1, record()) == 41 and new_sequence(10, record()) == 50


def test_with_mirrors_both_copies_keep_every_sequence() -> None:
    """nats-server 2.12+: the copies are mirrors, promoted to plain streams by an update."""
    mirrored = record(mirrors=True)
    temp = temp_config(LIVE, mirrored)
    assert temp["mirror"] == {"name": "ORDERS"} and "sources" not in temp
    assert "mirror" not in serving_config(temp, mirrored)
    interest = Record("ORDERS", "serving", {**TARGET, "retention": "interest"}, {}, mirrors=True)
    filling = filling_config(interest, copying=False)
    assert filling["mirror"] == {"name": "MIGRATING_ORDERS"}
    assert filling["retention"] == "limits"  # interest keeps nothing before its consumers
    assert "first_seq" not in filling and "sources" not in filling
    assert new_sequence(17, mirrored) == 17


def test_a_consumer_copy_remembers_its_config_and_position() -> None:
    config = {"durable_name": "BILLING", "ack_policy": "explicit", "deliver_policy": "all"}
    copy = consumer_copy("BILLING", config, 17)
    memory = remembered(copy)
    assert memory is not None
    assert (memory.name, dict(memory.config), memory.start) == ("BILLING", config, 17)
    assert remembered({"durable_name": "X"}) is None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"mirror": {"name": "A"}}, "is a mirror"),
        ({"sources": [{"name": "A"}]}, "sources other streams"),
        ({"allow_msg_counter": True}, "counter stream"),
        ({"allow_msg_schedules": True}, "message schedules"),
    ],
)
def test_what_sourcing_cannot_carry_is_named(change: dict, reason: str) -> None:
    assert blockers(TARGET, LIVE) == []
    assert any(reason in said for said in blockers({**TARGET, **change}, LIVE))
    assert any(reason in said for said in blockers(TARGET, {**LIVE, **change}))


def test_limits_that_would_refuse_part_of_the_copy_are_named() -> None:
    state = StreamState(messages=500, bytes=50_000)
    assert overflow({**TARGET, "discard": "new", "max_msgs": 100}, state) is not None
    assert overflow({**TARGET, "discard": "old", "max_msgs": 100}, state) is None
    assert overflow({**TARGET, "discard": "new", "max_bytes": 1000}, state) is not None
    assert overflow({**TARGET, "discard": "new", "max_msgs": -1}, state) is None


def test_room_is_checked_per_storage_with_tiers() -> None:
    state = StreamState(messages=1000, bytes=1_000_000)
    size = copy_bytes(state)
    assert size == 1_000_000 + 1000 * 64
    account = {"memory": 0, "storage": 0, "limits": {"max_memory": -1, "max_storage": -1}}
    assert shortfalls(LIVE, TARGET, state, account) == []
    tight = {
        "memory": 0,
        "storage": 9_000_000,
        "limits": {"max_memory": -1, "max_storage": 10_000_000},
    }
    (short,) = shortfalls(LIVE, TARGET, state, tight)
    assert (short.storage, short.needed, short.room.free) == ("file", size, 1_000_000)
    # Same storage: the temporary copy and the new stream coexist once the old one is gone.
    same = {**TARGET, "storage": "file"}
    (short,) = shortfalls(LIVE, same, state, tight)
    assert short.needed == size + (size - state.bytes)
    tiers = {
        "memory": 0,
        "storage": 0,
        "limits": {"max_memory": -1, "max_storage": -1},
        "tiers": {
            "R3": {"storage": 0, "memory": 0, "limits": {"max_storage": 100, "max_memory": -1}}
        },
    }
    assert rooms(tiers, 3)["file"].free == 100
    assert [s.storage for s in shortfalls(LIVE, TARGET, state, tiers)] == ["file"]


def test_consumer_fates_are_said_before_anything_starts() -> None:
    consumers = {
        "A": {"durable_name": "A", "deliver_policy": "all"},
        "B": {"durable_name": "B", "deliver_policy": "new"},
        "C": {"name": "C", "deliver_policy": "all"},
    }
    new = {f.name: (f.kept, f.position) for f in consumer_fates(consumers, ServerInfo("2.14.6", 2))}
    assert new == {"A": (True, True), "B": (True, False), "C": (False, False)}
    old = consumer_fates(consumers, ServerInfo("2.12.8", 2))
    assert [(f.name, f.position) for f in old] == [("A", False), ("B", False), ("C", False)]
    assert "needs nats-server 2.14" in old[0].note


def test_a_migrate_step_renders_everywhere_and_matches_the_plan_schema() -> None:
    step = Migrate(
        ref=ResourceRef("Stream", "ORDERS"),
        source=Location("specs/orders.yaml", 1),
        reasons=("storage cannot be changed",),
        config=TARGET,
        live=LIVE,
        volume=Volume(1200, 1_258_291),
    )
    plan = Plan(server=ServerInfo("2.15.1", 3), changes=(step,))
    document = plan.to_json()
    schema = json.loads((SCHEMAS / "plan.schema.json").read_text())
    jsonschema.validate(document, schema)
    assert document["summary"]["migrate"] == 1
    assert document["changes"][0]["migration"]["messages"] == 1200
    text = render_text(plan)
    assert ">>> migrate Stream ORDERS  (specs/orders.yaml:1)" in text
    assert "copies 1,200 messages (1.2 MiB), twice" in text
    assert "sequence numbers (gaps included) and timestamps stay exactly" in text
    assert "Plan: 0 to create, 0 to update, 0 to replace, 1 to migrate, 0 to delete" in text
    markdown = render_markdown(plan)
    assert "🚚 migrate Stream ORDERS" in markdown and "nothing is destroyed" in markdown


def test_a_temporary_stream_is_never_an_unmanaged_stream_of_its_own() -> None:
    """In the fleet's snapshots it comes alone, not beside its stream: it is skipped."""
    from reconciler.planning.plan import StreamGroup, plan_stream

    temp = temp_config(LIVE, record())
    alone = plan_stream(StreamGroup(name=temp["name"], live=temp), ServerInfo("2.15.1", 3))
    assert alone.entries == [] and alone.problems == []
    plain = plan_stream(
        StreamGroup(name="OTHER", live={**LIVE, "name": "OTHER"}), ServerInfo("2.15.1", 3)
    )
    assert [entry.action for entry in plain.entries] == ["orphan"]  # LIVE carries the marker


def test_a_consumer_is_at_a_reset_position_only_with_nothing_outstanding_before_it() -> None:
    def info(delivered: int, floor: int) -> dict:
        return {"delivered": {"stream_seq": delivered}, "ack_floor": {"stream_seq": floor}}

    assert at_position(info(30, 30), 31)
    assert at_position({}, 1)  # a new consumer delivers the first message next
    assert not at_position({}, 31)
    assert not at_position(info(40, 30), 31)  # delivered past it, unacknowledged
    assert not at_position(info(10, 10), 31)  # not moved yet
    assert not at_position(info(31, 31), 31)  # moved past


def test_a_stream_copies_when_created_unless_its_sources_wait_behind_nothing() -> None:
    record = Record("ORDERS", "serving", {"name": "ORDERS"}, {}, mirrors=False)
    assert not copies_when_created({"name": "ORDERS"})
    assert copies_when_created({"name": "M", "mirror": {"name": "ORDERS"}})
    assert copies_when_created({"name": "S", "sources": [{"name": "A"}, {"name": "B"}]})
    assert not copies_when_created(filling_config(record, copying=False))
    assert copies_when_created(filling_config(record, copying=True))
    mirrored = Record("ORDERS", "serving", {"name": "ORDERS"}, {}, mirrors=True)
    assert copies_when_created(filling_config(mirrored, copying=False))


@pytest.mark.parametrize(
    ("config", "state", "leftover"),
    [
        ({}, StreamState(), False),
        ({}, StreamState(messages=3, first_seq=1, last_seq=3), True),
        ({}, StreamState(messages=0, first_seq=9, last_seq=8), True),  # old ones purged
        ({"first_seq": 100}, StreamState(first_seq=100, last_seq=99), False),
        ({"first_seq": 100}, StreamState(first_seq=100, last_seq=120, messages=21), True),
    ],
)
def test_a_new_stream_holding_messages_or_past_sequences_is_a_leftover(
    config: dict[str, int], state: StreamState, leftover: bool
) -> None:
    assert holds_leftovers(config, state) is leftover


def test_the_serving_copy_takes_the_targets_discard_new_limits_never_below_held() -> None:
    """While it takes the publishes, the temporary stream refuses what the target would
    (max_msgs; max_bytes as is when the new stream counts no message more), and never
    has a limit under what it holds (lowering one deletes messages)."""
    target = {"discard": "new", "max_msgs": 300, "max_bytes": 10_000, "storage": "memory"}
    assert refusing_limits(target, "file", {"messages": 200, "bytes": 9_000}, -14) == {
        "max_msgs": 300,
        "max_bytes": 10_000,
        "discard": "new",
    }
    assert refusing_limits(target, "file", {"messages": 400, "bytes": 20_000}, -14) == {
        "max_msgs": 400,
        "max_bytes": 20_000,
        "discard": "new",
    }
    assert refusing_limits({**target, "discard": "old"}, "file", {}, 0) == {}
    assert refusing_limits({"discard": "new"}, "file", {}, 0) == {}
    unlimited = {"discard": "new", "max_msgs": -1, "max_bytes": 0, "max_msgs_per_subject": 0}
    assert refusing_limits(unlimited, "memory", {"messages": 5}, 18) == {}  # 0: no limit


def test_the_new_stream_counts_a_message_more_by_storage_and_copy() -> None:
    """Measured on 2.10 to 2.14: a file stream counts a message 14 bytes more than a
    memory one, 18 with headers; a source adds a Nats-Stream-Source header."""
    header = len(f"NATS/1.0\r\nNats-Stream-Source: {TEMP} {'9' * 20} > >\r\n\r\n")
    assert counted_more("memory", {"storage": "file"}, True, TEMP) == 18
    assert counted_more("file", {"storage": "memory"}, True, TEMP) == -14
    assert counted_more("file", {}, True, TEMP) == 0
    assert counted_more("file", {"storage": "file"}, False, TEMP) == header + 4
    assert counted_more("memory", {"storage": "file"}, False, TEMP) == header + 18
    assert counted_more("file", {"storage": "memory"}, False, TEMP) == header - 14


def test_a_memory_copy_of_a_file_target_splits_the_room_as_the_held_messages() -> None:
    """100 messages of 70 bytes held (in memory; in the file stream up to 88 each), max_bytes
    20,000: room for 127 more of their size. The limits leave 18 bytes a message."""
    target = {"discard": "new", "max_bytes": 20_000, "storage": "file"}
    limits = refusing_limits(target, "memory", {"messages": 100, "bytes": 7_000}, 18)
    assert limits == {"max_msgs": 227, "max_bytes": 20_000 - 18 * 227, "discard": "new"}
    capped = refusing_limits({**target, "max_msgs": 150}, "memory", {"messages": 100}, 18)
    assert capped == {"max_msgs": 150, "max_bytes": 20_000 - 18 * 150, "discard": "new"}
    full = refusing_limits(target, "memory", {"messages": 300, "bytes": 19_000}, 18)
    assert full == {"max_msgs": 300, "max_bytes": 19_000, "discard": "new"}  # takes no more


_MESSAGES = st.lists(
    st.tuples(st.integers(1, 30), st.integers(0, 60), st.integers(0, 300)), max_size=40
)
_OVERHEAD = {"file": (30, 34), "memory": (16, 16)}  # nats-server's, measured


def _counted(storage: str, subject: int, headers: int, payload: int) -> int:
    return _OVERHEAD[storage][headers > 0] + subject + headers + payload


def _source_line(stream: str, seq: int) -> int:
    return len(f"Nats-Stream-Source: {stream} {seq} > >\r\n")


@settings(max_examples=300, deadline=None)
@given(
    held=_MESSAGES,
    late=_MESSAGES,
    max_bytes=st.integers(1, 30_000),
    max_msgs=st.integers(-1, 80),
    storages=st.tuples(
        st.sampled_from(["memory", "file"]), st.sampled_from(["memory", "file"]), st.booleans()
    ),
)
def test_the_new_stream_holds_whatever_the_serving_copy_takes(
    held: list[tuple[int, int, int]],
    late: list[tuple[int, int, int]],
    max_bytes: int,
    max_msgs: int,
    storages: tuple[str, str, bool],
) -> None:
    """Messages (subject, headers, payload sizes) held by the temporary stream, then
    published to it under its limits: the new stream (another storage, or a copy back
    by sources giving each a Nats-Stream-Source header) takes every one the temporary
    stream took, so the copy back never stalls; and no limit is under what it holds."""
    storage, target_storage, mirrors = storages

    def both(at: int, message: tuple[int, int, int], copied: bool) -> tuple[int, int]:
        subject, headers, payload = message
        if mirrors:
            return _counted(storage, *message), _counted(target_storage, *message)
        block = headers or len("NATS/1.0\r\n\r\n")
        there = block + _source_line("ORDERS", at) if copied else headers
        back = block + _source_line(TEMP, at)
        temp = _counted(storage, subject, there, payload)
        return temp, _counted(target_storage, subject, back, payload)

    sizes = [both(at, m, True) for at, m in enumerate(held, 1)]
    assume(sum(new for _, new in sizes) <= max_bytes)  # the plan refuses a copy that cannot fit
    assume(max_msgs < 0 or len(held) <= max_msgs)
    target = {"discard": "new", "max_bytes": max_bytes, "max_msgs": max_msgs}
    target["storage"] = target_storage
    state = {"messages": len(held), "bytes": sum(temp for temp, _ in sizes)}
    growth = counted_more(storage, target, mirrors, TEMP)
    limits = refusing_limits(target, storage, state, growth)
    count, size = limits.get("max_msgs", -1), limits["max_bytes"]
    assert size >= state["bytes"] and (count == -1 or count >= len(held))
    for at, message in enumerate(late, len(held) + 1):
        temp, new = both(at, message, False)
        if (count < 0 or len(sizes) < count) and state["bytes"] + temp <= size:
            sizes.append((temp, new))
            state["bytes"] += temp
    assert sum(new for _, new in sizes) <= max_bytes


def test_the_serving_copy_takes_max_msgs_per_subject_when_new_refuses_past_it() -> None:
    """discard_new_per_subject: the temporary stream refuses a subject's publishes past
    the limit, never under what its fullest subject holds; without it (the oldest of the
    subject goes) nothing stalls, and nothing is set."""
    per = {"discard": "new", "discard_new_per_subject": True, "max_msgs_per_subject": 5}
    assert refusing_limits(per, "file", {"messages": 9}, 0, 3) == {
        "max_msgs_per_subject": 5,
        "discard_new_per_subject": True,
        "discard": "new",
    }
    assert refusing_limits(per, "file", {}, 0, 8)["max_msgs_per_subject"] == 8
    assert refusing_limits({**per, "discard_new_per_subject": False}, "file", {}, 0) == {}
    assert overfull(per, "orders.a", 5) is None
    assert "orders.a" in (overfull(per, "orders.a", 8) or "")
    assert overfull(per, "orders.\x1b[2J", 8) is not None
    assert "\x1b" not in (overfull(per, "orders.\x1b[2J", 8) or "")


def test_a_copy_holding_more_than_the_new_discard_new_limits_is_said() -> None:
    """The copy keeps what the stream discarded while it was copied: more messages than
    the target's discard-new max_msgs, or more bytes than its max_bytes as the new stream
    counts them (memory: 14 bytes a message less than file), would stall the copy back."""
    target = {"name": "ORDERS", "storage": "memory", "discard": "new", "max_msgs": 5}
    record = Record("ORDERS", "handover", target, {}, mirrors=True)
    assert over_limits(record, "file", {"messages": 5, "bytes": 500}) is None
    assert "8 messages, more than max_msgs 5" in (
        over_limits(record, "file", {"messages": 8}) or ""
    )
    loose = Record("ORDERS", "handover", {**target, "discard": "old"}, {}, mirrors=True)
    assert over_limits(loose, "file", {"messages": 8}) is None
    sized = {"name": "ORDERS", "storage": "memory", "discard": "new", "max_bytes": 1000}
    record = Record("ORDERS", "handover", sized, {}, mirrors=True)
    assert over_limits(record, "file", {"messages": 10, "bytes": 1140}) is None  # 1000 in memory
    assert "1001 bytes" in (over_limits(record, "file", {"messages": 10, "bytes": 1141}) or "")
