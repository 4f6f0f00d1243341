"""Consumers against their stream's ``consumer_limits`` (the server's refusals 10121 and
10153, measured on 2.10-2.15; tests/integration/test_consumer_limits.py applies them)."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.errors import SpecError
from reconciler.locations import Location
from reconciler.specs.document import Document
from reconciler.specs.validate import validate_documents

LIMITS = {"max_ack_pending": 100, "inactive_threshold": "1m"}


def _validate(stream: dict[str, Any], consumer: dict[str, Any]) -> list[str]:
    bodies = [
        {"kind": "Stream", "name": "S", **stream},
        {"kind": "Consumer", "stream": "S", "name": "C", **consumer},
    ]
    docs = [
        Document(
            body=body,
            source=Location("spec.yaml", 10 * index + 1),
            locations={key: Location("spec.yaml", 10 * index + 2) for key in body},
        )
        for index, body in enumerate(bodies)
    ]
    try:
        validate_documents(docs)
    except SpecError as error:
        return [str(p) for p in error.problems]
    return []


@pytest.mark.parametrize(
    "consumer",
    [
        {"max_ack_pending": 100, "inactive_threshold": "1m"},  # at the limit
        {"max_ack_pending": -1},  # no limit: the server accepts and keeps -1
        {},  # left out: the server gives the limit
    ],
)
def test_a_consumer_within_its_streams_limits_passes(consumer: dict[str, Any]) -> None:
    assert _validate({"consumer_limits": LIMITS}, consumer) == []


def test_each_value_above_the_limits_is_reported_at_its_line() -> None:
    found = _validate(
        {"consumer_limits": LIMITS}, {"max_ack_pending": 101, "inactive_threshold": "90s"}
    )
    assert len(found) == 2
    assert any(p.startswith("spec.yaml:12: max_ack_pending: 101 is above") for p in found)
    assert any(p.startswith("spec.yaml:12: inactive_threshold: 90s is above") for p in found)


def test_an_external_stream_is_judged_by_the_plan_not_by_validation() -> None:
    assert _validate({"external": True}, {"max_ack_pending": 5000}) == []
