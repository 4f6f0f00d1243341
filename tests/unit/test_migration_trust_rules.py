"""The rules that decide whether a migration record may be acted on (pure).

A record on ``MIGRATING_<stream>`` is data anyone who can create a stream could have
written: the planner acts on it only for a stream this run declares, bound to this
owner and to the server's own ``created`` facts, with ``--migrate``, and towards what
the specs declare now (or the way out the person chose).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from live_samples import SERVER, live_of

from reconciler.locations import Location
from reconciler.model.migration import (
    FILLING_KEY,
    Record,
    binding_problem,
    finished,
    temp_name,
)
from reconciler.model.normalize import desired_config
from reconciler.model.state import LiveState, StreamState
from reconciler.planning.export import export_state
from reconciler.planning.plan import Ownership, build_plan
from reconciler.planning.steps import Migrate
from reconciler.specs.spec import Spec

OLD_CREATED = "2026-01-01T00:00:00.1Z"
TEMP_CREATED = "2026-01-01T00:00:05.2Z"
NEW_CREATED = "2026-01-01T00:00:09.3Z"
TEMP = temp_name("ORDERS")


def spec(storage: str = "memory", **config: Any) -> Spec:
    body = {"subjects": ["orders.>"], "storage": storage, **config}
    return Spec("Stream", "ORDERS", body, Location("orders.yaml", 1))


OLD = spec("file")
NEW = spec("memory")


def record(phase: str = "refill", **changes: Any) -> Record:
    base = Record(
        stream="ORDERS",
        phase=phase,
        target=desired_config(NEW, SERVER),
        subjects={"subjects": ["orders.>"]},
        owner="default",
        origin=desired_config(OLD, SERVER),
        created=OLD_CREATED,
        temp_created=TEMP_CREATED,
        stream_created=NEW_CREATED,
    )
    return replace(base, **changes)


FILLING = {"name": "ORDERS", "metadata": {FILLING_KEY: TEMP}}
OLD_LIVE = {"name": "ORDERS", "subjects": ["orders.>"]}


def problem(rec: Record, live: dict[str, Any] | None, created: str | None, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "stream": "ORDERS",
        "owner": "default",
        "temp_created": TEMP_CREATED,
        "live": live,
        "live_created": created,
    }
    return binding_problem(rec, **{**args, **kw})


def test_a_record_round_trips_with_its_binding() -> None:
    rec = record()
    temp = {"name": TEMP, "metadata": rec.metadata()}
    assert Record.of(temp) == rec


@pytest.mark.parametrize(
    ("rec", "live", "created", "says"),
    [
        (record(stream="PAYMENTS"), FILLING, NEW_CREATED, "names stream 'PAYMENTS'"),
        (record(owner=None), FILLING, NEW_CREATED, "written for no owner"),
        (record(owner="other"), FILLING, NEW_CREATED, "written for owner 'other'"),
        (record(origin={}), FILLING, NEW_CREATED, "does not say which stream"),
        (record(created=None), FILLING, NEW_CREATED, "does not say which stream"),
        (record(temp_created="2020-01-01T00:00:00Z"), FILLING, NEW_CREATED, f"{TEMP} is not"),
        (record("handover", temp_created=None), OLD_LIVE, OLD_CREATED, "does not know"),
        (record("copy"), OLD_LIVE, "2026-02-02T00:00:00Z", "is not the stream"),
        (record("refill"), OLD_LIVE, OLD_CREATED, "is not the stream"),
        (record("refill"), None, None, "is not the stream"),
        (record("refill"), FILLING, "2026-02-02T00:00:00Z", "is not the stream"),
        (record("refill", stream_created=None), FILLING, NEW_CREATED, "is not the stream"),
    ],
)
def test_a_record_that_is_not_bound_is_refused(
    rec: Record, live: dict[str, Any] | None, created: str | None, says: str
) -> None:
    assert says in (problem(rec, live, created) or "")


@pytest.mark.parametrize(
    ("rec", "live", "created"),
    [
        (record("copy", temp_created=None), OLD_LIVE, OLD_CREATED),
        (record("handover"), OLD_LIVE, OLD_CREATED),
        (record("serving", stream_created=None), OLD_LIVE, OLD_CREATED),
        (record("serving", stream_created=None), None, None),
        (record("serving", stream_created=None), FILLING, NEW_CREATED),
        (record("refill"), FILLING, NEW_CREATED),
        (record("cutover"), FILLING, NEW_CREATED),
        (record("cutover"), OLD_LIVE, NEW_CREATED),
    ],
)
def test_a_bound_record_is_accepted_in_every_state_a_migration_passes(
    rec: Record, live: dict[str, Any] | None, created: str | None
) -> None:
    assert problem(rec, live, created) is None


def test_only_a_cutover_past_its_final_config_is_finished() -> None:
    assert finished(record("cutover"), OLD_LIVE)
    assert not finished(record("cutover"), FILLING)
    assert not finished(record("refill"), OLD_LIVE)


def live_with(rec: Record, stream: dict[str, Any] | None, created: str | None) -> LiveState:
    streams: dict[str, Any] = {TEMP: {"name": TEMP, "metadata": rec.metadata()}}
    states = {TEMP: StreamState(messages=100, created=TEMP_CREATED)}
    if stream is not None:
        streams["ORDERS"] = stream
        states["ORDERS"] = StreamState(created=created)
    return LiveState(server=SERVER, streams=streams, stream_state=states)


def filling(rec: Record) -> dict[str, Any]:
    config = dict(live_of(NEW).streams["ORDERS"])
    config["metadata"] = {**config["metadata"], FILLING_KEY: TEMP}
    return config


def only_step(specs: list[Spec], live: LiveState, **kw: Any) -> Migrate:
    (step,) = build_plan(specs, live, **kw).steps
    assert isinstance(step, Migrate)
    return step


def test_a_bound_record_is_resumed_only_with_migrate() -> None:
    rec = record()
    live = live_with(rec, filling(rec), NEW_CREATED)
    assert "resumed only with --migrate" in only_step([NEW], live).blocked
    step = only_step([NEW], live, migrate=True)
    assert not step.blocked and step.config == rec.target and step.phase == "refill"


def test_another_owners_run_and_a_forged_owner_are_blocked() -> None:
    rec = record()
    live = live_with(rec, filling(rec), NEW_CREATED)
    other = only_step([NEW], live, migrate=True, ownership=Ownership("other"))
    assert "owner 'default', not 'other'" in other.blocked
    forged = live_with(record(owner=None), filling(rec), NEW_CREATED)
    assert f"{TEMP} is not a migration of ORDERS" in only_step([NEW], forged, migrate=True).blocked


def test_a_record_of_a_stream_no_spec_declares_is_never_acted_on() -> None:
    rec = record()
    live = live_with(rec, filling(rec), NEW_CREATED)
    other = Spec("Stream", "OTHER", {"subjects": ["other.>"]}, Location("o.yaml", 1))
    plan = build_plan([other], live, migrate=True, migration="resume")
    assert [s.action for s in plan.steps] == ["create"]
    assert not [e for e in plan.entries if e.name == TEMP]


def test_changed_specs_ask_for_a_choice_and_each_choice_goes_where_it_says() -> None:
    rec = record()
    live = live_with(rec, filling(rec), NEW_CREATED)
    newer = spec("memory", description="v2")
    asked = only_step([newer], live, migrate=True)
    assert "choose --migration resume" in asked.blocked
    assert [(f.path, f.after) for f in asked.fields] == [("description", "v2")]
    assert only_step([newer], live, migrate=True, migration="resume").config == rec.target
    assert only_step([newer], live, migrate=True, migration="rollback").config == rec.origin
    onward = only_step([newer], live, migrate=True, migration="continue")
    assert onward.config["description"] == "v2" and not onward.blocked
    back = only_step([OLD], live, migrate=True, migration="continue")
    assert back.config == rec.origin  # the declared config is the old one: a rollback


def test_a_finished_migration_can_only_be_resumed() -> None:
    rec = record("cutover")
    done = {**live_of(NEW).streams["ORDERS"]}
    live = live_with(rec, done, NEW_CREATED)
    newer = spec("memory", description="v2")
    step = only_step([newer], live, migrate=True, migration="rollback")
    assert "only --migration resume" in step.blocked


def test_a_taken_migrating_name_blocks_a_new_migration() -> None:
    live = live_of(OLD)
    streams = {**live.streams, TEMP: {"name": TEMP, "subjects": ["theirs.>"]}}
    taken = LiveState(server=SERVER, streams=streams)
    plan = build_plan([NEW], taken, migrate=True)
    (step,) = [s for s in plan.steps if s.name == "ORDERS"]
    assert isinstance(step, Migrate) and f"stream {TEMP} already exists" in step.blocked
    assert step.to_json()["migration"]["blocked"] == step.blocked


def test_export_leaves_out_a_migrations_streams_and_says_so() -> None:
    rec = record()
    live = live_with(rec, filling(rec), NEW_CREATED)
    said: list[str] = []
    assert export_state(live, on_skip=said.append) == []
    assert said == [
        f"skipped stream {TEMP}: the temporary stream of an interrupted migration "
        "(docs/migrate.md: resume or roll it back, then export again)",
        f"skipped stream ORDERS: mid-migration, still filled from {TEMP} "
        "(docs/migrate.md: resume or roll it back, then export again)",
    ]
