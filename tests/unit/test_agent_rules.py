"""The agent's pure parts: what an advisory names (payloads as nats-server 2.15.1 sends
them, and forged ones), the backoff, and that untrusted text is escaped in its log."""

from __future__ import annotations

import io
import json
from typing import Any

from reconciler.agent.advisories import MAX_TEXT, parse
from reconciler.agent.logs import Log
from reconciler.agent.loop import Agent, WatchSettings
from reconciler.agent.source import FixedSource, redact_git_url
from reconciler.execution.requests import PlanRequest
from reconciler.jetstream import ConnectionOptions

CLIENT = {
    "start": "2026-11-25T16:35:20.652522472Z",
    "host": "10.0.0.7",
    "id": 6,
    "acc": "$G",
    "user": "bob",
    "name": "alice-laptop",
    "lang": "python3",
    "ver": "2.16.0",
    "server": "n1",
    "kind": "Client",
}


def _audit(subject: str, **more: Any) -> bytes:
    body = {
        "type": "io.nats.jetstream.advisory.v1.api_audit",
        "timestamp": "2026-11-25T16:35:20.66Z",
        "server": "n1",
        "client": CLIENT,
        "subject": subject,
        "request": '{"name": "ORDERS"}',
        **more,
    }
    return json.dumps(body).encode()


def test_an_api_audit_names_the_resource_and_who_changed_it() -> None:
    touch = parse("$JS.EVENT.ADVISORY.API", _audit("$JS.API.STREAM.UPDATE.ORDERS"))
    assert touch is not None
    assert touch.key == ("ORDERS", None)
    assert touch.origin == ("n1", 6)
    assert touch.cause is not None
    assert touch.cause.to_json() == {
        "operation": "update",
        "client": "alice-laptop",
        "user": "bob",
        "account": "$G",
        "host": "10.0.0.7",
        "at": "2026-11-25T16:35:20.66Z",
    }


def test_consumer_calls_and_a_domain_prefix_are_read() -> None:
    durable = parse("x", _audit("$JS.hub.API.CONSUMER.DURABLE.CREATE.ORDERS.worker"))
    assert durable is not None and durable.key == ("ORDERS", "worker")
    filtered = parse("x", _audit("$JS.API.CONSUMER.CREATE.ORDERS.worker.orders.new"))
    assert filtered is not None and filtered.key == ("ORDERS", "worker")
    deleted = parse("x", _audit("$JS.API.CONSUMER.DELETE.ORDERS.worker"))
    assert deleted is not None and deleted.cause is not None
    assert deleted.cause.operation == "delete"


def test_reads_purges_and_ephemeral_consumers_name_nothing() -> None:
    assert parse("$JS.EVENT.ADVISORY.API", _audit("$JS.API.STREAM.LIST")) is None
    assert parse("$JS.EVENT.ADVISORY.API", _audit("$JS.API.STREAM.DELETE.S")) is not None
    for subject in (
        "$JS.API.STREAM.LIST",
        "$JS.API.STREAM.INFO.ORDERS",
        "$JS.API.STREAM.PURGE.ORDERS",
        "$JS.API.CONSUMER.CREATE.ORDERS",
        "$JS.API.INFO",
    ):
        assert parse("$JS.EVENT.ADVISORY.API", _audit(subject)) is None, subject


def test_a_call_the_server_refused_names_no_one() -> None:
    """An audit's reply is an error ("consumer not found"): the call changed nothing. A
    reply that only holds the word in a value, or is not JSON, still names who called."""
    refused = '{"type": "x", "error": {"code": 404, "description": "consumer not found"}}'
    assert parse("x", _audit("$JS.API.CONSUMER.DELETE.ORDERS.w", response=refused)) is None
    said = json.dumps({"config": {"description": '"error": 1'}, "did_create": True})
    for response in (said, "not json", '{"error": null}', None):
        touch = parse("x", _audit("$JS.API.STREAM.CREATE.ORDERS", response=response))
        assert touch is not None and touch.cause is not None, response


def test_resource_events_wake_the_agent_without_a_cause() -> None:
    stream = json.dumps(
        {"type": "io.nats.jetstream.advisory.v1.stream_action", "stream": "S", "action": "delete"}
    ).encode()
    touch = parse("$JS.EVENT.ADVISORY.STREAM.DELETED.S", stream)
    assert touch is not None and touch.key == ("S", None) and touch.cause is None


def test_forged_or_broken_advisories_are_cut_or_ignored() -> None:
    for junk in (b"", b"not json", b"[1, 2]", b'{"type": 3}', b'{"client": "x"}'):
        assert parse("$JS.EVENT.ADVISORY.API", junk) is None
    long = {**CLIENT, "name": "x" * 10_000, "id": "not a number"}
    touch = parse("x", _audit("$JS.API.STREAM.DELETE.S", client=long))
    assert touch is not None and touch.cause is not None
    assert touch.cause.client == "x" * MAX_TEXT
    assert touch.origin is None  # an id that is not a number is never "the agent itself"


def test_the_log_escapes_untrusted_text() -> None:
    out = io.StringIO()
    Log("text", out).event("change", "Stream \x1b]8;;evil\x07X was healed", client="a\nb")
    line = out.getvalue()
    assert "\x1b" not in line and "\x07" not in line
    assert line.count("\n") == 1
    out = io.StringIO()
    Log("json", out).event("change", "##[error]x", client="\x1b[31m")
    assert "##[" not in out.getvalue()
    assert json.loads(out.getvalue())["client"] == "\x1b[31m"


def test_failures_back_off_exponentially_up_to_the_interval() -> None:
    options = ConnectionOptions(servers="nats://127.0.0.1:4222")
    agent = Agent(
        FixedSource(lambda root: PlanRequest.of(["specs"], options)),
        WatchSettings(interval=10.0, listen=None),
        Log("text", io.StringIO()),
    )
    waits = []
    for failures in range(1, 7):
        agent.watch.failures = failures
        waits.append(agent.watch._backoff())
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_a_git_url_never_shows_its_credentials() -> None:
    assert redact_git_url("https://bot:s3cret@git.example/infra.git") == (
        "https://***@git.example/infra.git"
    )
    assert redact_git_url("file:///srv/infra.git") == "file:///srv/infra.git"


def test_every_line_of_an_environment_names_it() -> None:
    out = io.StringIO()
    log = Log("json", out)
    log.bound(env="prod").event("cycle", "", trigger="interval")
    log.bound(env=None).event("cycle", "")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["env"] == "prod" and first["trigger"] == "interval"
    assert "env" not in second
    text = io.StringIO()
    Log("text", text).bound(env="prod").event("error", "cannot connect")
    assert "env=prod" in text.getvalue()


def test_each_environment_has_its_own_series() -> None:
    from reconciler.agent.metrics import Metrics

    metrics = Metrics(by_env=True)
    east, west = metrics.of("east"), metrics.of("west")
    east.connected.set(1)
    west.drift_events.labels("api").inc()
    sample = metrics.registry.get_sample_value
    assert sample("reconcile_connected", {"env": "east"}) == 1
    assert sample("reconcile_connected", {"env": "west"}) == 0
    assert sample("reconcile_drift_events_total", {"env": "west", "cause": "api"}) == 1
    assert sample("reconcile_drift_events_total", {"env": "east", "cause": "api"}) == 0
    one = Metrics()  # one target: no env label, as before
    one.of(None).connected.set(1)
    assert one.registry.get_sample_value("reconcile_connected", {}) == 1
