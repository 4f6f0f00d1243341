"""Validated specs: the engine's view of one declared resource.

A :class:`Spec` is what validation produces from a document: the kind, its identity and
its config in *wire form* (field names of the JetStream API, durations as integer
nanoseconds, sizes as integer bytes), with the source location of the document and of
every field so later phases can point back at the file.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.identity import KINDS, Kind, ResourceRef
from reconciler.locations import Location, closest_location
from reconciler.specs.lifecycle import MANAGE, Lifecycle
from reconciler.specs.standby import Standby

__all__ = [
    "CLAIM_KEY",
    "DEFAULT_OWNER",
    "KINDS",
    "MANAGED_KEY",
    "MANAGED_VALUE",
    "OWNER_KEY",
    "OWNER_PATTERN",
    "SERVER_OWNED_METADATA",
    "UNDIFFED_METADATA",
    "Kind",
    "Spec",
    "entry_config",
]

#: Metadata key (and value) marking a resource as created and managed by this tool.
MANAGED_KEY = "io.jetstream-gitops/managed-by"
MANAGED_VALUE = "reconcile"
#: Metadata key naming the project that owns a managed resource. A managed resource
#: without it (every resource before owners existed) belongs to DEFAULT_OWNER, whose
#: resources are written without the key, so they keep planning empty.
OWNER_KEY = "io.jetstream-gitops/owner"
DEFAULT_OWNER = "default"
#: What an owner's name may be (it is written into resource metadata).
OWNER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"

#: Metadata keys the server owns (2.11+); never diffed, never sent.
SERVER_OWNED_METADATA = frozenset({"_nats.ver", "_nats.level", "_nats.req.level"})
#: Metadata key of the claim the Pulumi provider records on each resource it creates or
#: adopts (a random value, also in the resource's outputs), so that its delete leaves alone
#: a resource another Pulumi resource created or adopted since (``pulumi_provider``). No
#: secret (it grants nothing; anyone may write it): it may only keep a delete from
#: happening. Never declared, never diffed, never exported; an update keeps it
#: (``model.normalize.with_claim_kept``).
CLAIM_KEY = "io.jetstream-gitops/claim"
#: Metadata keys no diff compares (plan, drift, a Pulumi diff or refresh) and no export
#: writes: the server's own and the claim.
UNDIFFED_METADATA = SERVER_OWNED_METADATA | {CLAIM_KEY}


@dataclass(frozen=True, slots=True, init=False)
class Spec:
    """One declared resource, validated, in wire units. Slotted: a large repository
    holds one per declared resource (101,000 specs took 30 MiB more as dicts). Made by
    its own ``__init__`` (the dataclass's sets each field through ``object.__setattr__``:
    2.3 us a spec, this one 1.3)."""

    kind: Kind
    name: str
    config: Mapping[str, Any]
    source: Location
    stream: str | None = None  # consumers only: the stream they belong to
    external: bool = False  # streams only: declared to exist, managed elsewhere
    locations: Mapping[str, Location] = field(default_factory=dict)  # "a.b.0" -> where
    #: Durations and sizes as the file wrote them ("max_age" -> "14d"), for display.
    written: Mapping[str, str] = field(default_factory=dict)
    #: KeyValueEntry only: the file its value was read from (``value_file``, as resolved
    #: against the spec file). The value is not in the spec files, so the spec cache
    #: never keeps it: it reads the file again.
    value_file: str | None = None
    #: What the tool may do to it (``lifecycle:``; :mod:`reconciler.specs.lifecycle`).
    lifecycle: Lifecycle = MANAGE
    #: Streams only: the environment keeping its mirror (``standby:``; docs/dr.md).
    standby: Standby | None = None
    #: Who this resource is (kind, name, stream), and the JetStream stream it is or
    #: lives in: made once (plans and checks ask for them several times per resource).
    ref: ResourceRef = field(init=False, repr=False, compare=False)
    stream_name: str = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        kind: Kind,
        name: str,
        config: Mapping[str, Any],
        source: Location,
        stream: str | None = None,
        external: bool = False,
        locations: Mapping[str, Location] | None = None,
        written: Mapping[str, str] | None = None,
        value_file: str | None = None,
        lifecycle: Lifecycle = MANAGE,
        standby: Standby | None = None,
    ) -> None:
        _KIND(self, kind)
        _NAME(self, name)
        _CONFIG(self, config)
        _SOURCE(self, source)
        _STREAM(self, stream)
        _EXTERNAL(self, external)
        _LOCATIONS(self, {} if locations is None else locations)
        _WRITTEN(self, {} if written is None else written)
        _VALUE_FILE(self, value_file)
        _LIFECYCLE(self, lifecycle)
        _STANDBY(self, standby)
        _identify(self)

    @classmethod
    def restored(cls, fields: Mapping[str, Any]) -> Spec:
        """A spec made again from every one of its fields, as an earlier run validated
        them (the spec cache), without the keyword ``__init__``."""
        spec = object.__new__(cls)
        for name, value in fields.items():
            _SLOTS[name](spec, value)
        _identify(spec)
        return spec

    def with_lifecycle(self, lifecycle: Lifecycle) -> Spec:
        """This spec with another lifecycle (an environment's merged in): a copy made
        slot by slot (``dataclasses.replace`` cost a fifth of a re-plan)."""
        spec = object.__new__(Spec)
        for name, set_slot in _SLOTS.items():
            set_slot(spec, getattr(self, name))
        _SLOTS["lifecycle"](spec, lifecycle)
        return spec

    @property
    def key(self) -> tuple[str, str, str]:
        """Identity used across the engine: (kind, stream or "", name)."""
        return (self.kind, self.stream or "", self.name)

    def where(self, path: str) -> Location:
        """The location of a field (or the closest enclosing one, or the document)."""
        return closest_location(self.locations, path, self.source)


def _identify(spec: Spec) -> None:
    ref = ResourceRef(spec.kind, spec.name, spec.stream)
    _REF(spec, ref)
    _STREAM_NAME(spec, ref.stream_name)


#: Each slot's setter (a frozen spec's own ``__setattr__`` refuses).
_SLOTS = {name: getattr(Spec, name).__set__ for name in Spec.__slots__}
_KIND, _NAME, _CONFIG, _SOURCE = _SLOTS["kind"], _SLOTS["name"], _SLOTS["config"], _SLOTS["source"]
_STREAM, _EXTERNAL, _LOCATIONS = _SLOTS["stream"], _SLOTS["external"], _SLOTS["locations"]
_WRITTEN, _VALUE_FILE, _LIFECYCLE = _SLOTS["written"], _SLOTS["value_file"], _SLOTS["lifecycle"]
_STANDBY, _REF, _STREAM_NAME = _SLOTS["standby"], _SLOTS["ref"], _SLOTS["stream_name"]


def entry_config(value: bytes, secret: bool) -> dict[str, Any]:
    """A KeyValueEntry's config: its value's bytes, base64-encoded, and whether it is
    secret (never printed)."""
    return {"value": base64.b64encode(value).decode(), "secret": secret}
