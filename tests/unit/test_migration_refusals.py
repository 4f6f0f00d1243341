"""The pure rules behind a migration's refusals and losses, and the plan's subject check
against every live stream (issue 30): what a target keeps, who copies a stream, which
consumers are working, and which subjects another stream already stores."""

from __future__ import annotations

from typing import Any

import pytest
from live_samples import SERVER, live_of, server_copy

from reconciler.errors import SpecError
from reconciler.locations import Location
from reconciler.model.loss import update_losses
from reconciler.model.migration import (
    Record,
    copied_by,
    filling_config,
    overflow,
    temp_config,
    temp_name,
    working,
)
from reconciler.model.normalize import desired_config
from reconciler.model.state import LiveState, StreamState
from reconciler.planning.plan import build_plan
from reconciler.planning.steps import Migrate
from reconciler.specs.spec import Kind, Spec

HELD = StreamState(messages=100, bytes=14_770, num_subjects=1)


def spec(kind: Kind, name: str, stream: str | None = None, **config: Any) -> Spec:
    return Spec(kind, name, config, Location("specs.yaml", 1), stream=stream)


# --- what a target keeps ---------------------------------------------------------------


def test_workqueue_to_interest_without_consumers_loses_every_message() -> None:
    losses = update_losses({"retention": "interest"}, {"retention": "workqueue"}, HELD, consumers=0)
    assert [(loss.field, loss.messages) for loss in losses] == [("retention", 100)]
    assert "deletes all 100" in losses[0].summary


def test_interest_with_consumers_is_lossy_with_no_exact_count() -> None:
    for consumers in (None, 2):
        losses = update_losses(
            {"retention": "interest"}, {"retention": "workqueue"}, HELD, consumers=consumers
        )
        assert [(loss.field, loss.messages) for loss in losses] == [("retention", None)]


def test_other_retention_changes_keep_the_messages() -> None:
    for before, after in (("workqueue", "limits"), ("limits", "workqueue"), ("interest", "limits")):
        assert update_losses({"retention": after}, {"retention": before}, HELD, consumers=0) == []


def test_a_migration_planned_to_interest_says_how_many_messages_go() -> None:
    live = live_of(spec("Stream", "J", subjects=["j.>"], retention="workqueue"))
    live = LiveState(server=SERVER, streams=live.streams, stream_state={"J": HELD})
    declared = spec("Stream", "J", subjects=["j.>"], retention="interest")
    (step,) = build_plan([declared], live, migrate=True).changes
    assert isinstance(step, Migrate) and step.destructive
    assert [(loss.field, loss.messages) for loss in step.losses] == [("retention", 100)]


# --- who copies a stream ---------------------------------------------------------------


def test_streams_that_source_or_mirror_a_stream_are_found() -> None:
    streams = [
        ("AGG", {"sources": [{"name": "X"}, {"name": "ORDERS"}]}),
        ("BACKUP", {"mirror": {"name": "ORDERS"}}),
        ("REMOTE", {"sources": [{"name": "ORDERS", "external": {"api": "$JS.hub.API"}}]}),
        (temp_name("ORDERS"), {"mirror": {"name": "ORDERS"}}),
        ("OTHER", {"sources": [{"name": "ORDERS2"}]}),
        ("AGG", {"sources": [{"name": "ORDERS"}]}),  # live and planned: named once
    ]
    assert copied_by("ORDERS", streams) == [("AGG", "sources it"), ("BACKUP", "mirrors it")]


def test_a_migration_of_a_sourced_stream_is_refused_naming_the_sources() -> None:
    orders = spec("Stream", "ORDERS", subjects=["o.>"])
    agg = spec("Stream", "AGG", sources=[{"name": "ORDERS"}])
    live = live_of(orders, agg)
    moved = spec("Stream", "ORDERS", subjects=["o.>"], storage="memory")
    with pytest.raises(SpecError, match=r"'AGG' \(sources it\)") as refused:
        build_plan([moved, agg], live, migrate=True)
    assert "cannot migrate Stream ORDERS" in str(refused.value)
    # without --migrate the same change is a replace, which says what it deletes
    assert build_plan([moved, agg], live).changes[0].action == "replace"


# --- consumers at work -----------------------------------------------------------------


def test_an_idle_consumer_is_not_working() -> None:
    assert working({"name": "W", "num_pending": 90, "num_ack_pending": 0, "num_waiting": 0}) is None


@pytest.mark.parametrize(
    ("info", "said"),
    [
        ({"num_ack_pending": 10}, "10 unacknowledged"),
        ({"num_waiting": 1}, "1 pull request waiting"),
        ({"num_waiting": 3}, "3 pull requests waiting"),
        ({"push_bound": True}, "a push subscriber bound"),
    ],
)
def test_a_consumer_holding_or_asking_for_work_is_working(info: dict[str, Any], said: str) -> None:
    assert working(info) == said


def test_a_consumer_active_within_a_second_by_the_server_clock_is_working() -> None:
    # a worker between its last ack and its next pull shows nothing else
    def info(delivered: str, acked: str) -> dict[str, Any]:
        return {
            "ts": "2026-11-25T14:00:10.000000000Z",
            "delivered": {"stream_seq": 5, "last_active": delivered},
            "ack_floor": {"stream_seq": 5, "last_active": acked},
        }

    recent = info("2026-11-25T14:00:09.100000000Z", "2026-11-25T14:00:09.750000000Z")
    assert working(recent) == "active 250 ms ago"
    assert working(info("2026-11-25T14:00:08Z", "2026-11-25T14:00:08.5Z")) is None
    assert working({"ts": "2026-11-25T14:00:10Z", "delivered": {"stream_seq": 0}}) is None


