"""The pipeline's stages (``execution.stages``) offline, through the in-memory ``$JS.API``
at the transport seam (``jetstream.memory``): load, read, plan, verdict, execute, and
what each sends. What only a server proves (its defaults, its refusals) is tested on
real servers (tests/integration)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from reconciler.errors import RefusalKind, RefusedPlan, SpecError
from reconciler.execution import stages
from reconciler.identity import ResourceRef
from reconciler.jetstream import ConnectionOptions
from reconciler.jetstream.memory import MemoryServer
from reconciler.model.normalize import ownership_marker
from reconciler.planning.steps import Plan
from reconciler.specs.spec import DEFAULT_OWNER

ORDERS = "kind: Stream\nname: ORDERS\nsubjects: [orders.>]\nmax_msgs: {max_msgs}\n"


def _request(tmp_path: Path, *documents: str) -> stages.PlanRequest:
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    (specs / "streams.yaml").write_text("---\n".join(documents), encoding="utf-8")
    return stages.PlanRequest.of([specs], ConnectionOptions())


async def _planned(server: MemoryServer, request: stages.PlanRequest) -> Plan:
    client = server.client()
    specs = stages.load(request)
    live = await stages.read(client)
    return await stages.plan(client, specs, live, request, locked=True)


def _sent(server: MemoryServer, verb: str) -> list[str]:
    """The subjects sent with ``verb`` (CREATE, UPDATE, LIST, ...) in them, in order."""
    return [subject for subject in server.requests if verb in subject.split(".")]


def test_a_plan_executed_then_planned_again_is_empty(tmp_path: Path) -> None:
    server = MemoryServer()
    request = _request(tmp_path, ORDERS.format(max_msgs=100))
    plan = asyncio.run(_planned(server, request))
    assert [step.label for step in plan.changes] == ["Stream ORDERS"]
    assert stages.verdict(plan) == ()
    asyncio.run(stages.execute(plan, server.client()))
    assert _sent(server, "CREATE") == ["$JS.API.STREAM.CREATE.ORDERS"]
    assert not asyncio.run(_planned(server, request)).has_changes


def test_the_verdict_refuses_what_the_account_has_no_room_for(tmp_path: Path) -> None:
    """max_streams 1, two streams declared: the plan stage finds it (a value on the plan),
    the verdict refuses it with the spec's line, and nothing is sent that changes the
    server."""
    server = MemoryServer(limits={"max_streams": 1})
    other = "kind: Stream\nname: AUDIT\nsubjects: [audit.>]\n"
    request = _request(tmp_path, ORDERS.format(max_msgs=100), other)
    plan = asyncio.run(_planned(server, request))
    (refusal,) = stages.verdict(plan, stages.Allowances(allow_data_loss=True))
    assert isinstance(refusal, SpecError)
    assert refusal.kind is RefusalKind.CAPACITY
    assert "streams.yaml:" in str(refusal)
    assert "the account allows 1" in str(refusal)
    with pytest.raises(SpecError):
        asyncio.run(stages.execute(plan, server.client()))
    assert _sent(server, "CREATE") == []


def test_the_verdict_refuses_an_update_that_deletes_messages(tmp_path: Path) -> None:
    server = MemoryServer()
    asyncio.run(
        stages.execute(
            asyncio.run(_planned(server, _request(tmp_path, ORDERS.format(max_msgs=100)))),
            server.client(),
        )
    )
    server.hold("ORDERS", 20)
    plan = asyncio.run(_planned(server, _request(tmp_path, ORDERS.format(max_msgs=5))))
    (refusal,) = stages.verdict(plan)
    assert refusal.kind is RefusalKind.DATA_LOSS
    assert refusal.details[0].startswith("update Stream ORDERS: holds 20 messages")
    with pytest.raises(RefusedPlan):
        asyncio.run(stages.execute(plan, server.client()))
    assert _sent(server, "UPDATE") == []
    allowed = stages.Allowances(allow_data_loss=True)
    assert stages.verdict(plan, allowed) == ()


def test_a_scoped_read_lists_every_stream_and_reads_only_the_scoped_consumers() -> None:
    server = MemoryServer()
    for name in ("A", "B"):
        server.add(_stream(name), {"name": "C", "durable_name": "C"})
    live = asyncio.run(stages.read(server.client(), stages.Scope.of(ResourceRef("Stream", "A"))))
    assert sorted(live.streams) == ["A", "B"]
    assert sorted(live.consumers) == [("A", "C")]
    assert _sent(server, "LIST") == ["$JS.API.STREAM.LIST", "$JS.API.CONSUMER.LIST.A"]


def test_the_removal_plan_is_the_delete_prune_plans(tmp_path: Path) -> None:
    server = MemoryServer()
    server.add({**_stream("ORDERS"), "metadata": ownership_marker(DEFAULT_OWNER)})
    server.hold("ORDERS", 20, 2048)
    client = server.client()
    target = ResourceRef("Stream", "ORDERS")
    request = stages.resource_request()
    live = asyncio.run(stages.read(client, stages.Scope.of(target)))
    plan = asyncio.run(stages.plan_removal(client, target, live, request))
    (step,) = plan.changes
    assert [loss.summary for loss in step.losses] == [
        "holds 20 messages, 2KiB (2048); all are deleted"
    ]
    (refusal,) = stages.verdict(plan)
    assert refusal.kind is RefusalKind.DATA_LOSS


@pytest.mark.parametrize(
    ("metadata", "said"),
    [({}, "managed-by marker"), (ownership_marker("teamb"), "owner 'teamb'")],
)
def test_a_removal_never_plans_the_delete_of_what_prune_leaves_alone(
    metadata: dict[str, str], said: str
) -> None:
    """An unmarked stream of the name (made again outside this tool) and another owner's:
    prune lists them as unmanaged and foreign; a removal refuses them, with no step."""
    server = MemoryServer()
    server.add({**_stream("ORDERS"), "metadata": metadata})
    server.hold("ORDERS", 20, 2048)
    client = server.client()
    target = ResourceRef("Stream", "ORDERS")
    live = asyncio.run(stages.read(client, stages.Scope.of(target)))
    plan = asyncio.run(stages.plan_removal(client, target, live, stages.resource_request()))
    assert plan.changes == ()
    (refusal,) = stages.verdict(plan)
    assert refusal.kind is RefusalKind.INVALID
    (problem,) = refusal.problems
    assert said in problem.message and "nothing was changed" in problem.message


def _stream(name: str) -> dict[str, Any]:
    return {"name": name, "subjects": [f"{name.lower()}.>"]}
