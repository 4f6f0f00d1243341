"""The drift status of one stream and its consumers: the plan's rules, row by row.

Mirrors ``reconciler.plan.build_plan`` read through ``reconciler.drift.from_plan``:

- declared and live: diffed with the plan's ``diff_configs``; no field → ``in_sync``,
  else one ``drifted`` finding per field. A declared stream whose change needs a
  replace takes its consumers with it: its declared consumers are ``missing`` (the plan
  re-creates them) and its undeclared ones are not listed;
- declared, not live → ``missing`` (``desired`` holds the whole declared config);
- live, not declared → ``unmanaged``, or ``orphaned`` when it carries the managed
  marker (``live`` holds the whole live config). An undeclared consumer is listed only
  when its stream is declared (otherwise it goes with its undeclared stream);
- ``external`` streams are never listed, nor the tool's own streams when undeclared
  (``reconciler.plan.INTERNAL_STREAMS``: the apply lock's bucket).

Pure: no pyspark, so the rules are unit-tested without a JVM.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from reconciler.fleet.canonical import compare, redacted_json
from reconciler.plan import INTERNAL_STREAMS

#: (kind, stream or None, name, status, field, desired JSON, live JSON)
Finding = tuple[str, str | None, str, str, str | None, str | None, str | None]


@dataclass(frozen=True, slots=True)
class Pair:
    """One row of the full outer join: the declared side, the live side, or both."""

    consumer: str  # "" for the stream itself
    declared_kind: str | None = None
    declared_name: str | None = None
    desired: str | None = None  # canonical JSON (None for external streams)
    external: bool = False
    server_version: str | None = None
    api_level: int | None = None
    live_kind: str | None = None  # what the live resource is called when undeclared
    live_name: str | None = None
    live: str | None = None  # canonical JSON
    managed: bool = False

    @property
    def declared(self) -> bool:
        return self.declared_kind is not None

    @property
    def present(self) -> bool:
        return self.live_kind is not None


def stream_findings(stream_name: str, pairs: Sequence[Pair]) -> Iterator[Finding]:
    """Findings of one stream (its row first, if any) and of its consumers."""
    head = pairs[0] if pairs and pairs[0].consumer == "" else None
    consumers = pairs[1:] if head is not None else pairs
    stream_declared = head is not None and head.declared
    replaced = False
    internal = stream_name in INTERNAL_STREAMS and not stream_declared
    if head is not None and not head.external and not internal:
        replaced, found = judge(head, None)
        yield from found
    for pair in consumers:
        if pair.declared and replaced:
            yield _missing(pair, stream_name)
        elif pair.declared or (pair.present and stream_declared and not replaced):
            yield from judge(pair, stream_name)[1]


def judge(pair: Pair, stream: str | None) -> tuple[bool, list[Finding]]:
    """``(replace needed, findings)`` of one resource."""
    if pair.declared and pair.present:
        assert pair.desired is not None and pair.live is not None
        kind, name = str(pair.declared_kind), str(pair.declared_name)
        replaced, changes = compare(
            kind, pair.desired, pair.live, pair.server_version, pair.api_level
        )
        if not changes:
            return (False, [(kind, stream, name, "in_sync", None, None, None)])
        return (
            replaced,
            [(kind, stream, name, "drifted", f, want, have) for f, want, have in changes],
        )
    if pair.declared:
        return (False, [_missing(pair, stream)])
    status = "orphaned" if pair.managed else "unmanaged"
    kind, name = str(pair.live_kind), str(pair.live_name)
    return (False, [(kind, stream, name, status, None, None, redacted_json(pair.live))])


def _missing(pair: Pair, stream: str | None) -> Finding:
    kind, name = str(pair.declared_kind), str(pair.declared_name)
    return (kind, stream, name, "missing", None, redacted_json(pair.desired), None)
