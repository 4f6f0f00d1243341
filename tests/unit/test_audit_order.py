"""An event and its API audit come together, in either order: the agent waits for an
audit only when its event came first (a benchmark once saw every heal wait the full
second: the audit had come before the event)."""

from __future__ import annotations

import io
import json

import pytest

from reconciler.agent.listener import AdvisoryListener
from reconciler.agent.logs import Log
from reconciler.agent.metrics import EnvironmentMetrics, Metrics

EVENT = (
    "$JS.EVENT.ADVISORY.STREAM.UPDATED.ORDERS",
    json.dumps(
        {"type": "io.nats.jetstream.advisory.v1.stream_action", "stream": "ORDERS"}
    ).encode(),
)
AUDIT = (
    "$JS.EVENT.ADVISORY.API",
    json.dumps(
        {
            "type": "io.nats.jetstream.advisory.v1.api_audit",
            "subject": "$JS.API.STREAM.UPDATE.ORDERS",
            "client": {"name": "alice", "id": 7, "server": "S"},
        }
    ).encode(),
)


@pytest.fixture
def listener() -> AdvisoryListener:
    heard = AdvisoryListener(Log("json", io.StringIO()), EnvironmentMetrics(Metrics(), None))
    heard.audits = True  # as subscribed with the API audits allowed
    return heard


def test_an_event_awaits_its_audit_until_it_comes(listener: AdvisoryListener) -> None:
    listener.on_advisory(*EVENT)
    assert listener.awaiting() == {("ORDERS", None)}
    listener.on_advisory(*AUDIT)
    assert listener.awaiting() == set()
    assert listener.causes[("ORDERS", None)].client == "alice"


def test_an_audit_before_its_event_leaves_nothing_awaited(listener: AdvisoryListener) -> None:
    listener.on_advisory(*AUDIT)
    listener.on_advisory(*EVENT)
    assert listener.awaiting() == set()


def test_without_audits_nothing_is_ever_awaited(listener: AdvisoryListener) -> None:
    listener.audits = False  # denied: an event's audit never comes
    listener.on_advisory(*EVENT)
    assert listener.awaiting() == set()
