"""A create sends less and the server keeps the same config, on every release of the matrix.

The executor leaves out of a create's config the scalar fields that hold the value the
server gives a missing field (``apply.sent_on_create``). For each release: one server
gets every resource of test_normalize_live's corpus created from its whole desired
config (raw requests), a second server gets the same specs applied by the executor while
a raw client records every create request it sends. Each resource's config read back
from the second server is the first one's, exactly; and no recorded create carried a
field at the value its absence means.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import nats
import orjson
import pytest
from test_normalize_live import CLUSTER_SPECS, MATRIX, _request, _round_trip, spec

from reconciler.execution.apply import CONSUMER_SCALARS, STREAM_SCALARS, apply_plan
from reconciler.jetstream import ConnectionOptions, JetStreamClient
from reconciler.model.diff import diff_configs
from reconciler.model.normalize import desired_config, live_config
from reconciler.model.state import LiveState
from reconciler.planning.plan import build_plan
from reconciler.specs.spec import Spec


async def _applied(url: str, specs: list[Spec]) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """The create requests the executor sent (subject, body) for ``specs`` on an empty
    server, and every config read back after, by (kind, stream, name)."""
    spy = await nats.connect(url)
    sent: list[tuple[str, Any]] = []

    async def record(msg: Any) -> None:
        if msg.reply.startswith("_INBOX."):  # a client's (a mirror's own are the server's)
            sent.append((msg.subject, orjson.loads(msg.data)))

    await spy.subscribe("$JS.API.STREAM.CREATE.>", cb=record)
    await spy.subscribe("$JS.API.CONSUMER.CREATE.>", cb=record)
    await spy.flush()
    client = await JetStreamClient.connect(ConnectionOptions(servers=url))
    try:
        plan = build_plan(specs, LiveState(server=await client.server_info()))
        assert {change.action for change in plan.changes} == {"create"}
        result = await apply_plan(plan, client)
        assert result.ok and len(result.applied) == len(specs)
    finally:
        await client.close()
    read: dict[str, Any] = {}
    for s in specs:
        if s.kind == "Consumer":
            subject = f"$JS.API.CONSUMER.INFO.{s.stream}.{s.name}"
        else:
            subject = f"$JS.API.STREAM.INFO.{s.stream_name}"
        read[(s.kind, s.stream, s.name)] = (await _request(spy, subject))["config"]
    await asyncio.sleep(0.05)  # the last create's copy reaches the spy before its reply
    await spy.close()
    return sent, read


@pytest.mark.parametrize("version", MATRIX, ids=lambda v: v or "newest")
def test_a_create_sends_less_and_the_server_keeps_the_same_config(
    version: str | None, server_factory: Callable[..., Any], run: Callable[..., Any]
) -> None:
    whole = server_factory(version=version)
    trimmed = server_factory(version=version)
    _, pairs, _ = run(_round_trip(whole.url))  # created from the whole desired configs
    specs = [s for s, _, _ in pairs]
    sent, read = run(_applied(trimmed.url, specs))

    for s, _, from_whole in pairs:
        assert read[(s.kind, s.stream, s.name)] == from_whole, (s.kind, s.name)

    # each resource's create, once or more (a create refused with 10049 is asked again)
    assert {subject for subject, _ in sent} == {_create_subject(s) for s in specs}
    _none_at_default(sent)


def _create_subject(s: Spec) -> str:
    if s.kind == "Consumer":
        return f"$JS.API.CONSUMER.CREATE.{s.stream}.{s.name}"
    return f"$JS.API.STREAM.CREATE.{s.stream_name}"


def _none_at_default(sent: list[tuple[str, Any]]) -> None:
    for subject, body in sent:
        consumer = subject.startswith("$JS.API.CONSUMER.")
        config, absent = (body["config"], CONSUMER_SCALARS) if consumer else (body, STREAM_SCALARS)
        at_default = [
            name
            for name, value in config.items()
            if name in absent and value == absent[name] and type(value) is type(absent[name])
        ]
        assert at_default == [], (subject, at_default)


@pytest.mark.cluster
def test_on_a_cluster_replicas_left_out_read_back_as_declared(
    cluster: Any, run: Callable[..., Any]
) -> None:
    """One replica (a stream's default, left out) and none (a consumer's: its stream's)
    on a three-node cluster, beside three declared."""
    specs = [
        *CLUSTER_SPECS,
        spec("Stream", "R1", subjects=["r1.>"]),
        spec("Consumer", "on-r1", stream="R1", ack_policy="explicit"),
    ]
    sent, read = run(_applied(cluster.url, specs))
    assert {subject for subject, _ in sent} == {_create_subject(s) for s in specs}
    _none_at_default(sent)
    server = run(_server_info(cluster.url))
    for s in specs:
        parent = read[("Stream", None, s.stream)] if s.kind == "Consumer" else None
        desired = desired_config(s, server, stream_config=parent)
        canonical = live_config(s.kind, read[(s.kind, s.stream, s.name)], server)
        assert diff_configs(desired, canonical) == [], (s.kind, s.name)
    assert read[("Stream", None, "R1")]["num_replicas"] == 1
    assert read[("Stream", None, "R3")]["num_replicas"] == 3


async def _server_info(url: str) -> Any:
    client = await JetStreamClient.connect(ConnectionOptions(servers=url))
    try:
        return await client.server_info()
    finally:
        await client.close()
