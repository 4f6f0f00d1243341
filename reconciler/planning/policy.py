"""Policy rules evaluated on a plan: every planned resource and its step, one finding
per rule that does not hold (docs/policy.md).

What a rule sees (the variables, in CEL):

- ``resource``: ``kind``, ``name``, ``stream`` (the JetStream stream the resource is or
  lives in: a stream's own name, a consumer's stream, ``KV_<name>`` for a KeyValue
  bucket), ``environment`` (the project environment, ``""`` without one), ``owner``,
  ``source`` (``FILE:LINE`` of the spec, ``""`` for a delete), ``desired`` and ``live``
  (complete wire configs: server defaults filled in, durations in nanoseconds, sizes in
  bytes; a bucket as its stream; ``{}`` when there is none: ``desired`` of a delete,
  ``live`` of a create; for an unchanged resource both are its live config, what the
  server keeps, ``ignore_changes`` fields included), ``declared`` (the fields the spec
  file writes, wire units, the kind's own names: a bucket's ``history``; ``{}`` for a
  delete).
- ``step``: ``action`` (create, update, replace, migrate, delete, unchanged),
  ``destructive``, ``loss_messages`` (at least this many messages are deleted: 0 when
  none), ``loss_unknown`` (a loss whose size cannot be computed, ``Loss.floor``
  included: a tighter max_bytes counts 1 message), ``fields`` (the changed field
  paths).

Evaluated: the plan's steps and its unchanged resources. Not evaluated: KeyValue
entries (values, some secret, not configuration), and the notes that are never
changed (unmanaged, other owners', orphans without ``--prune``, observed).

A rule holds when ``expr`` is ``true``. ``false`` is a finding at the rule's level; an
expression that cannot be evaluated for a resource (a key it does not have: guard with
``has()``; a value of the wrong type) or gives something else than ``true``/``false``
is a finding too, at the rule's level, saying why: never a crash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from reconciler.errors import PolicyDenied, brief
from reconciler.identity import ENTRY
from reconciler.model.normalize import desired_config, live_config
from reconciler.model.state import LiveState
from reconciler.planning.findings import PolicyFinding
from reconciler.planning.steps import (
    Create,
    Delete,
    Entry,
    Migrate,
    Plan,
    Replace,
    Unchanged,
    Update,
)
from reconciler.specs.policy import Policy, Rule
from reconciler.specs.spec import Spec

if TYPE_CHECKING:
    import cel

#: Findings listed under a refusal before "... and N more".
DETAIL_LIMIT = 20
_EMPTY: Mapping[str, Any] = {}


def evaluate(
    policy: Policy,
    plan: Plan,
    specs: Sequence[Spec],
    live: LiveState,
    *,
    environment: str | None = None,
) -> tuple[PolicyFinding, ...]:
    """Every rule of ``policy`` on every step and unchanged resource of ``plan``
    (``specs``: what was planned; ``live``: what the plan read)."""
    if not policy:
        return ()
    import cel

    declared = {spec.ref: spec for spec in specs if spec.kind != ENTRY}
    wanted = policy.selected
    findings: list[PolicyFinding] = []
    for entry in (*plan.changes, *plan.unchanged):
        if entry.kind == ENTRY:
            continue
        rules = [rule for rule in policy.rules if rule.applies_to(entry.kind)]
        if not rules:
            continue
        spec = declared.get(entry.ref)
        variables = {}
        if wanted["resource"] != frozenset():  # else no rule reads it
            resource = _resource(entry, spec, plan, live, environment or "", wanted)
            variables["resource"] = _cut(resource, wanted["resource"])
        if wanted["step"] != frozenset():
            variables["step"] = _cut(_step(entry), wanted["step"])
        failed = ""
        try:
            context: cel.Context | None = cel.Context(variables)
        except Exception as err:  # a value CEL cannot hold (an integer over 64 bits)
            context, failed = None, _why(err)
        for rule in rules:
            why = failed if context is None else _failed(rule, context)
            if why is not None:
                findings.append(_finding(rule, entry, why))
    return tuple(findings)


def _resource(
    entry: Entry,
    spec: Spec | None,
    plan: Plan,
    live: LiveState,
    environment: str,
    wanted: Mapping[str, frozenset[str] | None],
) -> dict[str, Any]:
    """The ``resource`` variable; of its configs only the keys the rules select
    (``wanted``: :attr:`Policy.selected`; None: the whole map)."""
    if wanted["desired"] == frozenset() and wanted["live"] == frozenset():
        desired: Mapping[str, Any] = _EMPTY  # no rule reads them: not worked out
        current: Mapping[str, Any] = _EMPTY
    else:
        desired, current = _configs(entry, spec, plan, live)
    return {
        "kind": entry.kind,
        "name": entry.name,
        "stream": entry.stream_name,
        "environment": environment,
        "owner": plan.owner,
        "source": str(entry.source) if entry.source else "",
        "desired": _cut(desired, wanted["desired"]),
        "live": _cut(current, wanted["live"]),
        "declared": _cut(spec.config if spec is not None else _EMPTY, wanted["declared"]),
    }


def _cut(config: Mapping[str, Any], keys: frozenset[str] | None) -> Mapping[str, Any]:
    """``config`` with only ``keys`` (those it has); all of it when ``keys`` is None."""
    if keys is None:
        return config
    return {key: config[key] for key in keys if key in config}


def _configs(
    entry: Entry, spec: Spec | None, plan: Plan, live: LiveState
) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(desired, live) wire configs of an entry; ``{}`` where there is none."""
    if isinstance(entry, Unchanged):
        config = _kept(entry, spec, plan, live)
        return config, config
    if isinstance(entry, Delete):
        return _EMPTY, entry.live
    if isinstance(entry, Create):
        return entry.config, entry.live or _EMPTY
    if isinstance(entry, Update | Replace | Migrate):
        return entry.config, entry.live or _EMPTY
    return _EMPTY, _EMPTY


