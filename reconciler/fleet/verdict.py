"""The fleet's verdict on one stream: the planner's own :func:`plan_stream`, as findings.

No rule lives here. A stream group (declared specs of one environment, live configs of
one day) is planned by ``reconciler.planning.plan.plan_stream`` exactly as ``reconcile
plan`` plans it, and each entry is read the way ``reconcile drift`` reads it
(``reconciler.planning.drift.resource_from_entry``); this module only turns the result
into flat rows, values redacted by ``reconciler.model.values``. Nothing here imports
pyspark, so it is tested without a JVM and shipped to workers by reference.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from reconciler.errors import SpecError
from reconciler.model.state import ServerInfo
from reconciler.model.values import redact
from reconciler.planning.drift import resource_from_entry
from reconciler.planning.memo import Memo
from reconciler.planning.plan import DEFAULT_OWNERSHIP, Ownership, StreamGroup, plan_stream
from reconciler.planning.steps import Create, PlanEntry, sort_key
from reconciler.specs.spec import Spec

#: (kind, stream or None, name, status, field, desired JSON, live JSON)
Finding = tuple[str, str | None, str, str, str | None, str | None, str | None]


def to_json(value: Any) -> str:
    """Canonical JSON text: sorted keys, compact."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _whole(config: Mapping[str, Any] | None) -> str | None:
    return None if config is None else to_json(redact(dict(config)))


def entry_findings(entry: PlanEntry) -> Iterator[Finding]:
    """One entry as rows: one per drifted field, else one for the resource."""
    resource = resource_from_entry(entry)
    head = (resource.kind, resource.stream, resource.name, resource.status)
    if resource.status == "drifted":
        for change in resource.fields:
            declared = to_json(redact(change.declared, path=change.path))
            live = to_json(redact(change.live, path=change.path))
            yield (*head, change.path, declared, live)
    elif resource.status == "missing" and isinstance(entry, Create):
        yield (*head, None, _whole(entry.config), None)
    elif resource.status in ("unmanaged", "orphaned"):
        yield (*head, None, None, _whole(getattr(entry, "live", None)))
    else:
        yield (*head, None, None, None)


def stream_findings(
    group: StreamGroup,
    server: ServerInfo,
    memo: Memo | None = None,
    ownership: Ownership = DEFAULT_OWNERSHIP,
) -> list[Finding]:
    """Every finding of one stream and its consumers (the plan's entries, in plan order),
    planned as ``ownership`` (the project's owner, or ``--owner``).

    Raises :class:`SpecError` on what the plan refuses; the job checks those on the driver
    first (``reconciler.planning.plan.stream_problems``), so a worker never sees one. A
    declared resource another owner holds is not such a refusal here: the fleet only
    reads, so it is reported as theirs (``foreign``), as an undeclared one is.
    """
    group = _claimable(group, ownership)
    planned = plan_stream(group, server, prune=False, memo=memo, ownership=ownership)
    if planned.problems:
        raise SpecError(planned.problems)
    return [f for entry in sorted(planned.entries, key=sort_key) for f in entry_findings(entry)]


def _claimable(group: StreamGroup, ownership: Ownership) -> StreamGroup:
    """``group`` without the declared resources whose live configs another owner holds
    (``Ownership.claim`` refuses them): the planner then lists those as foreign."""

    def theirs(spec: Spec, raw: Mapping[str, Any] | None) -> bool:
        return raw is not None and ownership.claim(spec, raw)[0] is not None

    declared = group.declared
    if declared is not None and not declared.external and theirs(declared, group.live):
        declared = None
    consumers = tuple(c for c in group.consumers if not theirs(c, group.live_consumers.get(c.name)))
    if declared is group.declared and len(consumers) == len(group.consumers):
        return group
    return replace(group, declared=declared, consumers=consumers)
