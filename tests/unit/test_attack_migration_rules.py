"""The pure rules behind tests/reliability/test_attack_migrations.py: losses judged by
what is held when the old config is only a record's word, the order of the server's
``created`` times, and record texts that are no record."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.model.loss import claimed_losses
from reconciler.model.migration import RECORD_KEY, Record, binding_problem, remembered
from reconciler.model.state import StreamState

OLD, TEMP, NEW = "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z", "2026-01-01T00:00:09Z"
HELD = StreamState(messages=300, bytes=30_000, num_subjects=3, first_ts=OLD, observed_at=NEW)


def record(phase: str, stream_created: str | None = None) -> Record:
    return Record(
        stream="ORDERS",
        phase=phase,
        target={"name": "ORDERS"},
        subjects={},
        owner="default",
        origin={"name": "ORDERS"},
        created=OLD,
        temp_created=TEMP,
        stream_created=stream_created,
    )


@pytest.mark.parametrize(
    ("claimed", "field", "lost"),
    [
        ({"max_msgs": 1}, "max_msgs", 299),
        ({"max_msgs_per_subject": 1}, "max_msgs_per_subject", 297),
        ({"max_age": 1_000_000_000}, "max_age", 1),
    ],
)
def test_a_claimed_limit_hides_no_loss_the_held_messages_prove(
    claimed: dict[str, int], field: str, lost: int
) -> None:
    found = claimed_losses(claimed, claimed, HELD)
    assert [(loss.field, loss.messages) for loss in found] == [(field, lost)]


def test_a_limit_the_messages_fit_in_is_no_loss() -> None:
    assert claimed_losses({"max_msgs": 1000}, {"max_msgs": 1000}, HELD) == []


def test_a_rollback_to_a_claimed_interest_is_judged_as_from_limits() -> None:
    interest = {"retention": "interest"}
    assert claimed_losses(interest, interest, HELD) == []
    assert [loss.field for loss in claimed_losses(interest, interest, HELD, back=True)] == [
        "retention"
    ]


def test_the_old_stream_cannot_pass_for_a_new_one() -> None:
    """Phase cutover naming the old stream's created as the new stream's: refused,
    since the old stream was made before the temporary one."""
    forged = record("cutover", stream_created=OLD)
    live = {"name": "ORDERS"}
    why = binding_problem(
        forged, stream="ORDERS", owner="default", temp_created=TEMP, live=live, live_created=OLD
    )
    assert why is not None and "not the stream its record was written for" in why
    genuine = replace(forged, stream_created=NEW)
    assert (
        binding_problem(
            genuine,
            stream="ORDERS",
            owner="default",
            temp_created=TEMP,
            live=live,
            live_created=NEW,
        )
        is None
    )


@pytest.mark.parametrize(
    "text", ["[" * 50_000, '{"stream":"ORDERS","phase":"copy","first_seq":1e400,"target":{}}']
)
def test_record_texts_that_break_a_parser_are_no_record(text: str) -> None:
    assert Record.of({"metadata": {RECORD_KEY: text}}) is None


def test_consumer_copies_that_break_a_parser_are_no_copy() -> None:
    key = "io.jetstream-gitops/migrated-consumer"
    assert remembered({"durable_name": "W", "metadata": {key: "[" * 50_000}}) is None
    endless = {"durable_name": "W", "metadata": {key: "{}"}, "opt_start_seq": float("inf")}
    assert remembered(endless) is None
