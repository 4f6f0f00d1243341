"""The canonical form both sides of a diff are compared in.

``desired_config(spec, server)`` is the complete config to send *and* to compare; the
``live_config(kind, config, server)`` of what the server answered is brought to the same
form. Both go through one function applying the server's own defaulting rules (a stored
config is a fixed point of them), so an unchanged resource diffs empty on every supported
server version:

- every field the server understands is present (absent ``omitempty`` fields get the value
  the server means by leaving them out; fields with no default, like ``mirror``, stay out);
- derived defaults: subjects ``[name]``, the duplicate window from ``max_age``, consumer
  ``ack_wait`` / ``max_ack_pending`` / ``max_waiting`` / inherited consumer limits...;
- limits given as 0 or below -1 become -1, timestamps are UTC RFC 3339;
- the server-owned metadata keys and the Pulumi provider's claim are dropped
  (:data:`UNDIFFED_METADATA`: never compared); desired adds the managed marker;
- KeyValue / ObjectStore specs become their ``KV_`` / ``OBJ_`` stream configs.

Fields of a live config that the tables do not know (a newer server) are not compared:
``preserved_fields`` returns them so an update can send them back unchanged (an update
replaces the whole config, and a field left out would go back to its default).
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from reconciler.errors import Problem
from reconciler.identity import BUCKET_KINDS
from reconciler.model import defaults as d
from reconciler.model.buckets import BUCKET_FIELD_NEEDS, bucket_stream_config
from reconciler.model.state import LiveState, ServerInfo
from reconciler.specs.lifecycle import PROTECT_KEY, protection_marker
from reconciler.specs.spec import (
    CLAIM_KEY,
    DEFAULT_OWNER,
    MANAGED_KEY,
    MANAGED_VALUE,
    OWNER_KEY,
    UNDIFFED_METADATA,
    Spec,
)

_NOT_CONFIG = frozenset({"kind", "stream", "external"})
#: Metadata keys only the tool writes (a spec's own are dropped): owner, protection.
_TOOL_KEYS = frozenset({OWNER_KEY, PROTECT_KEY})
_TIMESTAMP = re.compile(
    r"^(?P<base>\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d+))?"
    r"(?P<zone>[Zz]|[+-]\d{2}:\d{2})?$"
)
_COMPACTED = ("placement", "mirror", "subject_transform", "consumer_limits")


def wire_kind(kind: str) -> str:
    """Buckets are streams on the wire."""
    return "Consumer" if kind == "Consumer" else "Stream"


def is_managed(config: Mapping[str, Any]) -> bool:
    """Whether a live config carries this tool's managed-by marker."""
    metadata = config.get("metadata") or {}
    return bool(metadata.get(MANAGED_KEY) == MANAGED_VALUE)


def owner_of(config: Mapping[str, Any]) -> str | None:
    """The project owning a live resource; None when this tool does not manage it."""
    if not is_managed(config):
        return None
    owner = (config.get("metadata") or {}).get(OWNER_KEY)
    return owner if isinstance(owner, str) and owner else DEFAULT_OWNER


def ownership_marker(owner: str) -> dict[str, str]:
    """The metadata that marks a resource as managed by ``owner``."""
    marker = {MANAGED_KEY: MANAGED_VALUE}
    if owner != DEFAULT_OWNER:
        marker[OWNER_KEY] = owner
    return marker


#: The fields of a consumer's config that its name decides. Nothing else in a consumer's
#: desired or canonical config depends on its name: consumers of one stream that differ
#: only in their names have the same configs but for these fields (export and the
#: planner work such consumers out once; tests/unit/test_normalize.py checks it).
CONSUMER_NAME_FIELDS = ("durable_name", "name")
#: The fields of a stream's config that its name decides: ``name``, and ``subjects``
#: (a stream with no subjects, mirror or sources listens on its own name). Nothing else
#: in a stream's desired or canonical config depends on its name, nor on the value of
#: non-empty subjects (export works out streams that differ only in these once;
#: tests/unit/test_normalize.py checks it).
STREAM_NAME_FIELDS = ("name", "subjects")
#: The name fields by kind, for the kinds whose names decide nothing else.
NAME_FIELDS: Mapping[str, tuple[str, ...]] = {
    "Consumer": CONSUMER_NAME_FIELDS,
    "Stream": STREAM_NAME_FIELDS,
}


