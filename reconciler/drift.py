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
                more (``prune`` would delete it).

Coverage is the share of live resources that some spec declares. Values whose field name
looks like a secret (password, token, seed, ...) are replaced by ``"<redacted>"``. Pure: no
clock, no network; the report is JSON-serialisable (``schemas/drift.schema.json``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from reconciler.fields import UNIT_FIELDS, Unit
from reconciler.units import format_duration, format_size

if TYPE_CHECKING:
    from reconciler.plan import Entry, Plan

Status = Literal["in_sync", "drifted", "missing", "unmanaged", "orphaned"]
STATUSES: tuple[Status, ...] = ("in_sync", "drifted", "missing", "unmanaged", "orphaned")
#: Statuses that count as drift (exit code 2).
DRIFT_STATUSES: frozenset[Status] = frozenset({"drifted", "missing", "unmanaged", "orphaned"})
#: Statuses of resources the server holds.
LIVE_STATUSES: frozenset[Status] = frozenset({"in_sync", "drifted", "unmanaged", "orphaned"})
#: plan entry action -> drift status: the plan read the other way round.
STATUS_OF_ACTION: Mapping[str, Status] = {
    "unchanged": "in_sync",
    "update": "drifted",
    "replace": "drifted",
    "create": "missing",
    "unmanaged": "unmanaged",
    "orphan": "orphaned",
    "delete": "orphaned",  # a plan made with prune
}
KIND_ORDER = {"Stream": 0, "KeyValue": 1, "ObjectStore": 2, "Consumer": 3}

FORMAT_VERSION = 1
REDACTED = "<redacted>"
_SECRET_NAME = re.compile(r"pass(word)?|secret|token|seed|creds?|jwt|nkey|private", re.I)


def redact(value: Any, *, path: str = "") -> Any:
    """``value`` with anything stored under a secret-looking key replaced by a marker."""
    last = path.rpartition(".")[2]
    if last and _SECRET_NAME.search(last):
        return REDACTED if value is not None else None
    if isinstance(value, Mapping):
        return {str(k): redact(v, path=str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


def unit_of(kind: str, path: str) -> Unit | None:
    """Whether the field at ``path`` of a ``kind`` holds a duration or a size."""
    parts = path.split(".")
    tables = [UNIT_FIELDS.get(kind, {}), UNIT_FIELDS["Stream"]]  # buckets diff as streams
    for table in tables:
        for pattern, unit in table.items():
            wanted = pattern.split(".")
            if len(wanted) == len(parts) and all(
                w == p or (w == "*" and p.isdigit()) for w, p in zip(wanted, parts, strict=True)
            ):
                return unit
    return None


def display(value: Any, *, path: str = "", kind: str = "", limit: int = 120) -> str:
    """A value as one short line for text, Markdown and HTML (human units, secrets redacted)."""
    if value is None:
        return "(absent)"
    shown = redact(value, path=path)
    unit = unit_of(kind, path) if kind else None
    if unit and isinstance(shown, int) and not isinstance(shown, bool) and shown > 0:
        return format_duration(shown) if unit == "duration" else format_size(shown)
    text = shown if isinstance(shown, str) and shown else json.dumps(shown, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class FieldDrift:
    """One field where the server differs from the spec."""

    path: str
    declared: Any
    live: Any

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "declared": redact(self.declared, path=self.path),
            "live": redact(self.live, path=self.path),
        }


@dataclass(frozen=True)
class ResourceDrift:
    """The drift status of one resource (a stream, consumer or bucket)."""

    kind: str
    name: str
    status: Status
    stream: str | None = None
    source: str | None = None  # "FILE:LINE" of the declaring document
    fields: tuple[FieldDrift, ...] = ()
    reasons: tuple[str, ...] = ()  # why a change could not be applied in place

    @property
    def key(self) -> tuple[int, str, str, str]:
        return (KIND_ORDER.get(self.kind, 9), self.kind, self.stream or "", self.name)

    @property
    def label(self) -> str:
        """``NAME`` or, for consumers, ``STREAM/NAME``."""
        return f"{self.stream}/{self.name}" if self.stream else self.name

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "stream": self.stream,
            "status": self.status,
            "source": self.source,
            "fields": [f.to_json() for f in self.fields],
            "reasons": list(self.reasons),
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

    def to_json(self) -> dict[str, Any]:
        """The report as ``schemas/drift.schema.json`` documents it."""
        return {
            "format_version": FORMAT_VERSION,
            "server": {"version": self.server_version} if self.server_version else None,
            "summary": self.summary.to_json(),
            "resources": [r.to_json() for r in self.resources],
        }


def resource_from_entry(entry: Entry) -> ResourceDrift:
    """One plan entry as a drift entry: ``before`` (live) and ``after`` (declared) swap roles."""
    status = STATUS_OF_ACTION[entry.action]
    fields: tuple[FieldDrift, ...] = ()
    if status == "drifted":
        fields = tuple(FieldDrift(c.path, declared=c.after, live=c.before) for c in entry.fields)
    return ResourceDrift(
        kind=entry.kind,
        name=entry.name,
        status=status,
        stream=entry.stream,
        source=str(entry.source) if entry.source and status != "orphaned" else None,
        fields=fields,
        reasons=tuple(entry.reasons) if status == "drifted" else (),
    )


def from_plan(plan: Plan) -> DriftReport:
    """The drift report of a plan (made without prune: orphans are notes, not deletes)."""
    entries: list[Entry] = [*plan.changes, *plan.unchanged, *plan.unmanaged, *plan.orphans]
    return DriftReport(
        resources=tuple(resource_from_entry(e) for e in entries),
        server_version=plan.server.version,
    )