def _kept(entry: Unchanged, spec: Spec | None, plan: Plan, live: LiveState) -> Mapping[str, Any]:
    """What an unchanged resource keeps: its live config, canonical. Not the spec's:
    a field under lifecycle ``ignore_changes`` keeps its live value whatever the spec
    says, and the rule judges what the server will hold."""
    stream = live.streams.get(entry.stream_name)
    raw = live.consumers.get((entry.stream_name, entry.name)) if entry.ref.is_child else stream
    if raw is not None:
        inherits = stream if entry.ref.is_child else None
        return live_config(entry.kind, raw, live.server, stream_config=inherits)
    if spec is None:
        return _EMPTY
    return desired_config(spec, live.server, stream_config=stream, owner=plan.owner)


def _step(entry: Entry) -> dict[str, Any]:
    counted = [loss.messages for loss in entry.losses]
    return {
        "action": str(entry.action),
        "destructive": entry.destructive,
        "loss_messages": sum(n for n in counted if n is not None),
        "loss_unknown": any(loss.messages is None or loss.floor for loss in entry.losses),
        "fields": [change.path for change in entry.fields],
    }


def _failed(rule: Rule, context: cel.Context) -> str | None:
    """None when ``rule`` holds (or does not apply: ``when`` false); ``""`` when it is
    false; why, when it cannot be evaluated."""
    try:
        if rule.condition is not None:
            applies = rule.condition.execute(context)
            if applies is not True:
                return None if applies is False else f"when gave {brief(applies)}, not a bool"
        result = rule.program.execute(context)
    except Exception as err:  # the CEL library's evaluation errors (KeyError, TypeError...)
        return _why(err)
    if result is True:
        return None
    return "" if result is False else f"the expression gave {brief(result)}, not a bool"


def _why(err: Exception) -> str:
    if isinstance(err, KeyError):
        return f"no such key: {err}"
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _finding(rule: Rule, entry: Entry, error: str) -> PolicyFinding:
    return PolicyFinding(
        rule=rule.id,
        level=rule.level,
        message=rule.message,
        ref=entry.ref,
        action=str(entry.action),
        rule_source=str(rule.where),
        error=error,
    )


def refusal(findings: Sequence[PolicyFinding], *, applying: bool = True) -> PolicyDenied | None:
    """The error a plan with ``deny`` findings is refused with (``applying``: by apply,
    nothing changed; else: by plan or drift), naming the rules; None when nothing denies."""
    denied = [finding for finding in findings if finding.denies]
    if not denied:
        return None
    rules = ", ".join(sorted({f.rule for f in denied}))
    what = f"policy rule(s) {rules} deny this plan ({len(denied)} finding(s))"
    headline = f"refusing to apply: {what}; nothing was changed." if applying else f"{what}."
    details = [f.line for f in denied[:DETAIL_LIMIT]]
    if len(denied) > DETAIL_LIMIT:
        details.append(f"... and {len(denied) - DETAIL_LIMIT} more")
    return PolicyDenied(headline, details=details)


def check_policy(findings: Sequence[PolicyFinding], *, applying: bool = True) -> None:
    """Raise :class:`PolicyDenied` when a plan's ``findings`` (``Plan.policy``) hold a
    ``deny`` one."""
    denied = refusal(findings, applying=applying)
    if denied is not None:
        raise denied
