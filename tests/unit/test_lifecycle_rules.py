"""Lifecycle per resource, pure: the settings, their merge, and what the planner and the
executor's one refusal make of them (the real-server tests: tests/integration/test_lifecycle.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from live_samples import SERVER, live_of

from pulumi_provider import operations
from reconciler.agent.loop import WORDS as AGENT_WORDS
from reconciler.door_words import CLI, Allowance, Words, spoken
from reconciler.errors import Problem, RefusedPlan, SpecError
from reconciler.execution.apply import check_allowed
from reconciler.identity import ResourceRef
from reconciler.locations import Location
from reconciler.model.normalize import desired_config
from reconciler.planning.drift import resource_from_entry
from reconciler.planning.memo import Memo
from reconciler.planning.plan import build_plan
from reconciler.planning.steps import Delete, Observed, Plan, prevention
from reconciler.render.text import render_text
from reconciler.specs.lifecycle import (
    MANAGE,
    PROTECT_KEY,
    Lifecycle,
    lifecycle_of,
    recorded_protection,
)
from reconciler.specs.project import load_project
from reconciler.specs.spec import Kind, Spec

EVERYTHING = {"allow_replace": True, "allow_data_loss": True}


def spec(kind: Kind, name: str, stream: str | None = None, **config: Any) -> Spec:
    lifecycle = config.pop("lifecycle", MANAGE)
    return Spec(kind, name, config, Location("specs.yaml", 3), stream=stream, lifecycle=lifecycle)


PROTECTED = Lifecycle(prevent_destroy=True, protected_at="specs.yaml:9")
ORDERS = spec("Stream", "ORDERS", subjects=["orders.>"], lifecycle=PROTECTED)


def _where(path: str) -> Location:
    return Location("orders.yaml", {"lifecycle.ignore_changes.1": 8}.get(path, 5))


def test_safety_wins_when_settings_merge() -> None:
    spec_side = Lifecycle(ignore_changes=frozenset({"max_msgs"}), observe=True, observed_at="a:1")
    env_side = Lifecycle(prevent_destroy=True, ignore_changes=frozenset({"description"}))
    merged = spec_side.merged(env_side)
    assert merged.prevent_destroy and merged.observe
    assert merged.ignore_changes == {"max_msgs", "description"}
    assert MANAGE.merged(env_side) is env_side and spec_side.merged(MANAGE) is spec_side


def test_an_unknown_ignored_field_names_its_line_and_the_closest_field() -> None:
    problems: list[Problem] = []
    raw = {"ignore_changes": ["max_msgs", "max_byte"]}
    lifecycle_of(raw, "Stream", _where, problems)
    (problem,) = problems
    assert str(problem.location) == "orders.yaml:8"
    assert "unknown field 'max_byte' for ignore_changes (did you mean 'max_bytes'?)" in str(problem)


def test_bucket_fields_are_named_as_the_bucket_spec_names_them() -> None:
    problems: list[Problem] = []
    found = lifecycle_of({"ignore_changes": ["ttl", "history"]}, "KeyValue", _where, problems)
    assert not problems and found.ignore_changes == {"ttl", "history"}
    lifecycle_of({"ignore_changes": ["max_msgs_per_subject"]}, "KeyValue", _where, problems)
    assert len(problems) == 1


def test_identity_fields_cannot_be_ignored() -> None:
    problems: list[Problem] = []
    lifecycle_of({"ignore_changes": ["name"]}, "Stream", _where, problems)
    assert len(problems) == 1


def test_protection_is_written_into_the_desired_metadata() -> None:
    metadata = desired_config(ORDERS, SERVER)["metadata"]
    assert metadata[PROTECT_KEY] == "specs.yaml:9"
    declared = spec("Stream", "X", metadata={PROTECT_KEY: "forged in a spec"})
    assert PROTECT_KEY not in desired_config(declared, SERVER)["metadata"]


def test_a_record_at_another_line_is_the_same_protection() -> None:
    live = live_of(ORDERS)
    moved = replace(ORDERS, lifecycle=replace(PROTECTED, protected_at="specs.yaml:40"))
    assert not build_plan([moved], live).has_changes


def test_a_prevented_step_stays_in_the_plan_and_no_flag_allows_it() -> None:
    live = live_of(ORDERS)
    changed = replace(ORDERS, config={"subjects": ["orders.>"], "storage": "memory"})
    plan = build_plan([changed], live)
    (step,) = plan.prevented
    assert step.action == "replace" and "apply --migrate keeps its messages" not in step.reasons
    assert step.reasons[-1] == (
        "prevented by lifecycle prevent_destroy (specs.yaml:9); no flag allows this"
    )
    assert plan.refused(allow_replace=False, allow_data_loss=False) == ()
    with pytest.raises(RefusedPlan, match="protected by lifecycle prevent_destroy"):
        check_allowed(plan, **EVERYTHING)
    assert "apply refuses the plan, whatever flags" in render_text(plan)


@pytest.mark.parametrize(
    "words", [CLI, operations.WORDS, AGENT_WORDS], ids=["cli", "pulumi", "agent"]
)
def test_a_replace_names_its_doors_migration_and_a_prevented_one_no_migration(
    words: Words,
) -> None:
    """A replace a migration could make says which run keeps its messages, in the words
    of the door the run came through (``apply --migrate``, Pulumi's ``migrate=True``, the
    command the agent names): each door was told the CLI's. A prevented replace still
    says none (a migration is prevented too), whatever the door's words."""
    changed = {"subjects": ["orders.>"], "storage": "memory"}
    free = replace(ORDERS, lifecycle=MANAGE)
    hint = f"{words[Allowance.MIGRATE_RUN]} keeps its messages"
    with spoken(words):
        (step,) = build_plan([replace(free, config=changed)], live_of(free)).changes
        (kept,) = build_plan([replace(ORDERS, config=changed)], live_of(ORDERS)).prevented
    assert step.action == "replace" and hint in step.reasons, step.reasons
    assert kept.action == "replace"
    assert not [reason for reason in kept.reasons if "keeps its messages" in reason], kept.reasons


