"""Field-level differences between two canonical configs, and what forces a replace.

``diff_configs`` is a small pure walk over plain dicts (in the spirit of kopf's diffs):
dict keys are compared one by one (sorted, so paths are stable), lists of objects of the
same length element by element (``sources.0.filter_subject``), any other list as one value
(subject order is kept by the server, so lists are ordered). ``before`` is the live value,
``after`` the desired one; ``None`` stands for "absent".

``replace_reasons`` implements the immutable-field rules of JETSTREAM.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.model.state import ServerInfo
from reconciler.model.values import redact


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field where live and desired differ: dotted ``path``, live ``before``, desired
    ``after``. A plan reads it as a change (before → after), a drift report as a finding
    (``declared`` is ``after``, ``live`` is ``before``). Secrets are redacted on output."""

    path: str
    before: Any
    after: Any

    @property
    def declared(self) -> Any:
        return self.after

    @property
    def live(self) -> Any:
        return self.before

    def to_json(self) -> dict[str, Any]:
        """The plan's view (``schemas/plan.schema.json``)."""
        return {
            "path": self.path,
            "before": redact(self.before, path=self.path),
            "after": redact(self.after, path=self.path),
        }

    def to_drift_json(self) -> dict[str, Any]:
        """The drift report's view (``schemas/drift.schema.json``)."""
        return {
            "path": self.path,
            "declared": redact(self.after, path=self.path),
            "live": redact(self.before, path=self.path),
        }


@dataclass(frozen=True, slots=True)
class ReplaceReason:
    """Why an update cannot make a change: the top-level ``field`` and a sentence."""

    field: str
    message: str

    def __str__(self) -> str:
        return self.message


def diff_configs(
    desired: Mapping[str, Any], live: Mapping[str, Any], *, only: Iterable[str] | None = None
) -> list[FieldChange]:
    """Every difference between two canonical configs; empty when they are equal.

    ``only`` limits the walk to those top-level fields (the same changes, in the same
    order, as filtering the full list, without walking the rest)."""
    if only is None:
        return list(_walk("", live, desired))
    changes: list[FieldChange] = []
    for key in sorted({key for key in only if key in live or key in desired}, key=str):
        before, after = live.get(key), desired.get(key)
        if type(before) in _PLAIN and type(after) in _PLAIN:  # _walk's answer, without one
            if before != after:
                changes.append(FieldChange(key, before, after))
        else:
            changes.extend(_walk(key, before, after))
    return changes


#: Values :func:`diff_configs` compares without a walk: one change at most.
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _walk(path: str, before: Any, after: Any) -> Iterator[FieldChange]:
    if before == after:
        return
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        for key in sorted(set(before) | set(after), key=str):
            yield from _walk(_join(path, str(key)), before.get(key), after.get(key))
        return
    if _same_shape_object_lists(before, after):
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            yield from _walk(_join(path, str(index)), old, new)
        return
    yield FieldChange(path, before, after)


def _same_shape_object_lists(before: Any, after: Any) -> bool:
    return (
        isinstance(before, list)
        and isinstance(after, list)
        and len(before) == len(after)
        and all(isinstance(v, Mapping) for v in [*before, *after])
    )


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --- immutable fields -------------------------------------------------------------------

Rule = Callable[[Mapping[str, Any], Mapping[str, Any], ServerInfo], str | None]
#: A rule and the top-level field it guards.
FieldRule = tuple[str, Rule]


def _relaxed(field: str) -> Rule:
    """A flag that can be turned on by an update but never off again."""

    def rule(desired: Mapping[str, Any], live: Mapping[str, Any], server: ServerInfo) -> str | None:
        if live.get(field) and not desired.get(field):
            return f"{field} cannot change from true to false"
        return None

    return rule


def _fixed(field: str, what: str = "") -> Rule:
    def rule(desired: Mapping[str, Any], live: Mapping[str, Any], server: ServerInfo) -> str | None:
        if desired.get(field) != live.get(field):
            return f"{field} cannot be changed{what}"
        return None

    return rule


