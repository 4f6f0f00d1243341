"""What an update, a replace or a delete would delete, from the stream's state (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.model.loss import held, update_losses
from reconciler.model.state import StreamState

HOUR = 3600 * 10**9
FULL = StreamState(
    messages=100,
    bytes=10_000,
    num_subjects=4,
    first_ts="2026-11-22T10:00:00.123456789Z",
    observed_at="2026-11-22T12:00:00Z",  # the oldest message is 2h old
)
LIMITS = {
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msgs_per_subject": -1,
    "retention": "limits",
}


def losses(state: StreamState | None = FULL, **change: Any) -> list[tuple[str, int | None]]:
    return [(x.field, x.messages) for x in update_losses({**LIMITS, **change}, LIMITS, state)]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"max_msgs": 10}, [("max_msgs", 90)]),
        ({"max_msgs": 100}, []),  # holds exactly 100: nothing goes
        ({"max_bytes": 1024}, [("max_bytes", 1)]),
        ({"max_bytes": 10_000}, []),
        ({"max_age": HOUR}, [("max_age", 1)]),  # the oldest is 2h old
        ({"max_age": 3 * HOUR}, [("max_age", None)]),  # none at once, all sooner
        ({"max_msgs_per_subject": 1}, [("max_msgs_per_subject", 96)]),  # 100 on 4 subjects
        ({"max_msgs_per_subject": 30}, [("max_msgs_per_subject", None)]),  # depends on spread
        ({"max_msgs_per_subject": 100}, []),
        ({"retention": "interest"}, [("retention", None)]),
        ({"description": "x", "max_msgs": 10**6}, []),
    ],
)
def test_each_shrink_is_lossy_only_when_the_state_says_data_goes(
    change: dict[str, Any], expected: list[tuple[str, int | None]]
) -> None:
    assert losses(**change) == expected


def test_nothing_is_lost_from_an_empty_stream_and_growth_never_loses() -> None:
    assert losses(StreamState(), max_msgs=1, max_age=1, retention="interest") == []
    grown = update_losses({**LIMITS, "max_msgs": 50}, {**LIMITS, "max_msgs": 10}, FULL)
    assert grown == []


def test_a_max_age_shrink_without_timestamps_counts_as_lossy() -> None:
    unknown = StreamState(messages=5, bytes=50)
    (loss,) = update_losses({**LIMITS, "max_age": HOUR}, LIMITS, unknown)
    assert loss.field == "max_age" and loss.messages is None
    assert "after 1h instead" in loss.summary


def test_the_estimate_reads_as_a_sentence() -> None:
    (loss,) = update_losses({**LIMITS, "max_msgs": 10}, LIMITS, FULL)
    assert loss.summary == "holds 100 messages; max_msgs 10 deletes at least 90"


def test_a_replace_or_delete_says_what_the_stream_holds() -> None:
    assert held(FULL).summary == "holds 100 messages, 9.8KiB (10000); all are deleted"
    assert held(FULL).messages == 100
    assert held(StreamState()).messages == 0