def test_a_forged_record_protects_and_is_escaped() -> None:
    """A resource of this owner no spec declares, whose metadata someone set."""
    live = live_of(spec("Stream", "OLD"))
    live.streams["OLD"]["metadata"][PROTECT_KEY] = "\x1b]8;;evil\x07x.yaml:1"
    plan = build_plan([], live, prune=True)
    (step,) = plan.prevented
    assert "\x1b" not in prevention(step) and "\\x1b]8;;evil\\x07x.yaml:1" in prevention(step)


def test_a_delete_built_without_the_planner_reads_the_record() -> None:
    """Pulumi's destroy makes its own Delete: the one rule still refuses it."""
    config = desired_config(ORDERS, SERVER)
    step = Delete(ref=ResourceRef("Stream", "ORDERS"), live=config)
    plan = Plan(server=SERVER, changes=(step,))
    assert recorded_protection(config) == "specs.yaml:9"
    with pytest.raises(RefusedPlan, match="prevent_destroy"):
        check_allowed(plan, **EVERYTHING)


def test_an_environment_protects_what_no_spec_declares() -> None:
    live = live_of(spec("Stream", "OLD"))
    env = Lifecycle(prevent_destroy=True, protected_at="reconcile.yaml:6")
    plan = build_plan([], live, prune=True, lifecycle=env)
    assert "reconcile.yaml:6" in prevention(plan.prevented[0])
    kept = build_plan([], live, lifecycle=env)
    assert "--prune will not delete it" in kept.orphans[0].reasons[-1]


def test_a_stream_goes_only_with_its_protected_consumer() -> None:
    worker = spec("Consumer", "worker", "ORDERS", ack_policy="explicit", lifecycle=PROTECTED)
    stream = spec("Stream", "ORDERS", subjects=["orders.>"])
    live = live_of(stream, worker)
    plan = build_plan([replace(stream, config={"storage": "memory"}), worker], live)
    assert {s.label for s in plan.prevented} == {"Stream ORDERS", "Consumer ORDERS/worker"}


def test_observed_resources_get_no_step() -> None:
    watch = Lifecycle(observe=True, observed_at="specs.yaml:12")
    held = spec("Stream", "ORDERS", subjects=["orders.>"], lifecycle=watch)
    later = spec("Stream", "LATER", lifecycle=watch)
    worker = spec("Consumer", "w", "LATER", ack_policy="explicit")
    live = live_of(spec("Stream", "ORDERS", subjects=["orders.>"], max_msgs=5))
    plan = build_plan([held, later, worker], live, prune=True)
    assert plan.changes == ()
    notes = {note.label: note for note in plan.observed}
    assert {f.path for f in notes["Stream ORDERS"].fields} == {"max_msgs"}
    assert notes["Stream LATER"].missing and "Consumer LATER/w" in notes
    drift = {label: resource_from_entry(note).status for label, note in notes.items()}
    assert drift == {
        "Stream ORDERS": "drifted",
        "Stream LATER": "missing",
        "Consumer LATER/w": "missing",
    }
    assert isinstance(plan.entries[-1], Observed)
    assert plan.to_json()["observed"][0]["reasons"][0].startswith("lifecycle mode observe (")


