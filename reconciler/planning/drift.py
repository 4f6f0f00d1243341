"""Drift reports: a plan read the other way round.

A plan says what apply would change on the server to match the specs; a drift report says
where the server has moved away from the specs. Built from a plan computed without prune,
each resource gets one status:

- ``in_sync``   declared and live agree;
- ``drifted``   declared and live differ: each field with its declared and live value
                (``before`` of a plan step is live, ``after`` is declared);
- ``missing``   declared, absent from the server;
- ``unmanaged`` on the server, declared by no spec and not marked as managed;
- ``orphaned``  on the server with this tool's managed marker, but no spec declares it any
                more (``prune`` would delete it);
- ``foreign``   managed by another owner (project): never touched, and not drift.

Coverage is the share of live resources that some spec declares (in sync or drifted, of
everything the server holds but the resources ignore rules hide). The project's ignore rules
(:mod:`reconciler.specs.ignore`) have already left hidden unmanaged resources out of the
plan (``Plan.hidden`` counts them); field rules hide differing fields here, and a drifted
resource whose every difference is hidden is in sync. Each rule's count is in the report.
Values are redacted and shown by ``reconciler.model.values``, like the plan's. No
network, and one reading of this machine's clock: the report's ``generated_at``
(:func:`from_plan`), when it was made; no status depends on it. The report is
JSON-serialisable (``schemas/drift.schema.json``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, cast

from reconciler.identity import KIND_ORDER, Kind, ResourceRef
from reconciler.model.diff import FieldChange, diff_configs
from reconciler.model.timestamps import rfc3339
from reconciler.model.values import display
from reconciler.planning.findings import PolicyFinding
from reconciler.planning.steps import Action, Create, Foreign, Migrate, Observed, Replace
from reconciler.specs.ignore import Hidden, IgnoreRule, IgnoreRules, tally
from reconciler.specs.spec import MANAGED_KEY

if TYPE_CHECKING:
    from reconciler.planning.steps import Entry, Plan

Status = Literal["in_sync", "drifted", "missing", "unmanaged", "orphaned", "foreign"]
STATUSES: tuple[Status, ...] = (
    "in_sync",
    "drifted",
    "missing",
    "unmanaged",
    "orphaned",
    "foreign",
)
#: Statuses that count as drift (exit code 2).
DRIFT_STATUSES: frozenset[Status] = frozenset({"drifted", "missing", "unmanaged", "orphaned"})
#: Statuses of resources the server holds.
LIVE_STATUSES: frozenset[Status] = frozenset(
    {"in_sync", "drifted", "unmanaged", "orphaned", "foreign"}
)
#: plan entry action -> drift status: the plan read the other way round.
STATUS_OF_ACTION: Mapping[Action, Status] = {
    Action.UNCHANGED: "in_sync",
    Action.UPDATE: "drifted",
    Action.REPLACE: "drifted",
    Action.MIGRATE: "drifted",  # with --migrate, or an interrupted migration on the server
    Action.CREATE: "missing",
    Action.UNMANAGED: "unmanaged",
    Action.ORPHAN: "orphaned",
    Action.DELETE: "orphaned",  # a plan made with prune
    Action.FOREIGN: "foreign",  # managed by another owner: theirs, not drift
    Action.OBSERVED: "drifted",  # lifecycle mode observe; missing when not on the server
}
FORMAT_VERSION = 1


@dataclass(frozen=True)
class ResourceDrift:
    """The drift status of one resource (a stream, consumer or bucket)."""

    kind: str
    name: str
    status: Status
    stream: str | None = None
    source: str | None = None  # "FILE:LINE" of the declaring document
    fields: tuple[FieldChange, ...] = ()  # before: live, after: declared
    reasons: tuple[str, ...] = ()  # why a change could not be applied in place
    owner: str | None = None  # foreign resources: the owner that manages them
    #: Durations and sizes as the spec wrote them, by config path (display only).
    written: Mapping[str, str] = field(default_factory=dict, compare=False)

    def shown(self, change: FieldChange) -> tuple[str, str]:
        """``(declared, live)`` of a drifted field as people read it (values.display), in
        the unit the spec wrote."""
        written = self.written.get(change.path)
        declared = display(change.declared, path=change.path, kind=self.kind, written=written)
        return declared, display(change.live, path=change.path, kind=self.kind, written=written)

    @property
    def ref(self) -> ResourceRef:
        return ResourceRef(cast(Kind, self.kind), self.name, self.stream)

    @property
    def key(self) -> tuple[int, str, str]:
        return self.ref.sort_key

    @property
    def label(self) -> str:
        """``NAME`` or, for consumers, ``STREAM/NAME``."""
        return self.ref.path

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "stream": self.stream,
            "status": self.status,
            "source": self.source,
            "fields": [f.to_drift_json() for f in self.fields],
            "reasons": list(self.reasons),
            "owner": self.owner,
        }


@dataclass(frozen=True)
class DriftSummary:
    """Counts per status, per kind and per drifted field, and the coverage."""

    counts: Mapping[Status, int]
    by_kind: Mapping[str, Mapping[Status, int]]
    by_field: Mapping[str, int]
    declared: int
    live: int
    coverage: float | None  # declared-and-live / live; None when the server holds nothing

    @property
    def drift(self) -> int:
        return sum(self.counts[s] for s in DRIFT_STATUSES)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "drift" if self.drift else "in_sync",
            "resources": sum(self.counts.values()),
            **{status: self.counts[status] for status in STATUSES},
            "drift": self.drift,
            "declared": self.declared,
            "live": self.live,
            "coverage": self.coverage,
            "by_kind": {kind: dict(counts) for kind, counts in self.by_kind.items()},
            "by_field": dict(self.by_field),
        }


def summarize(resources: Iterable[ResourceDrift]) -> DriftSummary:
    items = list(resources)
    counts = Counter(r.status for r in items)
    kinds = sorted({r.kind for r in items}, key=lambda k: (KIND_ORDER.get(k, 9), k))
    by_kind = {
        kind: {s: sum(1 for r in items if r.kind == kind and r.status == s) for s in STATUSES}
        for kind in kinds
    }
    fields = Counter(f.path for r in items if r.status == "drifted" for f in r.fields)
    live = sum(counts[s] for s in LIVE_STATUSES)
    present = counts["in_sync"] + counts["drifted"]
    return DriftSummary(
        counts={s: counts[s] for s in STATUSES},
        by_kind=by_kind,
        by_field=dict(sorted(fields.items(), key=lambda kv: (-kv[1], kv[0]))),
        declared=present + counts["missing"],
        live=live,
        coverage=round(present / live, 4) if live else None,
    )


@dataclass(frozen=True)
class DriftReport:
    """Every resource's drift status, sorted by kind, stream and name."""

    resources: tuple[ResourceDrift, ...]
    server_version: str | None = None
    server_address: str | None = None  # credentials already removed
    generated_at: str | None = None  # RFC 3339, UTC
    #: What each ignore rule hid: unmanaged resources, or drifted resources' fields.
    hidden: tuple[Hidden, ...] = ()
    #: What the policy rules found on the plan read as this report (docs/policy.md).
    policy: tuple[PolicyFinding, ...] = ()
    summary: DriftSummary = field(init=False)

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.resources, key=lambda r: r.key))
        object.__setattr__(self, "resources", ordered)
        object.__setattr__(self, "summary", summarize(ordered))

    @property
    def has_drift(self) -> bool:
        return self.summary.drift > 0

    def with_status(self, *statuses: Status) -> list[ResourceDrift]:
        return [r for r in self.resources if r.status in statuses]

    def _server_json(self) -> dict[str, str] | None:
        if not self.server_version:
            return None
        found = {"version": self.server_version}
        return found | ({"address": self.server_address} if self.server_address else {})

    def to_json(self) -> dict[str, Any]:
        """The report as ``schemas/drift.schema.json`` documents it."""
        return {
            "format_version": FORMAT_VERSION,
            "generated_at": self.generated_at,
            "server": self._server_json(),
            "summary": self.summary.to_json(),
            "resources": [r.to_json() for r in self.resources],
            "hidden": [h.to_json() for h in self.hidden],
            "policy": [finding.to_json() for finding in self.policy],
        }


