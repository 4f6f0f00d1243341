"""A resource's lifecycle: what the tool may do to it, declared next to its fields.

``lifecycle:`` on a spec (``schemas/document.schema.json#/$defs/lifecycle``), and per
environment in the project file (``environments.NAME.lifecycle``, applying to every
resource of that environment):

- ``prevent_destroy: true``: no delete, replace, prune or migration of the resource,
  whatever flags are given (the executor refuses the whole plan:
  ``planning.steps.prevention``). The tool records it on the server, in the resource's
  metadata (:data:`PROTECT_KEY`, valued with where it was declared), so a resource whose
  spec is removed is still known to be protected. That record is data anyone could
  write: it only ever adds protection, never removes it.
- ``ignore_changes: [field, ...]`` or ``all``: the live values of these fields never
  make a difference (an update sends them back as they are); a create uses the declared
  values.
- ``mode: observe`` (default ``manage``): read and report, never write.

Several settings meet (a spec's and its environment's): safety wins
(:meth:`Lifecycle.merged`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.errors import Problem
from reconciler.locations import Location

__all__ = [
    "IGNORE_ALL",
    "MANAGE",
    "PROTECT_KEY",
    "Lifecycle",
    "ignorable_fields",
    "lifecycle_of",
    "protection_marker",
    "recorded_protection",
]

#: ``ignore_changes: all``.
IGNORE_ALL = "all"
#: Metadata key recording that a resource is protected (``prevent_destroy``); its value
#: is where that was declared (``FILE:LINE``), as the tool wrote it.
PROTECT_KEY = "io.jetstream-gitops/prevent-destroy"
#: Spec fields that say which resource it is, not how: never ignored.
_IDENTITY_FIELDS = frozenset({"kind", "name", "stream", "external", "lifecycle", "durable_name"})
#: The kinds a lifecycle applies to (a KeyValue entry follows its environment's only).
LIFECYCLE_KINDS = ("Stream", "Consumer", "KeyValue", "ObjectStore")


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """What the tool may do to one resource. ``protected_at`` / ``observed_at``: where
    ``prevent_destroy`` / ``mode: observe`` were declared (``FILE:LINE``)."""

    prevent_destroy: bool = False
    ignore_changes: frozenset[str] = frozenset()
    observe: bool = False
    protected_at: str = ""
    observed_at: str = ""

    @property
    def ignores_all(self) -> bool:
        return IGNORE_ALL in self.ignore_changes

    @property
    def is_default(self) -> bool:
        """Manage, nothing ignored, nothing prevented."""
        return not (self.prevent_destroy or self.ignore_changes or self.observe)

    def merged(self, other: Lifecycle) -> Lifecycle:
        """Both settings together, safety first: protected when either protects,
        observed when either observes, the ignored fields of both."""
        if other.is_default:
            return self
        if self.is_default:
            return other
        return Lifecycle(
            prevent_destroy=self.prevent_destroy or other.prevent_destroy,
            ignore_changes=self.ignore_changes | other.ignore_changes,
            observe=self.observe or other.observe,
            protected_at=self.protected_at or other.protected_at,
            observed_at=self.observed_at or other.observed_at,
        )

    def settings(self) -> dict[str, Any]:
        """The settings as a ``lifecycle:`` block writes them (defaults left out)."""
        written: dict[str, Any] = {}
        if self.prevent_destroy:
            written["prevent_destroy"] = True
        if self.ignore_changes:
            written["ignore_changes"] = "all" if self.ignores_all else sorted(self.ignore_changes)
        if self.observe:
            written["mode"] = "observe"
        return written

    def to_json(self) -> dict[str, Any]:
        """The settings as plain data (the spec cache)."""
        return {
            "prevent_destroy": self.prevent_destroy,
            "ignore_changes": sorted(self.ignore_changes),
            "observe": self.observe,
            "protected_at": self.protected_at,
            "observed_at": self.observed_at,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Lifecycle:
        return cls(
            prevent_destroy=bool(raw["prevent_destroy"]),
            ignore_changes=frozenset(str(f) for f in raw["ignore_changes"]),
            observe=bool(raw["observe"]),
            protected_at=str(raw["protected_at"]),
            observed_at=str(raw["observed_at"]),
        )


#: Manage, nothing ignored, nothing prevented: a resource without a ``lifecycle``.
MANAGE = Lifecycle()


@functools.cache
def ignorable_fields(kind: str | None) -> tuple[str, ...]:
    """The field names ``ignore_changes`` may name for ``kind`` (any kind's: None)."""
    from reconciler.specs.schema import schema  # it imports spec, which imports this

    kinds = LIFECYCLE_KINDS if kind is None else (kind,)
    names = {name for k in kinds for name in schema(k).get("properties", {})}
    return tuple(sorted(names - _IDENTITY_FIELDS - {"$schema"}))


def lifecycle_of(
    raw: Any,
    kind: str | None,
    where: Callable[[str], Location],
    problems: list[Problem],
    *,
    prefix: str = "lifecycle",
) -> Lifecycle:
    """The ``lifecycle`` mapping ``raw`` (already valid against its schema), for a
    resource of ``kind`` (None: an environment's, for any kind). An unknown field name
    in ``ignore_changes`` is a problem at its line, with a did-you-mean hint.
    ``where(path)``: the location of a dotted path of the document."""
    from reconciler.specs.schema import did_you_mean

    if not isinstance(raw, Mapping) or not raw:
        return MANAGE
    ignored = raw.get("ignore_changes") or []
    names = [IGNORE_ALL] if ignored == IGNORE_ALL else [str(name) for name in ignored]
    allowed = ignorable_fields(kind)
    for index, name in enumerate(names):
        if name != IGNORE_ALL and name not in allowed:
            path = f"{prefix}.ignore_changes.{index}"
            hint = did_you_mean(name, allowed)
            whose = f"a {kind}" if kind else "any kind"
            message = f"unknown field {name!r} for ignore_changes{hint} (not a field of {whose})"
            problems.append(Problem(where(path), path, message))
    protect = bool(raw.get("prevent_destroy", False))
    observe = raw.get("mode", "manage") == "observe"
    return Lifecycle(
        prevent_destroy=protect,
        ignore_changes=frozenset(names),
        observe=observe,
        protected_at=str(where(f"{prefix}.prevent_destroy")) if protect else "",
        observed_at=str(where(f"{prefix}.mode")) if observe else "",
    )


def protection_marker(lifecycle: Lifecycle) -> dict[str, str]:
    """The metadata recording ``prevent_destroy`` on the server (empty without it)."""
    if not lifecycle.prevent_destroy:
        return {}
    return {PROTECT_KEY: lifecycle.protected_at or "declared"}


def recorded_protection(config: Mapping[str, Any] | None) -> str | None:
    """Where a live config's metadata says ``prevent_destroy`` was declared; None when
    it records no protection. Possibly forged: the caller escapes it before printing,
    and lets it only add protection."""
    metadata = (config or {}).get("metadata")
    if not isinstance(metadata, Mapping) or PROTECT_KEY not in metadata:
        return None
    return str(metadata[PROTECT_KEY])
