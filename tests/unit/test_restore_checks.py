"""What a restore compares (reconciler.backup.restore_checks), without a server: the
server's guarantees for empty streams and consumer positions, and the bounds a leftover
must keep (the real-server proofs are tests/integration/test_restore_*.py)."""

from __future__ import annotations

from typing import Any

from reconciler.backup.manifest import ConsumerRecord, StreamRecord
from reconciler.backup.restore_checks import (
    RESTORING_KEY,
    differences,
    holds_only_the_backups,
    marked,
    with_marker,
)
from reconciler.specs.lifecycle import PROTECT_KEY

EMPTY_TS = "0001-01-01T00:00:00Z"


def _state(messages: int, first: int, last: int) -> dict[str, Any]:
    return {
        "messages": messages,
        "bytes": messages * 10,
        "first_seq": first,
        "last_seq": last,
        "first_ts": EMPTY_TS,
        "last_ts": EMPTY_TS,
    }


def _record(state: dict[str, Any], *consumers: ConsumerRecord) -> StreamRecord:
    return StreamRecord("S", {"name": "S"}, state, consumers)


def _positions(delivered: int, floor: int) -> dict[str, int]:
    return {
        "delivered.consumer_seq": 0,
        "delivered.stream_seq": delivered,
        "ack_floor.consumer_seq": 0,
        "ack_floor.stream_seq": floor,
    }


def _consumer(delivered: int, floor: int) -> dict[str, Any]:
    return {
        "delivered": {"consumer_seq": 0, "stream_seq": delivered},
        "ack_floor": {"consumer_seq": 0, "stream_seq": floor},
    }


def test_an_empty_stream_may_come_back_at_its_next_sequence() -> None:
    record = _record(_state(0, 0, 0))
    assert differences(record, {"state": _state(0, 1, 0)}, {}) == []  # 2.15
    assert differences(record, {"state": _state(0, 0, 0)}, {}) == []  # 2.10-2.14
    assert differences(record, {"state": _state(0, 2, 0)}, {}) != []
    assert differences(_record(_state(3, 1, 3)), {"state": _state(3, 2, 3)}, {}) != []


def test_a_consumer_passed_by_the_limits_may_come_back_below_the_first_message() -> None:
    record = _record(_state(3, 6, 8), ConsumerRecord("c", _positions(0, 0)))
    live = {"state": _state(3, 6, 8)}
    assert differences(record, live, {"c": _consumer(5, 5)}) == []  # moved up to first - 1
    assert differences(record, live, {"c": _consumer(0, 0)}) == []
    assert differences(record, live, {"c": _consumer(6, 5)}) != []  # past it: delivered one
    inside = _record(_state(3, 6, 8), ConsumerRecord("c", _positions(7, 6)))
    assert differences(inside, live, {"c": _consumer(5, 5)}) != []  # never moved back


def test_a_leftover_keeps_within_the_backups_sequences() -> None:
    record = _record(_state(50, 1, 50))
    assert holds_only_the_backups(record, {"state": _state(0, 51, 50)})
    assert holds_only_the_backups(record, {"state": _state(20, 1, 20)})
    assert not holds_only_the_backups(record, {"state": _state(0, 81, 80)})  # jobs done since
    assert not holds_only_the_backups(record, {"state": _state(5, 2, 6)})  # another first
    assert not holds_only_the_backups(record, {"state": _state(51, 1, 50)})


def test_the_marker_goes_on_without_the_protection_and_comes_off_with_it() -> None:
    config = {"name": "S", "metadata": {PROTECT_KEY: "specs/s.yaml:7", "_nats.ver": "2.15"}}
    writing = with_marker(config, "sha256:x")
    assert marked(writing) == "sha256:x"
    assert writing["metadata"] == {RESTORING_KEY: "sha256:x"}
    assert with_marker(config, None)["metadata"] == {PROTECT_KEY: "specs/s.yaml:7"}
    assert marked(with_marker(config, None)) is None