#: Fields both configs take verbatim and no defaulting rule reads, by kind: where the
#: live config holds what the spec declares (both absent included), the two agree in
#: such a field, and it decides nothing else of either config (the planner's memo
#: leaves them out of its digests: consumers that differ only in their filters and
#: descriptions are compared once; tests/unit/test_normalize.py checks it).
VERBATIM_FIELDS: Mapping[str, tuple[str, ...]] = {
    "Consumer": ("description", "filter_subject"),
    "Stream": ("description",),
}
_CONSUMER_VERBATIM = VERBATIM_FIELDS["Consumer"]
#: What :class:`DesiredConfigs` gives each consumer of a shape its own value of.
_LEFT_TO_EACH = frozenset((*CONSUMER_NAME_FIELDS, *_CONSUMER_VERBATIM))


def named_as_declared(
    kind: str, name: str, declared: Mapping[str, Any], raw: Mapping[str, Any]
) -> tuple[str, ...] | None:
    """The name fields of ``kind`` (:data:`CONSUMER_NAME_FIELDS`,
    :data:`STREAM_NAME_FIELDS`) when the live config ``raw`` holds in them what
    :func:`desired_config` gives a resource named ``name`` declaring ``declared``: a
    consumer's ``name`` and ``durable_name`` are its name, a stream's ``name`` is its
    name and its ``subjects`` are the declared ones (or both have none). None otherwise,
    and for buckets (whose names decide more of their stream configs).

    Then the pair's desired and canonical configs agree in these fields whenever they
    agree in the others, and the others do not depend on these: two such pairs that
    differ only in these fields compare alike (the planner's memo works each shape out
    once; tests/unit/test_plan_memo.py checks it)."""
    if kind == "Consumer":
        named = raw.get("name") == name and raw.get("durable_name") == name
    elif kind == "Stream":
        named = raw.get("name") == name and raw.get("subjects") == declared.get("subjects")
    else:
        return None
    return NAME_FIELDS[kind] if named else None


def desired_config(
    spec: Spec,
    server: ServerInfo,
    *,
    stream_config: Mapping[str, Any] | None = None,
    owner: str = DEFAULT_OWNER,
) -> dict[str, Any]:
    """The complete wire config of ``spec`` for ``server``: defaults + declared + marker.

    ``stream_config`` (consumers only) is the stream's config, for inherited limits.
    """
    # canonical() copies every value it keeps: no copy here
    declared = {k: v for k, v in spec.config.items() if k not in _NOT_CONFIG}
    if spec.kind in BUCKET_KINDS:
        declared = bucket_stream_config(spec.kind, spec.name, declared)
    elif spec.kind == "Consumer":
        for key in CONSUMER_NAME_FIELDS:
            declared[key] = spec.name
    else:
        declared["name"] = spec.name
    metadata = {k: v for k, v in (declared.get("metadata") or {}).items() if k not in _TOOL_KEYS}
    marker = {**ownership_marker(owner), **protection_marker(spec.lifecycle)}
    declared["metadata"] = {**metadata, **marker}
    return canonical(wire_kind(spec.kind), declared, server, stream_config=stream_config)


