"""A resource's ``lifecycle`` applied to the plan (docs/spec-format.md#lifecycle): the
planner's part of the lifecycle rules (the settings themselves, their merge and their
metadata record: :mod:`reconciler.specs.lifecycle`).

- an environment's lifecycle merged into every spec's (:func:`governed`);
- ``ignore_changes``: the ignored fields taken as the live config holds them
  (:func:`ignoring`), the protection recorded at another line taken as it is
  (:func:`settled`), the memo keyed by it (:func:`salt`);
- ``mode: observe``: a step becomes an ``Observed`` note (:func:`observed`);
- ``prevent_destroy`` (the spec's, the environment's, or the record on the live
  config): every step that destroys the resource, or a consumer an interest stream
  keeps messages for (:func:`holding`), is marked ``prevented`` with why
  (:func:`prevented`, :func:`protection`); orphans say ``--prune`` will not delete them;
  KeyValue entries follow their bucket's (:func:`governed_entries`).

Pure; :func:`governed_part` is what ``planning.plan.plan_stream`` applies to each stream.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace

from reconciler.identity import stream_of
from reconciler.model.buckets import bucket_config
from reconciler.model.diff import diff_configs
from reconciler.model.state import LiveState
from reconciler.planning.groups import LiveConfig, StreamGroup, StreamPlan, identity, migrate_hint
from reconciler.planning.steps import (
    Create,
    Delete,
    Migrate,
    Observed,
    Orphan,
    PlanEntry,
    Replace,
    Step,
    Update,
    destroys,
    recorded_reason,
)
from reconciler.specs.lifecycle import MANAGE, PROTECT_KEY, Lifecycle, recorded_protection
from reconciler.specs.spec import Spec

__all__ = [
    "INTEREST_FIELDS",
    "governed",
    "governed_entries",
    "governed_orphan",
    "governed_part",
    "holding",
    "ignores",
    "ignoring",
    "observe_reason",
    "observed",
    "prevented",
    "protected_orphan",
    "protection",
    "salt",
    "settled",
    "with_lifecycle",
]


def governed(specs: Sequence[Spec], lifecycle: Lifecycle) -> list[Spec]:
    """``specs`` with an environment's ``lifecycle`` merged into each one's (safety
    wins: :meth:`Lifecycle.merged`); a spec that already has it is kept as it is (the
    plan memo digests each spec object once)."""
    merged: dict[Lifecycle, Lifecycle] = {}

    def one(spec: Spec) -> Spec:
        own = spec.lifecycle
        if own not in merged:
            merged[own] = own.merged(lifecycle)
        return spec if merged[own] == own else spec.with_lifecycle(merged[own])

    return [one(spec) for spec in specs]


def with_lifecycle(group: StreamGroup, lifecycle: Lifecycle) -> StreamGroup:
    """``group`` with the environment's ``lifecycle`` merged into each spec's."""
    before = [*((group.declared,) if group.declared else ()), *group.consumers]
    specs = governed(before, lifecycle)
    if all(new is old for new, old in zip(specs, before, strict=True)):
        return group  # merged already (run.plan_with merges once, before the memo)
    declared = specs.pop(0) if group.declared is not None else None
    return replace(group, declared=declared, consumers=tuple(specs))


def ignores(group: StreamGroup) -> bool:
    """Whether a spec of ``group`` has ``ignore_changes``."""
    specs = (*((group.declared,) if group.declared else ()), *group.consumers)
    return any(spec.lifecycle.ignore_changes for spec in specs)


def salt(spec: Spec) -> bytes:
    """What a spec's lifecycle adds to its memo key (its desired metadata records the
    protection, and where): nothing for the default."""
    return b"" if spec.lifecycle.is_default else _lifecycle_salt(spec.lifecycle)


@functools.lru_cache(maxsize=256)
def _lifecycle_salt(lifecycle: Lifecycle) -> bytes:
    return b"P" + repr(sorted(lifecycle.to_json().items())).encode()


#: Fields that name a resource: taken from the spec even under ``ignore_changes: all``.
_NAMING_FIELDS = frozenset({"name", "durable_name"})


def ignoring(spec: Spec, raw: LiveConfig) -> Spec:
    """``spec`` with its ``ignore_changes`` fields as the live config ``raw`` holds them
    (absent when it has none), so they never differ and an update sends them back as
    they are; defaults derived from them follow the live values too. The tool's own
    metadata keys (owner, protection) are added again by ``desired_config``."""
    lifecycle = spec.lifecycle
    if not lifecycle.ignore_changes:
        return spec
    live = bucket_config(spec.kind, spec.name, raw) if spec.ref.is_bucket else raw
    if lifecycle.ignores_all:
        config = {k: v for k, v in live.items() if k not in _NAMING_FIELDS}
    else:
        ignored = lifecycle.ignore_changes
        config = {k: v for k, v in spec.config.items() if k not in ignored}
        config.update((k, live[k]) for k in ignored if k in live)
    for key in _NAMING_FIELDS & set(spec.config):
        config[key] = spec.config[key]
    return replace(spec, config=config)


def settled(desired: LiveConfig, current: LiveConfig) -> LiveConfig:
    """``desired`` with the protection the server records at another line taken as it
    is there: the same protection (no update each time a spec file's lines move)."""
    mine = desired.get("metadata") or {}
    theirs = current.get("metadata") or {}
    if PROTECT_KEY in mine and PROTECT_KEY in theirs and mine[PROTECT_KEY] != theirs[PROTECT_KEY]:
        return {**desired, "metadata": {**mine, PROTECT_KEY: theirs[PROTECT_KEY]}}
    return desired


def observe_reason(lifecycle: Lifecycle, *, missing: bool) -> str:
    """What the plan says of a resource in ``mode: observe`` that differs."""
    said = f"lifecycle mode observe ({lifecycle.observed_at}): never written"
    return said + ("; not on the server: not created" if missing else "; differences are drift")


def observed(entry: PlanEntry, spec: Spec, why: str = "") -> PlanEntry:
    """A step for an observed resource as a note saying how it differs (``why``: the
    reason, by default :func:`observe_reason`); notes stay as they are."""
    if not isinstance(entry, Create | Update | Replace | Migrate):
        return entry
    missing = isinstance(entry, Create) and entry.live is None
    fields = entry.fields
    if isinstance(entry, Create) and entry.live is not None:  # its stream is replaced
        fields = tuple(diff_configs(entry.config, entry.live))
    return Observed(
        **identity(spec),
        fields=fields,
        reasons=(why or observe_reason(spec.lifecycle, missing=missing),),
        missing=missing,
    )


def governed_part(out: StreamPlan, group: StreamGroup, lifecycle: Lifecycle) -> StreamPlan:
    """``out`` with the lifecycles of ``group`` applied: observed consumers' steps become
    notes, and every step that :func:`destroys` a protected resource is marked
    ``prevented`` (the executor refuses the whole plan), saying why."""
    consumers = {spec.name: spec for spec in group.consumers}
    declared = group.declared
    stream_missing = declared is not None and declared.lifecycle.observe and group.live is None
    steps: list[Step] = []
    for step in out.steps:
        spec = consumers.get(step.name) if step.kind == "Consumer" else declared
        if spec is not None and step.kind == "Consumer" and spec.lifecycle.observe:
            out.add(observed(step, spec))
        elif spec is not None and step.kind == "Consumer" and stream_missing:
            why = f"stream {group.name} is observed and not on the server: not created"
            out.add(observed(step, spec, why))
        else:
            steps.append(prevented(step, protection(step, spec, group, lifecycle)))
    out.steps = steps
    out.orphans = [governed_orphan(o, group, lifecycle) for o in out.orphans]
    return out


def prevented(step: Step, why: str) -> Step:
    """``step`` marked as no flag allows it (``why``); a replace no longer says that
    ``--migrate`` would keep its messages (a migration is prevented too)."""
    if not why:
        return step
    hint = migrate_hint()  # as the planner said it: the same door's words
    reasons = tuple(r for r in step.reasons if r != hint)
    return replace(step, prevented=why, reasons=(*reasons, why))


def protection(step: Step, spec: Spec | None, group: StreamGroup, lifecycle: Lifecycle) -> str:
    """Why ``step`` may not destroy its resource (empty: it may): its lifecycle (the
    spec's merged with the environment's), the environment's for an undeclared
    resource, the protection its live config records, or, for a stream, a protected or
    observed consumer that would go with it; for a consumer, the messages its protected
    or observed stream keeps for it (:func:`holding`)."""
    own = lifecycle if spec is None else spec.lifecycle
    if step.ref.is_child:
        stream = lifecycle if group.declared is None else group.declared.lifecycle
        if held := holding(step, group.live, stream) or _expiring(step, own):
            return held
    if not destroys(step):
        return ""
    if own.prevent_destroy:
        return f"prevented by lifecycle prevent_destroy ({own.protected_at}); no flag allows this"
    at = recorded_protection(step.live)
    if at is not None:
        return recorded_reason(at)
    if step.ref.is_child:
        return ""
    for consumer in group.consumers:
        if consumer.lifecycle.prevent_destroy or consumer.lifecycle.observe:
            setting = "prevent_destroy" if consumer.lifecycle.prevent_destroy else "mode observe"
            return (
                f"prevented: its consumer {consumer.name} has lifecycle {setting} and would "
                "go with it; no flag allows this"
            )
    for name, raw in sorted(group.live_consumers.items()):
        at = recorded_protection(raw)
        if at is not None:
            return f"prevented: its consumer {name} would go with it; {recorded_reason(at)}"
    return ""


def _expiring(step: Step, own: Lifecycle) -> str:
    """Why a protected consumer may not be written with an ``inactive_threshold``
    (empty: it may): the server deletes a consumer left without a client that long."""
    if not own.prevent_destroy or step.kind != "Consumer":
        return ""
    if not isinstance(step, Create | Update | Replace) or not step.config.get("inactive_threshold"):
        return ""
    return (
        f"prevented by lifecycle prevent_destroy ({own.protected_at}): with inactive_threshold "
        "the server deletes this consumer when no client uses it that long; no flag allows this"
    )


#: Consumer fields whose update changes which messages an interest stream keeps for it.
INTEREST_FIELDS = frozenset({"filter_subject", "filter_subjects"})


def holding(step: Step, stream: LiveConfig | None, lifecycle: Lifecycle = MANAGE) -> str:
    """Why ``step`` may not delete, replace or narrow a consumer (empty: it may): its
    stream (``stream``: the live config; ``lifecycle``: its declared one, if known) is
    protected or observed, and keeps a message only while a consumer still needs it
    (retention ``interest``), so the consumer's delete deletes the messages only it
    still needed (measured: 10 messages acknowledged by one consumer, gone with the
    other), and so does an update of its filter (:data:`INTEREST_FIELDS`). Pulumi's
    destroy asks it too (its delete step is made without the planner)."""
    narrows = isinstance(step, Update) and any(
        change.path.split(".")[0] in INTEREST_FIELDS for change in step.fields
    )
    if (
        step.kind != "Consumer"
        or not (destroys(step) or narrows)
        or (stream or {}).get("retention") != "interest"
    ):
        return ""
    at = recorded_protection(stream)
    held = (
        f"prevented: stream {step.stream} keeps a message only while a consumer needs it "
        f"(retention interest): this would delete the messages only {step.name} still needs"
    )
    if lifecycle.prevent_destroy:
        protected = f"lifecycle prevent_destroy ({lifecycle.protected_at})"
        return f"{held}; the stream has {protected}; no flag allows this"
    if lifecycle.observe:  # deleting its messages would write the observed stream
        watched = f"lifecycle mode observe ({lifecycle.observed_at}): never written"
        return f"{held}; the stream has {watched}; no flag allows this"
    return "" if at is None else f"{held}; the stream: {recorded_reason(at)}"


def governed_orphan(orphan: Orphan, group: StreamGroup, lifecycle: Lifecycle) -> Orphan:
    """An orphan that is protected says so: --prune will not delete it (the reason its
    delete would be prevented for: :func:`protection`)."""
    if lifecycle.prevent_destroy:
        why = f"prevented by the environment's lifecycle prevent_destroy ({lifecycle.protected_at})"
    else:
        why = protection(Delete(ref=orphan.ref, live=orphan.live), None, group, lifecycle)
    return protected_orphan(orphan, why)


def protected_orphan(orphan: Orphan, why: str) -> Orphan:
    """``orphan`` marked as --prune will not delete it (``why``: the reason its delete
    would be prevented for; empty: it is not protected). The renderers list it apart
    from what --prune deletes (``Orphan.prevented``)."""
    if not why:
        return orphan
    said = f"--prune will not delete it: {why}"
    return replace(orphan, prevented=why, reasons=(*orphan.reasons, said))


def governed_entries(
    part: StreamPlan, lifecycle: Lifecycle, specs: Sequence[Spec], live: LiveState
) -> StreamPlan:
    """``part`` (the KeyValue entries') with their buckets' lifecycles applied: an entry
    follows its bucket's (the spec's, merged with the environment's ``lifecycle`` by
    :func:`governed`; the environment's for a bucket declared elsewhere). An observed
    bucket's entries get no step (notes); a protected bucket's entries (its lifecycle,
    or the protection its stream records on the server) are never pruned: the delete is
    ``prevented``, the orphan says ``--prune`` will not delete it. Declared values are
    still written in a protected bucket (compare-and-set, as any update)."""
    buckets = {spec.name: spec.lifecycle for spec in specs if spec.kind == "KeyValue"}
    out = replace(part, steps=[], orphans=[], observed=list(part.observed))
    for step in part.steps:
        own = buckets.get(str(step.stream), lifecycle)
        if own.observe:
            missing = isinstance(step, Create)
            why = observe_reason(own, missing=missing)
            note = Observed(ref=step.ref, source=step.source, fields=step.fields, reasons=(why,))
            out.add(replace(note, missing=missing))
        else:
            why = _entry_protection(str(step.stream), own, live) if destroys(step) else ""
            out.add(prevented(step, why))
    for orphan in part.orphans:
        bucket = str(orphan.stream)
        why = _entry_protection(bucket, buckets.get(bucket, lifecycle), live)
        out.orphans.append(protected_orphan(orphan, why))
    return out


def _entry_protection(bucket: str, own: Lifecycle, live: LiveState) -> str:
    """Why an entry of ``bucket`` may not be deleted (empty: it may): the bucket's
    lifecycle (``own``), or the protection its stream records on the server."""
    if own.prevent_destroy:
        return (
            f"prevented by lifecycle prevent_destroy of bucket {bucket} ({own.protected_at}); "
            "no flag allows this"
        )
    at = recorded_protection(live.streams.get(stream_of("KeyValue", bucket)))
    return "" if at is None else f"bucket {bucket}: {recorded_reason(at)}"
