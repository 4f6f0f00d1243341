"""A consumer of an interest stream that stops needing messages makes the server delete
them: narrowing its filter, or deleting it while other consumers remain (measured on
the installed nats-server and on 2.10.26, docs/jetstream-notes.md). The plan must show
that loss, so apply needs ``--allow-data-loss`` and a policy sees it; messages counted
on the server after each step."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import nats
import pytest
from servers import NatsServer, run

from reconciler.errors import PolicyDenied, RefusedPlan
from reconciler.execution import run as engine
from reconciler.execution.requests import ApplyRequest, PlanRequest
from reconciler.jetstream import ConnectionOptions

pytestmark = pytest.mark.integration

#: A policy that lets no step lose more than 10 messages, nor an uncounted amount.
BOUNDED = """\
rules:
  - id: bounded-loss
    level: deny
    message: no step loses more than 10 messages
    expr: step.loss_messages <= 10 && !step.loss_unknown
"""
STREAM = "kind: Stream\nname: INTF\nsubjects: [intf.>]\nretention: interest\n"


async def _held(url: str) -> int:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        reply = json.loads((await nc.request("$JS.API.STREAM.INFO.INTF", b"", timeout=5)).data)
        return int(reply["state"]["messages"])
    finally:
        await nc.close()


async def _publish(url: str, counts: dict[str, int]) -> None:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        for subject, count in counts.items():
            for _ in range(count):
                await nc.request(subject, b"x", timeout=5)
    finally:
        await nc.close()


def _consumer(name: str, extra: str = "") -> str:
    return f"kind: Consumer\nstream: INTF\nname: {name}\nack_policy: explicit\n{extra}"


def _setup(url: str, tmp_path: Path, consumers: dict[str, str]) -> tuple[Path, ConnectionOptions]:
    """The interest stream and ``consumers`` applied, then 30 ``a`` and 20 ``b`` messages."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "stream.yaml").write_text(STREAM, encoding="utf-8")
    for name, text in consumers.items():
        (specs / f"{name}.yaml").write_text(text, encoding="utf-8")
    options = ConnectionOptions(servers=url)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(url, {"intf.a": 30, "intf.b": 20}))
    return specs, options


def _refused_then_applied(specs: Path, options: ConnectionOptions, url: str, **flags: bool) -> int:
    """Apply is refused without --allow-data-loss (nothing deleted), then applied with it:
    the messages the server holds afterwards."""
    assert run(_held(url)) == 50
    wanted = PlanRequest.of([specs], options, **flags)
    with pytest.raises(RefusedPlan, match="allow-data-loss"):
        run(engine.apply_for(ApplyRequest(plan=wanted, approved=True, lock_timeout=None)))
    assert run(_held(url)) == 50
    request = ApplyRequest(plan=wanted, allow_data_loss=True, approved=True, lock_timeout=None)
    assert run(engine.apply_for(request)).ok
    return run(_held(url))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("", "filter_subject: intf.a\n"),
        ("filter_subjects: [intf.a, intf.b]\n", "filter_subjects: [intf.a]\n"),
    ],
    ids=["filter_subject", "filter_subjects"],
)
def test_narrowing_a_consumers_filter_on_an_interest_stream_is_a_data_loss(
    clean_server: NatsServer, tmp_path: Path, before: str, after: str
) -> None:
    """The server deleted the 20 ``b`` messages at the update (50 -> 30); the plan showed
    a plain update, no --allow-data-loss, and a policy saw no loss. Counted from the
    stream's per-subject counts: no other consumer takes ``b``, so exactly 20."""
    url = clean_server.url
    specs, options = _setup(url, tmp_path, {"ONLY": _consumer("ONLY", before)})
    (specs / "ONLY.yaml").write_text(_consumer("ONLY", after), encoding="utf-8")
    policy = tmp_path / "policy.yaml"
    policy.write_text(BOUNDED, encoding="utf-8")
    wanted = PlanRequest.of([specs], options, policies=(policy,))
    plan = run(engine.plan_for(wanted))
    [step] = plan.changes
    assert (step.action, step.destructive) == ("update", True)
    assert [(loss.messages, loss.floor) for loss in step.losses] == [(20, False)]
    assert "deletes the 20 messages held on subjects no other consumer" in step.losses[0].summary
    assert [(f.rule, f.action) for f in plan.policy] == [("bounded-loss", "update")]
    request = ApplyRequest(plan=wanted, allow_data_loss=True, approved=True, lock_timeout=None)
    with pytest.raises(PolicyDenied, match="bounded-loss"):
        run(engine.apply_for(request))
    assert _refused_then_applied(specs, options, url) == 30