class DesiredConfigs:
    """:func:`desired_config` for the specs of one plan, a consumer's worked out once
    per shape: consumers that differ only in their names and in the fields taken
    verbatim (:data:`VERBATIM_FIELDS`; a filter, a description) get the same config but
    for those fields, which decide nothing else of it (``named_as_declared`` says why;
    tests/unit/test_normalize.py checks it). A plan creating 20,000 consumers declared
    alike works out one config and copies it, each copy given its names and verbatim
    fields as :func:`canonical` keeps a value (a container copied). Streams and buckets
    are worked out each time (their names decide more of their configs)."""

    __slots__ = ("_shapes",)

    #: The shapes kept at most (a plan with more distinct ones works the rest out again).
    KEPT = 4096

    def __init__(self) -> None:
        # each shape's config, and its fields holding a container (copied per consumer)
        self._shapes: dict[tuple[Any, ...], tuple[dict[str, Any], tuple[str, ...]]] = {}

    def of(
        self,
        spec: Spec,
        server: ServerInfo,
        *,
        stream_config: Mapping[str, Any] | None = None,
        owner: str = DEFAULT_OWNER,
    ) -> dict[str, Any]:
        """What ``desired_config`` gives for these arguments (a config of its own)."""
        if spec.kind != "Consumer":
            return desired_config(spec, server, stream_config=stream_config, owner=owner)
        config = spec.config
        shape = {k: v for k, v in config.items() if k not in _LEFT_TO_EACH}
        present = tuple(config.get(field) is not None for field in _CONSUMER_VERBATIM)
        try:
            data = _shape_json(shape, stream_config)
        except TypeError:  # a value JSON cannot hold
            data = b"null"
        if b"null" in data:  # NaN is written null too: worked out as it is, not kept
            return desired_config(spec, server, stream_config=stream_config, owner=owner)
        key = (server, owner, spec.lifecycle, present, data)
        known = self._shapes.get(key)
        if known is None:
            if len(self._shapes) >= self.KEPT:
                self._shapes.clear()
            made = desired_config(spec, server, stream_config=stream_config, owner=owner)
            nested = tuple(k for k, v in made.items() if isinstance(v, (dict, list)))
            self._shapes[key] = (json_copy(made), nested)
            return made
        template, nested = known
        out = dict(template)  # the plain values as they are, the containers copied:
        for field in nested:
            out[field] = json_copy(template[field])
        for field in CONSUMER_NAME_FIELDS:
            out[field] = spec.name
        for field in _CONSUMER_VERBATIM:
            value = config.get(field)
            if value is not None:
                out[field] = json_copy(value) if isinstance(value, (dict, list)) else value
        return out


def _shape_json(shape: Mapping[str, Any], stream_config: Mapping[str, Any] | None) -> bytes:
    """A consumer's shape and what it takes from its stream, as one key: their JSON,
    which tells apart every value a validated spec holds (JSON's own: ``1``, ``1.0`` and
    ``true`` too), but ``null`` (NaN and an infinity are written so). Keys in their
    order, not sorted: a config keeps its metadata's order, and two shapes holding the
    same metadata in other orders must not share one. ``TypeError``: a value JSON
    cannot hold."""
    return orjson.dumps([shape, inherited(stream_config or {})])


def live_config(
    kind: str,
    config: Mapping[str, Any],
    server: ServerInfo,
    *,
    stream_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The canonical form of a config exactly as ``server`` returned it."""
    return canonical(wire_kind(kind), config, server, stream_config=stream_config)


def preserved_fields(kind: str, config: Mapping[str, Any], server: ServerInfo) -> dict[str, Any]:
    """Fields of a live config the tables do not know: never diffed, sent back on update."""
    known = d.known_fields(wire_kind(kind), server)
    return {k: copy.deepcopy(v) for k, v in config.items() if k not in known}


def with_claim_kept(config: Mapping[str, Any], raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """``config`` (what an update or a replace sends) with the claim the live config
    ``raw`` holds (:data:`CLAIM_KEY`): never diffed, so the desired metadata lacks it,
    and an update replaces the whole metadata. ``config`` itself when there is none."""
    claim = (raw.get("metadata") or {}).get(CLAIM_KEY)
    if claim is None:
        return config
    return {**config, "metadata": {**(config.get("metadata") or {}), CLAIM_KEY: claim}}


def canonical(
    kind: str,
    config: Mapping[str, Any],
    server: ServerInfo,
    *,
    stream_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Fill defaults and apply the server's defaulting rules (``kind``: Stream or Consumer)."""
    out: dict[str, Any] = {}
    get = config.get
    for name, absent, mutable in _fill_table(kind, server):
        value = get(name)
        if value is None:
            if absent is d.OPTIONAL:
                continue
            out[name] = json_copy(absent) if mutable else absent
        elif isinstance(value, (dict, list)):
            out[name] = json_copy(value)
        else:
            out[name] = value
    out["metadata"] = {
        k: v for k, v in (out.get("metadata") or {}).items() if k not in UNDIFFED_METADATA
    }
    if kind == "Consumer":
        _consumer_rules(out, inherited(stream_config or {}))
    else:
        _stream_rules(out, server)
    return out


@functools.lru_cache(maxsize=64)
def _fill_table(kind: str, server: ServerInfo) -> tuple[tuple[str, Any, bool], ...]:
    """(field, value when absent, whether that value is a container to copy), in the
    field table's order: the loop of :func:`canonical`, precomputed per server."""
    return tuple(
        (name, entry.absent, isinstance(entry.absent, (dict, list)))
        for name, entry in d.known_fields(kind, server).items()
    )


def json_copy(value: Any) -> Any:
    """A deep copy of JSON-like data (dicts, lists, scalars): what ``copy.deepcopy``
    gives for it, several times faster (no memo, no dispatch on arbitrary types)."""
    if isinstance(value, dict):
        return {k: json_copy(v) if isinstance(v, (dict, list)) else v for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) if isinstance(v, (dict, list)) else v for v in value]
    return value