# --- max_msg_size ----------------------------------------------------------------------


def test_the_new_stream_is_filled_without_a_max_msg_size_its_final_config_restores() -> None:
    live = {"name": "S", "subjects": ["s.>"], "storage": "file", "max_msg_size": -1}
    target = {**live, "storage": "memory", "max_msg_size": 1000}
    record = Record(stream="S", phase="serving", target=target, subjects={}, mirrors=True)
    assert "max_msg_size" not in temp_config(live, record)
    for copying in (False, True):
        assert "max_msg_size" not in filling_config(record, copying=copying)
    assert record.target["max_msg_size"] == 1000  # the cutover's update sets it


def test_discard_new_per_subject_below_what_a_subject_may_hold_blocks_a_migration() -> None:
    state = StreamState(messages=13, bytes=442, num_subjects=2)
    target = {"discard": "new", "discard_new_per_subject": True, "max_msgs_per_subject": 5}
    said = overflow(target, state, {"max_msgs_per_subject": -1})
    assert said is not None and "max_msgs_per_subject 5" in said and "2 subjects" in said
    # no subject can hold more: the live limit is as low, or the stream holds no more
    assert overflow(target, state, {"max_msgs_per_subject": 5}) is None
    assert overflow(target, StreamState(messages=5), {}) is None
    assert overflow({**target, "discard_new_per_subject": False}, state, {}) is None


# --- subjects against every live stream ------------------------------------------------


def unmanaged(name: str, **config: Any) -> dict[str, Any]:
    return server_copy(desired_config(spec("Stream", name, **config), SERVER), managed=False)


def test_a_create_overlapping_an_unmanaged_stream_names_it_at_the_subject() -> None:
    live = LiveState(server=SERVER, streams={"OTHER": unmanaged("OTHER", subjects=["x.>"])})
    mine = Spec(
        "Stream",
        "MINE",
        {"subjects": ["y", "x.a"]},
        Location("specs.yaml", 1),
        locations={"subjects.1": Location("specs.yaml", 4)},
    )
    with pytest.raises(SpecError) as refused:
        build_plan([mine], live)
    (problem,) = refused.value.problems
    assert str(problem.location) == "specs.yaml:4"
    assert "'x.a' overlaps 'x.>' of stream 'OTHER' (on the server, unmanaged)" in problem.message


def test_an_update_and_a_migration_to_a_taken_subject_are_refused() -> None:
    live = live_of(spec("Stream", "MINE", subjects=["y.>"]))
    live = LiveState(
        server=SERVER,
        streams={**live.streams, "OTHER": unmanaged("OTHER", subjects=["x.>"])},
    )
    for extra in ({}, {"storage": "memory"}):
        declared = spec("Stream", "MINE", subjects=["x.b"], **extra)
        with pytest.raises(SpecError, match="of stream 'OTHER'"):
            build_plan([declared], live, migrate=True)


def test_streams_are_judged_with_every_subject_they_hold_while_the_plan_is_applied() -> None:
    old = spec("Stream", "OLD", subjects=["x.>"])
    live = live_of(old)
    mine = spec("Stream", "MINE", subjects=["x.a"])
    # the server would refuse MINE while OLD still holds x.>: steps run in no set order
    # (and validation refuses two specs whose subjects overlap)
    with pytest.raises(SpecError, match=r"'OLD' \(which holds it until its own step"):
        build_plan([mine, spec("Stream", "OLD", subjects=["z.>"])], live)
    # deletes come after every other step
    with pytest.raises(SpecError, match=r"'OLD' \(which holds it until this plan deletes it"):
        build_plan([mine], live, prune=True)
    # once OLD has moved (an apply of its own), MINE is free to take x.a
    moved = live_of(spec("Stream", "OLD", subjects=["z.>"]))
    plan = build_plan([mine, spec("Stream", "OLD", subjects=["z.>"])], moved)
    assert [s.action for s in plan.changes] == ["create"]


def test_a_temporary_stream_holding_subjects_is_its_stream() -> None:
    record = Record(stream="S", phase="refill", target={"name": "S"}, subjects={})
    temp = {"name": temp_name("S"), "subjects": ["s.>"], "metadata": record.metadata()}
    live = LiveState(server=SERVER, streams={temp_name("S"): temp})
    plan = build_plan([spec("Stream", "T", subjects=["t.>"])], live)
    assert [s.action for s in plan.changes if s.name == "T"] == ["create"]


def test_an_unchanged_plan_reads_no_other_stream() -> None:
    # two live streams overlap (the server would not allow it; a forged LiveState does):
    # nothing this plan changes takes a subject, so nothing is reported
    mine = spec("Stream", "MINE", subjects=["x.a"])
    live = live_of(mine)
    live = LiveState(
        server=SERVER, streams={**live.streams, "OTHER": unmanaged("OTHER", subjects=["x.>"])}
    )
    assert not build_plan([mine], live).has_changes
