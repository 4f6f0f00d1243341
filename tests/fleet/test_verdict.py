"""The fleet's verdict is the planner's: one stream group at a time, no Spark."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import resource_set, stream_document

from reconciler.fleet.verdict import stream_findings, to_json
from reconciler.identity import LOCK_BUCKET, stream_of
from reconciler.locations import Location
from reconciler.model.normalize import desired_config
from reconciler.model.state import LiveState, ServerInfo
from reconciler.model.values import redact
from reconciler.planning.drift import from_plan
from reconciler.planning.memo import Memo
from reconciler.planning.plan import StreamGroup, build_plan, group_streams
from reconciler.specs.document import Document
from reconciler.specs.spec import DEFAULT_OWNER, MANAGED_KEY, Spec
from reconciler.specs.validate import validate_documents

SERVER = ServerInfo(version="2.12.3", api_level=3)
HERE = Location("specs.yaml", 1)


def specs_of(documents: list[dict[str, Any]]) -> list[Spec]:
    return validate_documents([Document(body=d, source=HERE, locations={}) for d in documents])


def plan_rows(specs: list[Spec], live: LiveState) -> set[tuple[Any, ...]]:
    """What ``reconcile drift`` reports, as the fleet's rows."""
    rows: set[tuple[Any, ...]] = set()
    for r in from_plan(build_plan(specs, live)).resources:
        if r.status == "drifted":
            for f in r.fields:
                declared = to_json(redact(f.declared, path=f.path))
                rows.add(
                    (
                        r.kind,
                        r.stream,
                        r.name,
                        r.status,
                        f.path,
                        declared,
                        to_json(redact(f.live, path=f.path)),
                    )
                )
        else:
            rows.add((r.kind, r.stream, r.name, r.status, None))
    return rows


def fleet_rows(specs: list[Spec], live: LiveState) -> set[tuple[Any, ...]]:
    rows: set[tuple[Any, ...]] = set()
    for group in group_streams(specs, live):
        for f in stream_findings(group, live.server):
            rows.add(f if f[3] == "drifted" else f[:5])
    return rows


@st.composite
def spec_and_live(draw: st.DrawFn) -> tuple[list[Spec], LiveState]:
    """Declared resources, and a server holding some of them: equal, changed, unmarked."""
    specs = specs_of(draw(resource_set(max_streams=3)))
    return specs, draw_live(draw, specs)


def draw_live(draw: st.DrawFn, specs: list[Spec]) -> LiveState:
    """A server holding some of ``specs``: equal, changed, unmarked; and extra streams."""
    streams: dict[str, Any] = {}
    consumers: dict[tuple[str, str], Any] = {}
    stream_configs: dict[str, Any] = {}
    for spec in specs:
        fate = draw(st.sampled_from(["absent", "equal", "changed", "unmarked"]))
        if spec.kind == "Consumer":
            parent = stream_configs.get(spec.stream_name)
            if parent is None or fate == "absent":
                continue
            config = desired_config(spec, SERVER, stream_config=parent)
            if fate == "changed":
                config = {**config, "description": "changed on the server"}
            consumers[(spec.stream_name, spec.name)] = config
            continue
        if fate == "absent":
            continue
        source = spec
        if fate == "changed":
            other = draw(stream_document(spec.name))
            source = specs_of([other])[0]
        config = desired_config(source, SERVER)
        if fate == "unmarked":
            config["metadata"] = {k: v for k, v in config["metadata"].items() if k != MANAGED_KEY}
        streams[spec.stream_name] = config
        stream_configs[spec.stream_name] = config
    extras = [d for d in draw(resource_set(max_streams=2)) if d["kind"] == "Stream"]
    for spec in specs_of(extras):
        if spec.stream_name not in streams:
            config = desired_config(spec, SERVER)
            if draw(st.booleans()):  # no marker: unmanaged; with it: an orphan
                config["metadata"] = {}
            streams[spec.stream_name] = config
    return LiveState(server=SERVER, streams=streams, consumers=consumers)


@st.composite
def spec_and_days(draw: st.DrawFn) -> tuple[list[Spec], list[LiveState]]:
    """Declared resources and the server on three days, each drawn on its own."""
    specs = specs_of(draw(resource_set(max_streams=3)))
    return specs, [draw_live(draw, specs) for _ in range(3)]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_and_live())
def test_the_fleet_verdict_equals_reconcile_drift_on_random_pairs(
    pair: tuple[list[Spec], LiveState],
) -> None:
    specs, live = pair
    assert fleet_rows(specs, live) == plan_rows(specs, live)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_and_days())
def test_a_plan_memo_carried_from_day_to_day_never_changes_a_verdict(
    pair: tuple[list[Spec], list[LiveState]],
) -> None:
    """The job keeps the planner's memo across the days of a partition: what it answers
    for one day must be what planning that day from scratch gives."""
    specs, days = pair
    memo = Memo.for_plan(SERVER, DEFAULT_OWNER)
    for live in [*days, *days]:  # the second round meets every input again
        for group in group_streams(specs, live):
            assert stream_findings(group, SERVER, memo) == stream_findings(group, SERVER)
    assert memo.hits > 0 or not memo.found


def test_drifted_fields_carry_declared_and_live_json_and_missing_the_whole_config() -> None:
    specs = specs_of([{"kind": "Stream", "name": "S", "subjects": ["s.>"], "max_age": "1h"}])
    live = desired_config(specs[0], SERVER)
    group = StreamGroup("S", declared=specs[0], live={**live, "max_age": 10**9})
    assert stream_findings(group, SERVER) == [
        ("Stream", None, "S", "drifted", "max_age", "3600000000000", "1000000000")
    ]
    (missing,) = stream_findings(StreamGroup("S", declared=specs[0]), SERVER)
    assert missing[3] == "missing" and json.loads(str(missing[5]))["max_age"] == 3600 * 10**9


def test_secrets_never_reach_a_finding() -> None:
    spec = specs_of([{"kind": "Stream", "name": "S", "metadata": {"api_token": "mine-s3cret"}}])[0]
    live = desired_config(spec, SERVER)
    live["metadata"] = {**live["metadata"], "api_token": "theirs-s3cret"}
    found = stream_findings(StreamGroup("S", declared=spec, live=live), SERVER)
    found += stream_findings(StreamGroup("S", declared=spec), SERVER)
    found += stream_findings(StreamGroup("S", live=live), SERVER)
    assert found and "s3cret" not in repr(found)


def test_the_apply_lock_bucket_is_never_listed() -> None:
    name = stream_of("KeyValue", LOCK_BUCKET)
    config = {"name": name, "subjects": [f"$KV.{LOCK_BUCKET}.>"]}
    assert stream_findings(StreamGroup(name, live=config), SERVER) == []


def test_an_unmanaged_stream_is_shown_with_its_live_config() -> None:
    config = {"name": "LEGACY", "subjects": ["legacy.>"], "max_age": 60 * 10**9}
    [(kind, _, name, status, field, desired, live)] = stream_findings(
        StreamGroup("LEGACY", live=config), SERVER
    )
    assert (kind, name, status, field, desired) == ("Stream", "LEGACY", "unmanaged", None, None)
    assert json.loads(str(live))["max_age"] == 60 * 10**9