def _compact(value: Any) -> Any:
    """Nested objects as the server prints them: zero values (omitempty) left out."""
    if isinstance(value, dict):
        items = ((k, _compact(v)) for k, v in value.items())
        return {k: v for k, v in items if v not in (None, "", 0, False, [], {})}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def _stream_rules(out: dict[str, Any], server: ServerInfo) -> None:
    for limit in d.UNLIMITED_WHEN_ZERO:
        if out[limit] == 0 or out[limit] < -1:
            out[limit] = -1
    for key in (*_COMPACTED, "sources"):
        if key in out:
            out[key] = _compact(out[key])
    out["consumer_limits"] = out.get("consumer_limits") or {}
    for key in ("sources", "subjects", "placement", "subject_transform"):
        if key in out and not out[key]:
            del out[key]
    mirrored, sourced = "mirror" in out, "sources" in out
    if "subjects" not in out and not mirrored and not sourced:
        out["subjects"] = [out["name"]]
    skip_dedupe = sourced and server.version_tuple >= d.SOURCES_SKIP_DEDUPE_SINCE
    if out["duplicate_window"] == 0 and not mirrored and not skip_dedupe:
        out["duplicate_window"] = d.default_duplicate_window(out["max_age"])
    if mirrored and server.clustered and server.cluster_size is not None:
        # a clustered JetStream keeps no window on a mirror: dropped at its create and
        # at each update (2.12.8, 2.14.6, 2.15.1: docs/jetstream-notes.md); compared, a
        # standby's plan showed an update that apply made and the server dropped, forever.
        # Only a server advertising its cluster's members: a single server that names a
        # cluster (no routes) looks like a no_advertise cluster, keeps the window, and was
        # given none (this rule is what apply sends too)
        out["duplicate_window"] = 0
    if "republish" in out:
        republish = _compact(out["republish"])
        republish.setdefault("src", ">")
        out["republish"] = republish
    if out.get("persist_mode") == "":
        out["persist_mode"] = "default"
    _implied_flags(out)


def _implied_flags(out: dict[str, Any]) -> None:
    """Settings the server switches on by itself (outside its pedantic mode)."""
    if out.get("sealed"):  # a sealed stream takes no deletes, purges or new messages
        out["deny_delete"], out["deny_purge"], out["discard"] = True, True, "new"
    if out.get("subject_delete_marker_ttl", 0) > 0:
        out["allow_msg_ttl"] = True
    markers = out.get("subject_delete_marker_ttl", 0) > 0
    if (markers or out.get("allow_msg_schedules")) and not out["allow_rollup_hdrs"]:
        out["allow_rollup_hdrs"], out["deny_purge"] = True, False


def inherited(stream_config: Mapping[str, Any]) -> Mapping[str, Any]:
    """All that a consumer's canonical config takes from its stream's config: the
    stream's consumer limits (defaults for ``max_ack_pending`` and
    ``inactive_threshold``). Consumers of streams with the same limits normalise alike."""
    limits: Mapping[str, Any] = stream_config.get("consumer_limits") or {}
    return limits