def _now() -> str:
    """This machine's time, for ``generated_at`` only."""
    return rfc3339(datetime.now(UTC))


def resource_from_entry(entry: Entry) -> ResourceDrift:
    """One plan entry as a drift entry: ``before`` (live) and ``after`` (declared) swap roles.

    A consumer the plan creates again because its stream is replaced is live: it is
    judged on its own fields (drifted or in sync), not reported missing. Reasons are
    given only where the drift cannot be undone in place (a replace, or a consumer going
    with its replaced stream); adopting an unmarked resource is an ordinary update.
    """
    status = STATUS_OF_ACTION[entry.action]
    fields: tuple[FieldChange, ...] = ()
    if isinstance(entry, Create) and entry.live is not None:
        fields = tuple(diff_configs(entry.config, entry.live))
        status = "drifted" if fields else "in_sync"
    elif isinstance(entry, Observed) and entry.missing:
        status = "missing"
    elif status == "drifted":
        fields = entry.fields
    undoable = isinstance(entry, Replace | Migrate | Observed) or (
        isinstance(entry, Create) and entry.live is not None
    )
    return ResourceDrift(
        kind=entry.kind,
        name=entry.name,
        status=status,
        stream=entry.stream,
        source=str(entry.source) if entry.source and status != "orphaned" else None,
        fields=fields,
        reasons=tuple(entry.reasons) if undoable and status == "drifted" else (),
        owner=entry.owner if isinstance(entry, Foreign) else None,
        written=entry.written,
    )


