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

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.errors import PolicyDenied, ReconcileError
from reconciler.identity import ENTRY
from reconciler.model.normalize import desired_config, live_config
from reconciler.model.state import LiveState
from reconciler.planning.findings import PolicyFinding
from reconciler.planning.policy_worker import Job, OverBudget, Worker, WorkerGone, run_budget
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

#: Findings listed under a refusal before "... and N more".
DETAIL_LIMIT = 20
_EMPTY: Mapping[str, Any] = {}


async def evaluate(
    policy: Policy,
    plan: Plan,
    specs: Sequence[Spec],
    live: LiveState,
    *,
    environment: str | None = None,
) -> tuple[PolicyFinding, ...]:
    """Every rule of ``policy`` on every step and unchanged resource of ``plan``
    (``specs``: what was planned; ``live``: what the plan read), in a worker process
    with a budget per evaluation and per run (:mod:`reconciler.planning.policy_worker`).
    The next batch's variables are worked out while the worker evaluates this one."""
    if not policy:
        return ()
    declared = {spec.ref: spec for spec in specs if spec.kind != ENTRY}
    wanted = policy.selected
    work: list[tuple[Entry, list[Rule]]] = []
    for entry in (*plan.changes, *plan.unchanged):
        rules = [rule for rule in policy.rules if rule.applies_to(entry.kind)]
        if rules and entry.kind != ENTRY:
            work.append((entry, rules))

    def batch(first: int) -> list[tuple[Entry, list[Rule], dict[str, Any]]]:
        spec = declared.get
        return [
            (entry, rules, _variables(entry, spec(entry.ref), plan, live, environment, wanted))
            for entry, rules in work[first : first + BATCH]
        ]

    run = _Run(policy, run_budget(sum(len(rules) for _, rules in work)))
    evaluating: asyncio.Future[None] | None = None
    try:
        upcoming = batch(0)
        for first in range(BATCH, len(work) + BATCH, BATCH):
            evaluating = asyncio.ensure_future(run.evaluated(upcoming))
            await asyncio.sleep(0)  # the batch on its way to the worker
            upcoming = batch(first) if first < len(work) else []
            await evaluating
    finally:  # cancelled (the agent stopping) or failed: no worker is left running
        if evaluating is not None and not evaluating.done():
            evaluating.cancel()
            with contextlib.suppress(BaseException):
                await evaluating
        await run.stop()
    return tuple(run.findings)


#: Resources sent to the worker at once.
BATCH = 1000


def _variables(
    entry: Entry,
    spec: Spec | None,
    plan: Plan,
    live: LiveState,
    environment: str | None,
    wanted: Mapping[str, frozenset[str] | None],
) -> dict[str, Any]:
    """The CEL variables of one resource: what the rules read of them."""
    variables: dict[str, Any] = {}
    if wanted["resource"] != frozenset():  # else no rule reads it
        resource = _resource(entry, spec, plan, live, environment or "", wanted)
        variables["resource"] = _plain(_cut(resource, wanted["resource"]))
    if wanted["step"] != frozenset():
        variables["step"] = _cut(_step(entry), wanted["step"])
    return variables


def _plain(value: Any) -> Any:
    """``value`` with every mapping a dict (what pickle carries to the worker as CEL
    reads it)."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


class _Run:
    """One evaluation of a policy: its worker (a new one after a stop), findings and
    budget: the deadline of the run, and the rules stopped so far (with why, said again
    for every resource each is not evaluated on)."""

    def __init__(self, policy: Policy, seconds: float) -> None:
        self.policy = policy
        self.index = {id(rule): n for n, rule in enumerate(policy.rules)}
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.stopped: dict[str, str] = {}
        self.findings: list[PolicyFinding] = []
        self.worker: Worker | None = None
        self.starting: asyncio.Future[None] | None = None
        self._start()  # while the first batch is worked out

    def _start(self) -> None:
        self.worker = Worker([(rule.source_when, rule.expr) for rule in self.policy.rules])
        self.starting = asyncio.ensure_future(self.worker.start())

    async def stop(self) -> None:
        worker, starting, self.worker, self.starting = self.worker, self.starting, None, None
        if starting is not None and not starting.done():
            starting.cancel()
        if worker is not None:
            await worker.stop()

    async def evaluated(self, batch: list[tuple[Entry, list[Rule], dict[str, Any]]]) -> None:
        """One batch's findings added to :attr:`findings`, in the batch's order."""
        items = [(entry, rule, variables) for entry, rules, variables in batch for rule in rules]
        found: list[str | None] = [None] * len(items)
        pending = list(range(len(items)))
        retried = False
        while pending:
            todo = []
            for at in pending:
                rule = items[at][1]
                said = self.stopped.get(rule.id)
                if said is None and time.monotonic() > self.deadline:
                    said = self.stopped[rule.id] = _spent(self.seconds)
                if said is None:
                    todo.append(at)
                found[at] = said
            pending = []
            if not todo:
                break
            if self.worker is None:
                self._start()
            assert self.worker is not None and self.starting is not None
            await asyncio.shield(self.starting)  # a cancel stops the worker in stop()
            jobs = _jobs([items[at] for at in todo], self.index)
            try:
                outcomes = await self.worker.evaluate(jobs, self.deadline)
            except WorkerGone as gone:  # a new one, once
                self.worker = self.starting = None
                if retried:
                    raise ReconcileError(f"policy evaluation failed: {gone}") from None
                retried, pending = True, todo
                continue
            except OverBudget as over:  # the worker is stopped: a new one for the rest
                self.worker = self.starting = None
                stuck = todo[over.index]
                if over.why:  # else the run's budget is spent: said on the next turn
                    found[stuck] = over.why
                    went = f"skipped: the rule went {over.why} on {items[stuck][0].ref.label}"
                    self.stopped[items[stuck][1].id] = went
                pending = [at for at in todo if at != stuck or not over.why]
                continue
            for at, why in zip(todo, outcomes, strict=True):
                found[at] = why
        for (entry, rule, _), why in zip(items, found, strict=True):
            if why is not None:
                self.findings.append(_finding(rule, entry, why))


def _jobs(
    todo: Sequence[tuple[Entry, Rule, dict[str, Any]]], index: Mapping[int, int]
) -> list[Job]:
    """``todo`` as the worker's jobs: one per resource, its rules' indexes in order."""
    jobs: list[Job] = []
    last: dict[str, Any] | None = None
    for _, rule, variables in todo:
        if variables is last:
            jobs[-1] = (variables, (*jobs[-1][1], index[id(rule)]))
        else:
            jobs.append((variables, (index[id(rule)],)))
            last = variables
    return jobs


def _spent(seconds: float) -> str:
    return f"skipped: the policy's time budget for this run ({seconds:.0f} s) was spent"


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