def _consumer_rules(out: dict[str, Any], limits: Mapping[str, Any]) -> None:
    if out["max_deliver"] == 0 or out["max_deliver"] < -1:
        out["max_deliver"] = -1
    out["max_ack_pending"] = max(out["max_ack_pending"], -1)
    for key in ("max_waiting", "max_batch", "max_expires", "max_bytes", "idle_heartbeat"):
        out[key] = max(out[key], 0)
    out["inactive_threshold"] = max(out["inactive_threshold"], 0)
    out["name"] = out["name"] or out["durable_name"]
    out["sample_freq"] = _sample_frequency(out["sample_freq"])
    for key in ("backoff", "filter_subjects", "priority_groups"):
        if key in out and not out[key]:
            del out[key]
    for key in ("opt_start_time", "pause_until"):
        if key in out:
            out[key] = rfc3339_utc(out[key])
    _consumer_derived(out, limits)


def _sample_frequency(value: Any) -> Any:
    """``"0%"``, ``"0"`` and ``""`` all mean no sampling to the server (it reads the number
    before an optional ``%``), and ``"30"`` is ``"30%"``: one form each, so a config written
    either way (the Terraform provider sends ``"0%"``) plans no change."""
    text = str(value).strip() if isinstance(value, str) else None
    if text is None or not text.rstrip("%").strip().isdigit():
        return value  # something else: left for the server to judge
    number = int(text.rstrip("%"))
    return f"{number}%" if number else ""


def _consumer_derived(out: dict[str, Any], limits: Mapping[str, Any]) -> None:
    if out["deliver_subject"] == "" and out["max_waiting"] == 0:
        out["max_waiting"] = d.DEFAULT_MAX_WAITING
    if out["ack_wait"] == 0 and out["ack_policy"] in ("explicit", "all"):
        out["ack_wait"] = d.DEFAULT_ACK_WAIT
    if out.get("backoff"):
        out["ack_wait"] = out["backoff"][0]
    if out["max_ack_pending"] == 0:
        out["max_ack_pending"] = int(limits.get("max_ack_pending") or 0)
    if out["inactive_threshold"] == 0:
        out["inactive_threshold"] = int(limits.get("inactive_threshold") or 0)
    if out["max_ack_pending"] == 0 and out["ack_policy"] != "none":
        out["max_ack_pending"] = d.DEFAULT_MAX_ACK_PENDING
    if out.get("priority_policy") == "pinned_client" and out.get("priority_timeout") == 0:
        out["priority_timeout"] = d.DEFAULT_PINNED_TTL
    if out["ack_policy"] == "flow_control":
        out["flow_control"], out["idle_heartbeat"] = True, d.FLOW_CONTROL_HEARTBEAT


def parse_timestamp(value: str) -> tuple[datetime, str] | None:
    """An RFC 3339 time as (the UTC moment to the second, the fraction's digits); None
    if unreadable, or if its UTC moment is out of Python's years 1-9999 (an offset
    carries ``9999-12-31T23:00:00-14:00`` into year 10000)."""
    match = _TIMESTAMP.match(value.strip())
    if match is None:
        return None
    try:
        moment = datetime.fromisoformat(match["base"] + _zone(match["zone"])).astimezone(UTC)
    except (ValueError, OverflowError):
        return None
    return moment, (match["frac"] or "").rstrip("0")


def epoch_nanoseconds(value: object) -> int | None:
    """An RFC 3339 time (the server writes nanoseconds, with trailing zeros dropped) in
    nanoseconds since 1970, UTC; None if unreadable."""
    parsed = parse_timestamp(value) if isinstance(value, str) else None
    if parsed is None:
        return None
    moment, fraction = parsed
    return int(moment.timestamp()) * 10**9 + int(fraction.ljust(9, "0")[:9] or 0)


