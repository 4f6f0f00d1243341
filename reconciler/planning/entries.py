"""Planning KeyValue entries (``KeyValueEntry`` specs) against the keys a server holds (pure).

An entry is a key and its value. Declared and live are compared by value:
- equal and written by this owner: ``Unchanged``;
- different: an ``Update`` carrying the revision it was read at, which apply uses as a
  compare-and-set (a concurrent writer makes it fail, never overwritten);
- no value (never written, deleted or purged), or the bucket is created or replaced by
  this plan: a ``Create``.

Whose an entry is lives in two headers of its last message (:data:`MANAGED_HEADER`,
:data:`OWNER_HEADER`), the way streams carry metadata. A value without them is adopted by
an update that writes it again with them. Another owner's is refused unless
``take_over``. With ``prune``, this owner's entries that no spec declares any more are
deleted (at their revision); other keys are never listed, whatever their number.

Values are bytes, kept base64-encoded; a plan shows them as text when they are text,
and never shows a ``secret: true`` value, before or after, nor the value of a key whose
last part names a secret (``db.password``: ``specs.fields.is_secret``, the rule that
redacts metadata under such a name). A secret is written with a
third header (:data:`SECRET_HEADER`), and a live value carrying it is never shown either,
whatever the spec says now: a change that drops ``secret: true`` (a pull request's) would
otherwise print the value it replaces. A secret written before that header existed is
written again with it (an update that changes no value).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from reconciler.errors import Problem
from reconciler.identity import KV_PREFIX, ResourceRef, kv_subject
from reconciler.model.diff import FieldChange
from reconciler.model.loss import Loss
from reconciler.model.values import entry_text
from reconciler.planning.plan import ADOPT_REASON, PRUNE_REASON, Ownership, StreamPlan
from reconciler.planning.steps import (
    Create,
    Delete,
    Foreign,
    Orphan,
    Plan,
    Replace,
    Unchanged,
    Update,
    order_waves,
    prevention,
    sort_key,
)
from reconciler.specs.fields import is_secret
from reconciler.specs.spec import DEFAULT_OWNER, MANAGED_KEY, MANAGED_VALUE, OWNER_KEY, Spec

#: Headers of an entry's message that say it is managed, and by which owner.
MANAGED_HEADER = "Jetstream-Gitops-Managed-By"
OWNER_HEADER = "Jetstream-Gitops-Owner"
#: The header that says a value was written as a secret (``secret: true``).
SECRET_HEADER = "Jetstream-Gitops-Secret"
#: Why a secret whose value is unchanged is written again.
MARK_SECRET_REASON = "mark the value secret (its header), the value unchanged"
SECRET_SHOWN = "(secret)"
#: How much of a value a plan shows.
SHOWN_LIMIT = 200


@dataclass(frozen=True)
class LiveEntry:
    """The last value of a key, as the server holds it (``value`` base64-encoded)."""

    bucket: str
    key: str
    value: str
    revision: int
    headers: Mapping[str, str]

    @property
    def marker(self) -> dict[str, dict[str, str]]:
        """The headers as the metadata the ownership rules read."""
        metadata = {}
        if self.headers.get(MANAGED_HEADER) == MANAGED_VALUE:
            metadata[MANAGED_KEY] = MANAGED_VALUE
            if self.headers.get(OWNER_HEADER):
                metadata[OWNER_KEY] = self.headers[OWNER_HEADER]
        return {"metadata": metadata}

    @property
    def secret(self) -> bool:
        """Written as a secret: never shown, whatever the spec declaring it says now.
        Any value of the header, its name in any case, counts: another tool may write
        ``jetstream-gitops-secret: TRUE``, and hiding a value is never a leak."""
        marker = SECRET_HEADER.casefold()
        return any(name.casefold() == marker for name in self.headers)

    def owned_by(self, owner: str) -> bool:
        if self.headers.get(MANAGED_HEADER) != MANAGED_VALUE:
            return False
        return self.headers.get(OWNER_HEADER, DEFAULT_OWNER) == owner


def marker_headers(owner: str, *, secret: bool = False) -> dict[str, str]:
    """The headers an apply writes with a value."""
    headers = {MANAGED_HEADER: MANAGED_VALUE}
    if owner != DEFAULT_OWNER:
        headers[OWNER_HEADER] = owner
    if secret:
        headers[SECRET_HEADER] = "true"
    return headers


def shown(value: str | None, *, secret: bool) -> str | None:
    """A value as a plan shows it: text when it is text (``model.values.entry_text``: a
    final line break included), else base64; never a secret."""
    if value is None:
        return None
    if secret:
        return SECRET_SHOWN
    text = entry_text(base64.b64decode(value))
    if text is None:
        text = "base64:" + value
    return text if len(text) <= SHOWN_LIMIT else text[: SHOWN_LIMIT - 1] + "…"


def plan_entries(
    specs: Sequence[Spec],
    live: Mapping[tuple[str, str], LiveEntry],
    *,
    fresh_buckets: frozenset[str] = frozenset(),
    scanned_buckets: frozenset[str] = frozenset(),
    prune: bool = False,
    ownership: Ownership,
) -> StreamPlan:
    """The entries' part of a plan.

    ``live``: the last value of each key read (declared keys, and every key of the
    ``scanned_buckets``); ``fresh_buckets``: buckets this plan creates or replaces (their
    keys are empty by the time entries are written).
    """
    out = StreamPlan()
    declared = {(str(spec.stream), spec.name) for spec in specs}
    for spec in specs:
        bucket = str(spec.stream)
        secret = bool(spec.config.get("secret"))
        hidden = secret or is_secret(spec.name)  # a key named db.password: as metadata
        value = str(spec.config["value"])
        headers = marker_headers(ownership.owner, secret=secret)
        config = {"value": value, "secret": secret, "headers": headers}
        current = None if bucket in fresh_buckets else live.get((bucket, spec.name))
        ref, source = spec.ref, spec.source
        if current is None:
            change = FieldChange("value", None, shown(value, secret=hidden))
            out.add(Create(ref=ref, source=source, fields=(change,), config=config))
            continue
        refusal, notes = ownership.claim(spec, current.marker)
        if refusal is not None:
            out.problems.append(refusal)
            continue
        before = {"value": current.value, "revision": current.revision}
        managed = current.headers.get(MANAGED_HEADER) == MANAGED_VALUE
        unmarked = secret and not current.secret
        if current.value == value and managed and not notes and not unmarked:
            out.add(Unchanged(ref=ref, source=source))
            continue
        fields: tuple[FieldChange, ...] = ()
        if current.value != value:
            was = shown(current.value, secret=hidden or current.secret)
            fields = (FieldChange("value", was, shown(value, secret=hidden)),)
        reasons = notes if managed else (ADOPT_REASON,)
        if managed and unmarked and not fields:
            reasons = (*reasons, MARK_SECRET_REASON)
        out.add(
            Update(
                ref=ref, source=source, fields=fields, reasons=reasons, config=config, live=before
            )
        )
    for (bucket, key), current in sorted(live.items()):
        if bucket not in scanned_buckets or (bucket, key) in declared:
            continue
        if current.headers.get(MANAGED_HEADER) != MANAGED_VALUE:
            continue  # not this tool's: other keys of a bucket are never listed
        ref = ResourceRef("KeyValueEntry", key, bucket)
        before = {"value": current.value, "revision": current.revision}
        if not current.owned_by(ownership.owner):
            holder = current.headers.get(OWNER_HEADER, DEFAULT_OWNER)
            out.add(Foreign(ref=ref, owner=holder))
        elif prune:
            lost = Loss("", "its value (and the key's history) is deleted")
            out.add(Delete(ref=ref, live=before, reasons=("no spec declares it",), losses=(lost,)))
        else:
            out.add(Orphan(ref=ref, live=before, reasons=(PRUNE_REASON,)))
    return out


def missing_buckets(
    specs: Sequence[Spec],
    live_streams: Mapping[str, Mapping[str, Any]],
    declared: Mapping[str, Spec],
    deleted: frozenset[str] = frozenset(),
) -> list[Problem]:
    """Entries whose bucket takes no write of theirs: neither declared nor on the server;
    a bucket mirroring another (its stream has no subjects: the write is answered by
    no stream); a live ``KV_<bucket>`` that is not a bucket (moved off
    ``$KV.<bucket>.>``: the plan lists it as a Stream); or on the server only until this
    plan deletes it
    (``deleted``: :func:`deleted_buckets`; a bucket no spec declares that ``--prune``
    deletes would take the values written to it along, in the same apply).
    ``live_streams`` and ``declared`` are keyed by stream name (``KV_<bucket>``)."""
    problems = []
    for spec in specs:
        stream = spec.stream_name
        message = _unwritable(spec, declared.get(stream), live_streams.get(stream), deleted)
        if message:
            problems.append(Problem(spec.where("bucket"), "bucket", message))
    return problems


def _unwritable(
    entry: Spec,
    declared: Spec | None,
    live: Mapping[str, Any] | None,
    deleted: frozenset[str],
) -> str | None:
    bucket, stream = str(entry.stream), entry.stream_name
    if declared is not None:
        mirror = declared.config.get("mirror") if declared.kind == "KeyValue" else None
        return _mirrors(bucket, mirror)
    if live is None:
        return f"bucket {bucket!r} is neither declared (kind: KeyValue) nor on the server"
    if ResourceRef.of_stream(stream, live).kind != "KeyValue":
        return (
            f"bucket {bucket!r} is not a KeyValue bucket on the server: its stream "
            f"{stream!r} does not take {kv_subject(bucket)!r} (changed by hand?), so no "
            "entry is written to it"
        )
    if (message := _mirrors(bucket, live.get("mirror"))) is not None:
        return message
    if stream in deleted:
        return (
            f"bucket {bucket!r} is declared by no spec, and --prune deletes it in "
            "this plan, with the values written to it: declare it (kind: KeyValue)"
        )
    return None


def _mirrors(bucket: str, mirror: Any) -> str | None:
    """Why an entry of ``bucket``, a mirror of ``mirror``, is refused (None: no mirror)."""
    if not isinstance(mirror, Mapping):
        return None
    origin = str(mirror.get("name", "")).removeprefix(KV_PREFIX)
    return (
        f"bucket {bucket!r} mirrors {origin!r} and takes no writes of its own: "
        f"declare the entry in {origin!r}"
    )


def deleted_buckets(plan: Plan) -> frozenset[str]:
    """The streams ``plan`` deletes (pruned), buckets among them; not those lifecycle
    prevents it from deleting (the plan is refused for them, naming the protection)."""
    return frozenset(
        step.stream_name
        for step in plan.changes
        if isinstance(step, Delete) and not step.ref.is_child and not prevention(step)
    )


def with_entries(plan: Plan, part: StreamPlan) -> Plan:
    """``plan`` with the entries' part added (steps ordered again: entries after their
    bucket, deletes last); every other field of ``plan`` kept."""
    return replace(
        plan,
        changes=tuple(step for wave in order_waves([*plan.changes, *part.steps]) for step in wave),
        unchanged=tuple(sorted([*plan.unchanged, *part.unchanged], key=sort_key)),
        orphans=tuple(sorted([*plan.orphans, *part.orphans], key=sort_key)),
        foreign=tuple(sorted([*plan.foreign, *part.foreign], key=sort_key)),
        observed=tuple(sorted([*plan.observed, *part.observed], key=sort_key)),
    )


def fresh_buckets(plan: Plan) -> frozenset[str]:
    """Buckets whose keys are empty when entries are written: created or replaced."""
    return frozenset(
        str(step.name)
        for step in plan.changes
        if step.kind == "KeyValue" and isinstance(step, Create | Replace)
    )