def _retention(desired: Mapping[str, Any], live: Mapping[str, Any], _: ServerInfo) -> str | None:
    old, new = live.get("retention"), desired.get("retention")
    if old != new and "workqueue" in (old, new):
        return f"retention cannot change from {old} to {new}"
    return None


def _mirror(desired: Mapping[str, Any], live: Mapping[str, Any], server: ServerInfo) -> str | None:
    old, new = live.get("mirror"), desired.get("mirror")
    if old == new:
        return None
    if old is None:
        return "a mirror cannot be added to an existing stream"
    if new is None:
        if server.version_tuple >= (2, 12, 0):
            return None
        return f"removing a mirror needs nats-server 2.12 (connected: {server.version})"
    return "mirror cannot be changed"


def _msg_ttl(desired: Mapping[str, Any], live: Mapping[str, Any], server: ServerInfo) -> str | None:
    old, new = bool(live.get("allow_msg_ttl")), bool(desired.get("allow_msg_ttl"))
    if old and not new:
        return "allow_msg_ttl cannot change from true to false"
    if old != new and (2, 11, 0) <= server.version_tuple < (2, 11, 2):
        return f"allow_msg_ttl cannot be changed on nats-server {server.version}"
    return None


def _max_consumers(
    desired: Mapping[str, Any], live: Mapping[str, Any], server: ServerInfo
) -> str | None:
    if server.version_tuple >= (2, 12, 5):
        return None
    return _fixed("max_consumers", f" before nats-server 2.12.5 (connected: {server.version})")(
        desired, live, server
    )


STREAM_RULES: tuple[FieldRule, ...] = (
    ("storage", _fixed("storage")),
    ("retention", _retention),
    ("mirror", _mirror),
    ("sealed", _relaxed("sealed")),
    ("deny_delete", _relaxed("deny_delete")),
    ("deny_purge", _relaxed("deny_purge")),
    ("allow_msg_ttl", _msg_ttl),
    ("allow_msg_counter", _fixed("allow_msg_counter")),
    ("allow_msg_schedules", _relaxed("allow_msg_schedules")),
    ("persist_mode", _fixed("persist_mode")),
    ("max_consumers", _max_consumers),
)


def _memory(desired: Mapping[str, Any], live: Mapping[str, Any], server: ServerInfo) -> str | None:
    """nats-server 2.14.4 started refusing a change of a consumer's storage type."""
    if server.version_tuple < (2, 14, 4):
        return None
    return _fixed("mem_storage")(desired, live, server)


_FIXED_CONSUMER_FIELDS = (
    "deliver_policy",
    "opt_start_seq",
    "opt_start_time",
    "ack_policy",
    "replay_policy",
    "max_waiting",
    "flow_control",
    "idle_heartbeat",
)


def _push_pull(desired: Mapping[str, Any], live: Mapping[str, Any], _: ServerInfo) -> str | None:
    was_push, is_push = bool(live.get("deliver_subject")), bool(desired.get("deliver_subject"))
    if was_push == is_push:
        return None
    return "a pull consumer cannot become push" if is_push else "a push consumer cannot become pull"


CONSUMER_RULES: tuple[FieldRule, ...] = (
    *((name, _fixed(name)) for name in _FIXED_CONSUMER_FIELDS),
    ("mem_storage", _memory),
    ("deliver_subject", _push_pull),
)


def replace_reasons(
    kind: str, desired: Mapping[str, Any], live: Mapping[str, Any], server: ServerInfo
) -> list[ReplaceReason]:
    """Why an update cannot turn ``live`` into ``desired`` (empty: an update will do)."""
    rules = CONSUMER_RULES if kind == "Consumer" else STREAM_RULES
    return [
        ReplaceReason(name, message)
        for name, rule in rules
        if (message := rule(desired, live, server)) is not None
    ]