def from_plan(plan: Plan) -> DriftReport:
    """The drift report of a plan (made without prune: orphans are notes, not deletes),
    less the fields its ignore rules hide (``plan.ignore``)."""
    found: Counter[IgnoreRule] = Counter()
    resources = tuple(
        hide_fields(resource_from_entry(e), plan.ignore, found, keep=unhidable(e))
        for e in plan.entries
    )
    return DriftReport(
        resources=resources,
        server_version=plan.server.version,
        server_address=plan.server.address,
        generated_at=_now(),
        hidden=(*plan.hidden, *tally(found, fields=True)),
        policy=plan.policy,
    )


#: The tool's own metadata (the managed-by marker, the owner, the prevent_destroy record,
#: migration records): no field rule hides a difference there (``metadata.*`` hid that
#: someone had stripped a protected stream's record).
TOOL_METADATA = "metadata." + MANAGED_KEY.rpartition("/")[0] + "/"


def unhidable(entry: Entry) -> frozenset[str]:
    """The top-level fields no field rule hides in ``entry``'s drift: those an update
    cannot change (a replace's or a migration's), whose difference only a replace or a
    migration undoes (an app made a declared file stream again in memory)."""
    if isinstance(entry, Replace | Migrate):
        return frozenset(reason.field for reason in entry.because)
    return frozenset()


def _ours(path: str) -> bool:
    return path.startswith(TOOL_METADATA)


def hide_fields(
    resource: ResourceDrift,
    rules: IgnoreRules,
    found: Counter[IgnoreRule],
    *,
    keep: frozenset[str] = frozenset(),
) -> ResourceDrift:
    """``resource`` without the differing fields a field rule hides (counted per rule in
    ``found``), but those whose top-level field is in ``keep`` (:func:`unhidable`) and
    the tool's own metadata (:data:`TOOL_METADATA`); in sync when none is left. Only
    what drift shows: the plan still has them."""
    if resource.status != "drifted" or not rules:
        return resource
    kept, hit = [], set()
    for change in resource.fields:
        rule = rules.hiding_field(resource.kind, resource.name, resource.stream, change.path)
        if rule is None or change.path.split(".")[0] in keep or _ours(change.path):
            kept.append(change)
        else:
            hit.add(rule)
    if not hit:
        return resource
    found.update(hit)
    if kept:
        return replace(resource, fields=tuple(kept))
    return replace(resource, status="in_sync", fields=(), reasons=())