def test_ignored_fields_are_planned_as_live() -> None:
    ignoring = Lifecycle(ignore_changes=frozenset({"history", "ttl"}))
    bucket = spec("KeyValue", "cfg", history=2, ttl=60 * 10**9, lifecycle=ignoring)
    live = live_of(spec("KeyValue", "cfg", history=5, ttl=3600 * 10**9))
    assert not build_plan([bucket], live).has_changes
    everything = spec(
        "Consumer",
        "w",
        "S",
        ack_policy="none",
        lifecycle=Lifecycle(ignore_changes=frozenset({"all"})),
    )
    stream = spec("Stream", "S")
    live = live_of(stream, spec("Consumer", "w", "S", ack_policy="explicit", max_deliver=3))
    assert not build_plan([stream, everything], live).has_changes


def test_an_environments_lifecycle_is_read_with_its_lines(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "reconcile.yaml").write_text(
        "specs: [specs]\nenvironments:\n  prod:\n    embedded: true\n"
        "    lifecycle:\n      prevent_destroy: true\n      ignore_changes: [descripton]\n"
    )
    with pytest.raises(SpecError) as failed:
        load_project(tmp_path / "reconcile.yaml")
    assert "reconcile.yaml:7" in str(failed.value) and "did you mean 'description'" in str(
        failed.value
    )
    (tmp_path / "reconcile.yaml").write_text(
        "specs: [specs]\nenvironments:\n  prod:\n    embedded: true\n"
        "    lifecycle: {prevent_destroy: true, mode: observe}\n"
    )
    found = load_project(tmp_path / "reconcile.yaml").environment("prod").lifecycle
    assert found.prevent_destroy and found.observe
    assert found.protected_at.endswith("reconcile.yaml:5")


def test_a_live_state_without_metadata_records_nothing() -> None:
    assert recorded_protection({}) is None
    assert recorded_protection({"metadata": None}) is None


def test_the_plan_memo_never_answers_for_another_lifecycle() -> None:
    """A resource found unchanged without protection is planned again once protected (an
    update records the protection), whether its spec or its environment protects it."""
    plain = spec("Stream", "ORDERS", subjects=["orders.>"])
    live = live_of(plain)
    memo = Memo(b"one memo for every plan")
    assert not build_plan([plain], live, memo=memo).has_changes
    (step,) = build_plan([replace(plain, lifecycle=PROTECTED)], live, memo=memo).changes
    assert step.action == "update" and step.fields[0].path == f"metadata.{PROTECT_KEY}"
    env = Lifecycle(prevent_destroy=True, protected_at="reconcile.yaml:6")
    assert build_plan([plain], live, memo=memo, lifecycle=env).has_changes
    assert not build_plan(
        [plain], live_of(replace(plain, lifecycle=env)), memo=memo, lifecycle=env
    ).has_changes


def test_reconcile_envs_shows_an_environments_lifecycle(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "reconcile.yaml").write_text(
        "specs: [specs]\nenvironments:\n  prod:\n    embedded: true\n"
        "    lifecycle: {prevent_destroy: true, ignore_changes: all}\n"
    )
    shown = load_project(tmp_path / "reconcile.yaml").environment("prod").describe()
    assert shown["lifecycle"] == {"prevent_destroy": True, "ignore_changes": "all"}


def test_ignored_metadata_keeps_the_tools_own_keys() -> None:
    """Metadata others add is theirs; the managed-by marker and the protection record are
    the tool's, and still planned."""
    ignoring = Lifecycle(ignore_changes=frozenset({"metadata"}))
    declared = spec("Stream", "S", metadata={"team": "a"}, lifecycle=ignoring)
    live = live_of(spec("Stream", "S", metadata={"team": "b", "added": "by hand"}))
    assert not build_plan([declared], live).has_changes
    protected = replace(declared, lifecycle=replace(ignoring, prevent_destroy=True))
    (step,) = build_plan([protected], live).changes
    assert [f.path for f in step.fields] == [f"metadata.{PROTECT_KEY}"]
    assert step.config["metadata"]["added"] == "by hand"