def nanoseconds_between(earlier: str, later: str) -> int | None:
    """``later - earlier`` in nanoseconds, for two RFC 3339 times (None if unreadable)."""
    start, end = epoch_nanoseconds(earlier), epoch_nanoseconds(later)
    if start is None or end is None:
        return None
    return end - start


def rfc3339_utc(value: Any) -> Any:
    """An RFC 3339 timestamp in UTC with trailing fraction zeros dropped (Go prints nanos)."""
    if not isinstance(value, str):
        return value
    parsed = parse_timestamp(value)
    if parsed is None:
        return value
    moment, frac = parsed
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{frac}Z" if frac else f"{text}Z"


def _zone(zone: str | None) -> str:
    if not zone or zone in ("Z", "z"):
        return "+00:00"
    return zone


def unsupported_fields(specs: Iterable[Spec], server: ServerInfo) -> list[Problem]:
    """Declared fields (or values) the connected server does not understand, one each.

    A field declared with its default value (a config copied from a newer server) is not a
    problem: it is simply not sent.
    """
    problems: list[Problem] = []
    # kind -> (fields, values) the server may not know; None when it knows them all
    tables: dict[str, tuple[Mapping[str, Any], Mapping[tuple[str, str], Any]] | None] = {}
    for spec in specs:
        if spec.kind not in tables:
            kind = wire_kind(spec.kind)
            fields, values = d.unknown_fields(kind, server), d.unknown_values(kind, server)
            tables[spec.kind] = (fields, values) if fields or values else None
        found = tables[spec.kind]
        if found is None:
            continue  # the server knows every field of this kind (the newest servers)
        fields, values = found
        is_bucket = spec.kind in BUCKET_KINDS
        for key, value in spec.config.items():
            entry = fields.get(BUCKET_FIELD_NEEDS.get(key, key) if is_bucket else key)
            if entry is not None and value != entry.absent:
                message = f"needs nats-server {entry.since_text} or newer"
            elif isinstance(value, str) and (newer := values.get((key, value))) is not None:
                message = f"{value!r} needs nats-server {newer.since_text} or newer"
            else:
                continue
            message += f" (connected: {server.version})"
            problems.append(Problem(spec.where(key), key, message))
    return problems


def replica_problems(
    specs: Iterable[Spec], server: ServerInfo, live: LiveState | None = None
) -> list[Problem]:
    """Replicas the connected server cannot hold, found before any change.

    More than one replica on a server that is not clustered is always an error (the
    stream would be created and its R3 consumer refused: a plan that never converges).
    On a cluster, a create or a change of replicas asking for more replicas than the
    servers the cluster advertises is an error too, with both numbers. A resource whose
    replicas stay as they are is not checked, so a node down for maintenance does not
    block unrelated changes; a cluster that advertises no servers is not checked.
    """
    problems = []
    for spec in specs:
        key = "replicas" if spec.kind in BUCKET_KINDS else "num_replicas"
        value = spec.config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 1:
            continue
        if not server.clustered:
            message = (
                f"{value} replicas need a JetStream cluster; nats-server {server.version} "
                "is not clustered (use 1, or an environment that is)"
            )
        elif server.cluster_size is not None and value > (size := _cluster_size(server, live)):
            if _live_replicas(spec, live) == value:
                continue
            message = (
                f"{value} replicas, but the cluster has {size} servers (as it advertises "
                "them to clients and names them in its streams); the server would refuse it"
            )
        else:
            continue
        problems.append(Problem(spec.where(key), key, message))
    return problems


def _cluster_size(server: ServerInfo, live: LiveState | None) -> int:
    """The servers known to be in the cluster: advertised ones, or more if streams name more.

    A server that is down drops out of what the cluster advertises, yet the cluster still
    counts it for placement (and streams still name it), so both are read.
    """
    return max(server.cluster_size or 0, len(live.peers) if live is not None else 0)


def _live_replicas(spec: Spec, live: LiveState | None) -> int | None:
    if live is None:
        return None
    if spec.kind == "Consumer":
        config = live.consumers.get((spec.stream_name, spec.name))
    else:
        config = live.streams.get(spec.stream_name)
    replicas = (config or {}).get("num_replicas")
    return replicas if isinstance(replicas, int) else None