def test_widening_a_consumers_filter_is_no_loss(clean_server: NatsServer, tmp_path: Path) -> None:
    """The other way round nothing goes: a plain update, all 50 messages kept."""
    url = clean_server.url
    specs, options = _setup(url, tmp_path, {"ONLY": _consumer("ONLY", "filter_subject: intf.a\n")})
    assert run(_held(url)) == 30  # no consumer took the 'b' messages: the stream kept none
    (specs / "ONLY.yaml").write_text(_consumer("ONLY"), encoding="utf-8")
    plan = run(engine.plan_for(PlanRequest.of([specs], options)))
    assert [(s.action, s.destructive) for s in plan.changes] == [("update", False)]
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    assert run(_held(url)) == 30


def test_deleting_one_of_two_consumers_of_an_interest_stream_says_messages_go(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """With another consumer left the server deletes the messages only the deleted one
    still needed (50 -> 20); the plan said only that its delivery state was lost."""
    url = clean_server.url
    consumers = {
        "A": _consumer("A", "filter_subject: intf.a\n"),
        "B": _consumer("B", "filter_subject: intf.b\n"),
    }
    specs, options = _setup(url, tmp_path, consumers)
    (specs / "A.yaml").unlink()
    plan = run(engine.plan_for(PlanRequest.of([specs], options, prune=True)))
    [step] = plan.changes
    assert (step.action, step.destructive) == ("delete", True)
    [loss] = step.losses
    assert (loss.messages, loss.floor) == (30, False), loss.summary
    assert "delivery and acknowledgement state" in loss.summary
    assert _refused_then_applied(specs, options, url, prune=True) == 20


def test_narrowing_next_to_another_consumer_counts_what_only_it_took(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """C takes everything, D takes ``b``; C narrowed to ``a`` deletes the 10 ``c``
    messages (60 -> 50): counted 10, and the ``b`` ones D may have acknowledged are an
    uncounted part (``floor``)."""
    url = clean_server.url
    consumers = {"C": _consumer("C"), "D": _consumer("D", "filter_subject: intf.b\n")}
    specs, options = _setup(url, tmp_path, consumers)
    run(_publish(url, {"intf.c": 10}))
    (specs / "C.yaml").write_text(_consumer("C", "filter_subject: intf.a\n"), encoding="utf-8")
    plan = run(engine.plan_for(PlanRequest.of([specs], options)))
    [step] = plan.changes
    assert [(loss.messages, loss.floor) for loss in step.losses] == [(10, True)]
    request = ApplyRequest(
        plan=PlanRequest.of([specs], options),
        allow_data_loss=True,
        approved=True,
        lock_timeout=None,
    )
    assert run(engine.apply_for(request)).ok
    assert run(_held(url)) == 50


def test_too_many_subjects_leave_the_loss_uncounted(
    clean_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the subject limit the stream's subjects are not read: the loss is there,
    uncounted (a policy sees ``loss_unknown``)."""
    from reconciler.execution import interest_counts

    monkeypatch.setattr(interest_counts, "SUBJECT_LIMIT", 1)
    url = clean_server.url
    specs, options = _setup(url, tmp_path, {"ONLY": _consumer("ONLY")})
    (specs / "ONLY.yaml").write_text(_consumer("ONLY", "filter_subject: intf.a\n"), "utf-8")
    plan = run(engine.plan_for(PlanRequest.of([specs], options)))
    [step] = plan.changes
    assert [loss.messages for loss in step.losses] == [None]
    assert "holds 50 messages" in step.losses[0].summary


def test_narrowing_deletes_on_an_older_server_too(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Measured on 2.10.26 as on the newest: 50 -> 30."""
    server = server_factory(version="2.10.26")
    specs, options = _setup(server.url, tmp_path, {"ONLY": _consumer("ONLY")})
    (specs / "ONLY.yaml").write_text(_consumer("ONLY", "filter_subject: intf.a\n"), "utf-8")
    plan = run(engine.plan_for(PlanRequest.of([specs], options)))
    assert [(s.action, [loss.messages for loss in s.losses]) for s in plan.changes] == [
        ("update", [20])
    ]
    assert _refused_then_applied(specs, options, server.url) == 30
