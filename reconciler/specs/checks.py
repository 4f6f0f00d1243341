"""Cross-resource checks: what JSON Schema cannot see because it looks at one document.

One pass over the validated specs (:func:`cross_resource_problems`) runs each check on
each spec it concerns and returns problems located at the offending field: duplicate
names, consumers of undeclared streams, overlapping stream subjects, filters outside
their stream, mirror together with subjects, source/mirror cycles, push-only and
pull-only fields on the wrong consumer type, ``max_deliver`` against the backoff list,
``duplicate_window`` against ``max_age``, the work-queue rules, and a consumer's
``max_ack_pending`` / ``inactive_threshold`` against its stream's
``consumer_limits`` (the server refuses the consumer, err 10121 / 10153, after the stream
was created: a half-applied plan), and mirrors, sources and standbys of a stream whose
``consumer_limits`` set ``max_ack_pending`` (the server refuses their reading consumer).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Generic, TypeVar

from reconciler.errors import Problem
from reconciler.identity import (
    INTERNAL_STREAMS,
    LOCK_BUCKET,
    is_reserved,
    kv_subject,
    object_subjects,
)
from reconciler.specs.schema import did_you_mean
from reconciler.specs.spec import Spec
from reconciler.specs.subjects import subjects_overlap
from reconciler.specs.units import format_duration

PUSH_ONLY = ("deliver_group", "idle_heartbeat", "flow_control", "rate_limit_bps")
PULL_ONLY = (
    "max_waiting",
    "max_batch",
    "max_expires",
    "max_bytes",
    "priority_groups",
    "priority_policy",
    "priority_timeout",
)


def cross_resource_problems(
    specs: list[Spec], *, declared_streams: Collection[str] = ()
) -> list[Problem]:
    """Every cross-resource problem of a spec set, in one pass over the specs.

    ``declared_streams`` names streams declared by documents that failed validation, so a
    consumer of such a stream is not reported a second time as naming an unknown stream.
    Each rule below is one function of one spec (and what the pass gathered); the
    problems come out rule by rule, in the order of :data:`RULES`, each rule's in the
    order of the specs.
    """
    seen = _Pass(specs, declared_streams)
    for spec in specs:
        seen.add(spec)
    return seen.problems()


#: The rules, in the order their problems are said.
RULES = (
    "tool_owned",
    "duplicate_names",
    "overlapping_subjects",
    "mirror_problems",
    "unreadable_origins",
    "source_cycles",
    "stream_limits",
    "consumer_shape",
    "consumer_start_and_filters",
    "work_queue_rules",
    "consumers_within_limits",
    "consumer_streams",
    "filters_inside_stream",
)


class _Pass:
    """What one pass over the specs finds: each rule's problems (``found``), and what
    the rules over several specs need (streams, workqueue consumers by stream)."""

    def __init__(self, specs: list[Spec], declared_streams: Collection[str]) -> None:
        self.streams = stream_specs(specs)
        self.declared_streams = declared_streams
        self.found: dict[str, list[Problem]] = {rule: [] for rule in RULES}
        self.first: dict[tuple[str, str], Spec] = {}
        self.stream_list: list[Spec] = []
        self.work_queues: dict[str, list[Spec]] = defaultdict(list)
        self.reserved: dict[str, bool] = {}
        self.subjects: dict[str, list[str]] = {}  # stream name -> its subjects
        self.names: list[str] | None = None

    def add(self, spec: Spec) -> None:
        found = self.found
        name = spec.stream_name
        reserved = self.reserved.get(name)
        if reserved is None:
            reserved = self.reserved[name] = is_reserved(name)
        if reserved:
            found["tool_owned"].append(tool_owned(spec))
        duplicate = duplicate_name(spec, self.first)
        if duplicate is not None:
            found["duplicate_names"].append(duplicate)
        if spec.kind == "Stream":
            self.stream_list.append(spec)
            found["stream_limits"].extend(stream_limits(spec))
        elif spec.kind == "Consumer":
            self._consumer(spec)

    def _consumer(self, spec: Spec) -> None:
        found = self.found
        filters = consumer_filters(spec)
        found["consumer_shape"].extend(consumer_shape(spec))
        found["consumer_start_and_filters"].extend(consumer_start_and_filters(spec, filters))
        stream = self.streams.get(str(spec.stream))
        if stream is not None:
            if stream.config.get("retention") == "workqueue":
                self.work_queues[stream.name].append(spec)
            if not stream.external and stream.config.get("consumer_limits"):
                found["consumers_within_limits"].extend(consumer_within_limits(spec, stream))
        if spec.stream is None or stream is None:
            if spec.stream not in self.declared_streams:
                found["consumer_streams"].append(self._unknown_stream(spec))
            return
        subjects = self.subjects.get(stream.stream_name)
        if subjects is None:
            subjects = self.subjects[stream.stream_name] = _filtered_subjects(stream)
        if subjects:
            found["filters_inside_stream"].extend(
                filters_inside_stream(spec, filters, stream, subjects)
            )

    def _unknown_stream(self, spec: Spec) -> Problem:
        hint = did_you_mean(str(spec.stream), self._stream_names())
        message = (
            f"stream {spec.stream!r} is not declared{hint}; add it, or declare it with "
            "`external: true` if it is managed elsewhere"
        )
        return Problem(spec.where("stream"), "stream", message)

    def _stream_names(self) -> list[str]:
        """Every stream name declared (sorted once, for the hints)."""
        if self.names is None:
            self.names = sorted({*self.streams, *self.declared_streams})
        return self.names

    def problems(self) -> list[Problem]:
        found = self.found
        found["overlapping_subjects"].extend(overlapping_subjects(self.streams))
        found["mirror_problems"].extend(mirror_problems(self.stream_list, self.streams))
        found["unreadable_origins"].extend(unreadable_origins(self.stream_list, self.streams))
        found["source_cycles"].extend(source_cycles(self.stream_list))
        for consumers in self.work_queues.values():
            found["work_queue_rules"].extend(work_queue_rules(consumers))
        return [problem for rule in RULES for problem in found[rule]]


def tool_owned(spec: Spec) -> Problem:
    """A spec of a stream the tool or the server keeps for itself
    (:func:`identity.is_reserved`: the apply lock's bucket, a backup's temporary
    mirror, the server's MQTT streams): no spec may declare, change or attach to one."""
    what = "attach a consumer to" if spec.kind == "Consumer" else "declare"
    whose = (
        f"the apply lock's bucket ({LOCK_BUCKET}), kept by the tool itself"
        if spec.stream_name in INTERNAL_STREAMS
        else "a name the tool or the server keeps for its own streams"
    )
    return Problem(
        spec.where("name"), "name", f"{spec.stream_name} is {whose}: a spec cannot {what} it"
    )


def stream_specs(specs: Iterable[Spec]) -> dict[str, Spec]:
    """Streams, KeyValue and ObjectStore buckets by the JetStream stream name they use."""
    return {s.stream_name: s for s in specs if not s.ref.is_child}


def stream_subjects(spec: Spec) -> list[str]:
    """The subjects a stream (or bucket) listens on; [] for mirrors and pure sources."""
    if spec.kind == "KeyValue":
        return [kv_subject(spec.name)]
    if spec.kind == "ObjectStore":
        return object_subjects(spec.name)
    subjects = spec.config.get("subjects") or []
    if subjects:
        return [str(s) for s in subjects]
    if spec.config.get("mirror") or spec.config.get("sources") or spec.external:
        return []
    return [spec.name]


def duplicate_name(spec: Spec, first: dict[tuple[str, str], Spec]) -> Problem | None:
    """A spec declaring what one before it declared (``first``: each identity's first)."""
    identity = (
        (spec.kind, f"{spec.stream}/{spec.name}")
        if spec.ref.is_child
        else ("stream", spec.stream_name)
    )
    earlier = first.setdefault(identity, spec)
    if earlier is spec:
        return None
    what = f"{spec.kind} {spec.name!r}"
    if earlier.kind == spec.kind:
        message = f"duplicate {what}: already declared at {earlier.source}"
    else:
        message = (
            f"{what} uses stream {spec.stream_name!r}, already declared at "
            f"{earlier.source} as {earlier.kind} {earlier.name!r}"
        )
    return Problem(spec.where("name"), "name", message)


def _filtered_subjects(stream: Spec) -> list[str]:
    """The subjects a consumer's filters must fall in: none to check with a subject
    transform (or without subjects)."""
    return [] if stream.config.get("subject_transform") else stream_subjects(stream)


def filters_inside_stream(
    consumer: Spec, filters: list[tuple[str, str]], stream: Spec, subjects: list[str]
) -> list[Problem]:
    """Each of a consumer's ``filters`` (:func:`consumer_filters`) matching none of its
    stream's ``subjects``."""
    found = []
    for path, subject in filters:
        for listened in subjects:
            if subjects_overlap(subject, listened):
                break
        else:
            message = (
                f"filter {subject!r} matches none of the subjects of {stream.kind} "
                f"{stream.name!r} ({', '.join(subjects)})"
            )
            found.append(Problem(consumer.where(path), path, message))
    return found


def consumer_filters(consumer: Spec) -> list[tuple[str, str]]:
    """(field path, subject) of every filter subject of a consumer."""
    config = consumer.config
    filters = (
        [("filter_subject", str(config["filter_subject"]))] if config.get("filter_subject") else []
    )
    for index, subject in enumerate(config.get("filter_subjects") or []):
        filters.append((f"filter_subjects.{index}", str(subject)))
    return filters


def overlapping_subjects(streams: Mapping[str, Spec]) -> Iterable[Problem]:
    """Streams (by their stream name: :func:`stream_specs`) listening on overlapping
    subjects, each pair once."""
    tree: SubjectTree[Entry] = SubjectTree()
    entries = [
        (subject, spec, index)
        for spec in streams.values()
        for index, subject in enumerate(stream_subjects(spec))
    ]
    for entry in entries:
        tree.add(entry[0], entry)
    reported: set[frozenset[str]] = set()
    for subject, spec, index in entries:
        for other_subject, other, _ in tree.overlapping(subject):
            pair = frozenset((spec.stream_name, other.stream_name))
            if other is not spec and pair not in reported:
                reported.add(pair)
                yield _overlap_problem(spec, index, subject, other, other_subject)


Entry = tuple[str, Spec, int]
T = TypeVar("T")


class SubjectTree(Generic[T]):
    """Subjects by token, to find the overlapping ones without comparing every pair;
    each subject added with an entry of the caller's (what to report when it overlaps)."""

    def __init__(self) -> None:
        self.children: dict[str, SubjectTree[T]] = {}
        self.entries: list[T] = []

    def add(self, subject: str, entry: T) -> None:
        node = self
        for token in subject.split("."):
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = SubjectTree()
            node = child
        node.entries.append(entry)

    def overlapping(self, subject: str) -> list[T]:
        """Every entry whose subject overlaps ``subject`` (see ``subjects_overlap``)."""
        found: list[T] = []
        self._collect(subject.split("."), 0, found)
        return found

    def _collect(self, tokens: list[str], position: int, found: list[T]) -> None:
        if position == len(tokens):
            found.extend(self.entries)
            return
        token = tokens[position]
        if token == ">":
            for subtree in self.children.values():
                subtree._everything(found)
            return
        if ">" in self.children:
            found.extend(self.children[">"].entries)
        keys = self.children.keys() if token == "*" else (token, "*")
        for key in keys:
            child = self.children.get(key)
            if child is not None and key != ">":
                child._collect(tokens, position + 1, found)

    def _everything(self, found: list[T]) -> None:
        found.extend(self.entries)
        for child in self.children.values():
            child._everything(found)


def _overlap_problem(
    spec: Spec, index: int, subject: str, other: Spec, other_subject: str
) -> Problem:
    path = f"subjects.{index}" if spec.kind == "Stream" and spec.config.get("subjects") else "name"
    message = (
        f"subject {subject!r} overlaps {other_subject!r} of {other.kind} {other.name!r} "
        f"({other.source}); a message may only be stored by one stream"
    )
    return Problem(spec.where(path), path, message)


def mirror_problems(streams: list[Spec], declared: Mapping[str, Spec]) -> Iterable[Problem]:
    """Mirrors among ``streams`` (every Stream spec) with subjects or sources, or asking
    direct get of a ``declared`` origin that has none."""
    for spec in streams:
        if not spec.config.get("mirror"):
            continue
        if spec.config.get("subjects"):
            yield Problem(spec.where("subjects"), "subjects", "a mirror cannot have subjects")
        if spec.config.get("sources"):
            yield Problem(spec.where("sources"), "sources", "a mirror cannot also have sources")
        origin = declared.get(str(spec.config["mirror"].get("name")))
        if origin is not None and origin.kind == "Stream" and not origin.external:
            problem = mirror_direct_problem(spec, origin.config)
            if problem is not None:
                yield problem


def mirror_direct_problem(mirror: Spec, origin: Mapping[str, Any]) -> Problem | None:
    """``mirror_direct: true`` on a mirror of a stream without direct get: the server sets
    ``mirror_direct`` to the origin's ``allow_direct``, so the plan could never converge."""
    if not mirror.config.get("mirror_direct") or origin.get("allow_direct"):
        return None
    name = mirror.config["mirror"].get("name")
    message = (
        f"mirror_direct needs direct get on the origin, and stream {name} has allow_direct "
        "false (the server aligns mirror_direct to it): set allow_direct on the origin, or "
        "drop mirror_direct"
    )
    return Problem(mirror.where("mirror_direct"), "mirror_direct", message)


def unreadable_origins(streams: list[Spec], declared: Mapping[str, Spec]) -> Iterable[Problem]:
    """Mirrors and sources (and standbys: a mirror in another environment) of a stream
    whose ``consumer_limits`` set ``max_ack_pending``. A mirror or source reads its origin
    through a consumer the server makes with no acks, and the server refuses that
    consumer when the origin's limits give it a ``max_ack_pending`` (err 10082, every
    release of the matrix: docs/jetstream-notes.md): the stream is created, the copy
    never receives a message, and only its info's error says why."""
    for spec in streams:
        for origin_name in _origins(spec):
            origin = declared.get(origin_name)
            if origin is None or origin.kind != "Stream" or origin.external:
                continue  # one no spec manages: the plan judges it live (planning.live_checks)
            message = unreadable_origin(origin_name, origin.config, spec.name)
            if message:
                path = copy_path(spec.config)
                yield Problem(spec.where(path), path, message)
        if spec.standby is not None:
            where = f"the standby mirror in {spec.standby.environment}"
            message = unreadable_origin(spec.name, spec.config, where)
            if message:
                yield Problem(spec.where("standby"), "standby", message)


def copy_path(config: Mapping[str, Any]) -> str:
    """The field a stream copies another through: ``mirror`` or ``sources``."""
    return "mirror" if config.get("mirror") else "sources"


def unreadable_origin(origin: str, config: Mapping[str, Any], copy: str) -> str:
    """Why ``copy`` could never read stream ``origin`` (its ``config``, declared or live),
    or "": the server refuses the ack-less consumer a mirror or source reads with when
    the origin's ``consumer_limits`` set ``max_ack_pending`` (err 10082)."""
    limits = config.get("consumer_limits") or {}
    limit = limits.get("max_ack_pending") if isinstance(limits, Mapping) else None
    if not isinstance(limit, int) or limit <= 0:
        return ""
    return (
        f"stream {origin} sets consumer_limits.max_ack_pending ({limit}), and the server "
        f"refuses the consumer a mirror or source reads it with (err 10082): {copy} would "
        f"never receive a message; give {origin}'s consumers their max_ack_pending instead"
    )


def _origins(spec: Spec) -> list[str]:
    """Names of the local streams a stream copies from (external ones excluded)."""
    return origins_of(spec.config)


def origins_of(config: Mapping[str, Any]) -> list[str]:
    """Names of the local streams a stream config copies from (external ones excluded)."""
    entries: list[Mapping[str, Any]] = [config["mirror"]] if config.get("mirror") else []
    entries.extend(config.get("sources") or [])
    return [str(e["name"]) for e in entries if not e.get("external")]


def source_cycles(stream_list: list[Spec]) -> Iterable[Problem]:
    """Streams (every Stream spec) copying from each other in a cycle, each cycle once."""
    streams = {s.name: s for s in stream_list}
    graph = {name: [o for o in _origins(s) if o in streams] for name, s in streams.items()}
    reported: set[frozenset[str]] = set()
    for start in sorted(graph):
        cycle = _cycle_from(start, graph)
        if cycle and frozenset(cycle) not in reported:
            reported.add(frozenset(cycle))
            spec = streams[start]
            path = "mirror" if spec.config.get("mirror") else "sources"
            chain = " → ".join([*cycle, cycle[0]])
            yield Problem(spec.where(path), path, f"sources/mirrors form a cycle: {chain}")


def _cycle_from(start: str, graph: Mapping[str, list[str]]) -> list[str] | None:
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, trail = stack.pop()
        for origin in graph.get(node, []):
            if origin == start:
                return trail
            if origin not in seen:
                seen.add(origin)
                stack.append((origin, [*trail, origin]))
    return None


def stream_limits(spec: Spec) -> Iterable[Problem]:
    """A stream's ``duplicate_window`` against its ``max_age``, roll-ups against
    ``deny_purge``."""
    max_age = int(spec.config.get("max_age") or 0)
    window = int(spec.config.get("duplicate_window") or 0)
    if max_age > 0 and window > max_age:
        message = "duplicate_window cannot be longer than max_age"
        yield Problem(spec.where("duplicate_window"), "duplicate_window", message)
    if spec.config.get("allow_rollup_hdrs") and spec.config.get("deny_purge"):
        message = "roll-ups purge messages: allow_rollup_hdrs needs deny_purge false"
        yield Problem(spec.where("allow_rollup_hdrs"), "allow_rollup_hdrs", message)


def consumer_shape(spec: Spec) -> list[Problem]:
    """A consumer's push-only or pull-only fields on the wrong type, ``max_deliver``
    against its backoff list, ``ack_wait`` beside a backoff, flow control's heartbeat."""
    config = spec.config
    found: list[Problem] = []
    if config.keys().isdisjoint(_SHAPED):
        return found  # none of the fields below that can be wrong (most consumers)
    push = bool(config.get("deliver_subject"))
    wrong = PULL_ONLY if push else PUSH_ONLY
    if not config.keys().isdisjoint(wrong):
        mode = "push (it has deliver_subject)" if push else "pull (no deliver_subject)"
        for name in wrong:
            if config.get(name) not in (None, 0, False, [], "", "none"):
                message = f"not allowed on a {mode} consumer"
                found.append(Problem(spec.where(name), name, message))
    backoff = config.get("backoff") or []
    if backoff:
        max_deliver = int(config.get("max_deliver") or -1)
        if 0 < max_deliver < len(backoff):
            message = (
                f"max_deliver ({max_deliver}) is smaller than the backoff list ({len(backoff)})"
            )
            found.append(Problem(spec.where("max_deliver"), "max_deliver", message))
        ack_wait = config.get("ack_wait")
        if ack_wait and ack_wait != backoff[0]:
            message = (
                "ignored: with backoff the server stores backoff[0] as ack_wait (planned so); "
                "drop ack_wait"
            )
            found.append(Problem(spec.where("ack_wait"), "ack_wait", message, warning=True))
    if config.get("flow_control") and not config.get("idle_heartbeat"):
        message = "flow_control needs idle_heartbeat"
        found.append(Problem(spec.where("flow_control"), "flow_control", message))
    return found


#: The fields without which :func:`consumer_shape` finds nothing.
_SHAPED = frozenset({*PUSH_ONLY, *PULL_ONLY, "backoff", "flow_control"})

_START_FIELDS = {"by_start_sequence": "opt_start_seq", "by_start_time": "opt_start_time"}
#: The fields without which (and with one filter at most) the rules of
#: :func:`consumer_start_and_filters` find nothing.
_STARTED = frozenset(
    {"deliver_policy", *_START_FIELDS.values(), "filter_subjects", "priority_policy"}
)


def consumer_start_and_filters(spec: Spec, filters: list[tuple[str, str]]) -> list[Problem]:
    """A consumer's start position against its deliver_policy, and the filter rules the
    server enforces (``filters``: its :func:`consumer_filters`)."""
    config = spec.config
    found: list[Problem] = []
    if len(filters) < 2 and config.keys().isdisjoint(_STARTED):
        return found  # most consumers
    policy = str(config.get("deliver_policy", "all"))
    if policy in _START_FIELDS or not config.keys().isdisjoint(_START_FIELDS.values()):
        for start_policy, start_field in _START_FIELDS.items():
            if policy == start_policy and not config.get(start_field):
                message = f"deliver_policy {policy} needs {start_field}"
                found.append(Problem(spec.where("deliver_policy"), "deliver_policy", message))
            if policy != start_policy and config.get(start_field):
                message = f"{start_field} only goes with deliver_policy {start_policy}"
                found.append(Problem(spec.where(start_field), start_field, message))
    if policy == "last_per_subject" and not filters:
        message = "deliver_policy last_per_subject needs a filter subject"
        found.append(Problem(spec.where("deliver_policy"), "deliver_policy", message))
    if config.get("filter_subject") and config.get("filter_subjects"):
        message = "give either filter_subject or filter_subjects, not both"
        found.append(Problem(spec.where("filter_subjects"), "filter_subjects", message))
    for position, (path, subject) in enumerate(filters):
        for _, other in filters[position + 1 :]:
            if subjects_overlap(subject, other):
                message = f"filter {subject!r} overlaps {other!r} of the same consumer"
                found.append(Problem(spec.where(path), path, message))
    if config.get("priority_policy", "none") != "none" and not config.get("priority_groups"):
        message = "priority_policy needs priority_groups"
        found.append(Problem(spec.where("priority_policy"), "priority_policy", message))
    return found


def work_queue_rules(consumers: list[Spec]) -> Iterable[Problem]:
    """The consumers of one workqueue stream: acknowledged, delivering all, and (when
    there are several) each filtering its own subjects."""
    for spec in consumers:
        if spec.config.get("ack_policy") not in ("explicit", "flow_control"):
            message = "consumers of a workqueue stream need ack_policy: explicit"
            yield Problem(spec.where("ack_policy"), "ack_policy", message)
        if spec.config.get("deliver_policy", "all") != "all":
            message = "consumers of a workqueue stream need deliver_policy: all"
            yield Problem(spec.where("deliver_policy"), "deliver_policy", message)
    yield from work_queue_partitions(consumers)


def work_queue_partitions(consumers: list[Spec]) -> Iterable[Problem]:
    """The consumers of one workqueue stream that the server refuses side by side: when
    there are several, each needs a filter subject, none overlapping another's."""
    if len(consumers) < 2:
        return
    for position, spec in enumerate(consumers):
        filters = consumer_filters(spec)
        if not filters:
            message = "several consumers of a workqueue stream each need a filter subject"
            yield Problem(spec.source, "filter_subject", message)
            continue
        for other in consumers[position + 1 :]:
            for path, subject in filters:
                clash = [s for _, s in consumer_filters(other) if subjects_overlap(subject, s)]
                if clash:
                    message = (
                        f"filter {subject!r} overlaps {clash[0]!r} of consumer {other.name!r}: "
                        "workqueue consumers must not overlap"
                    )
                    yield Problem(spec.where(path), path, message)


def consumer_within_limits(spec: Spec, stream: Spec) -> Iterable[Problem]:
    """A consumer of a declared (not external) stream against its ``consumer_limits``."""
    for path, message in over_consumer_limits(spec.config, stream.config, stream.stream_name):
        yield Problem(spec.where(path), path, message)


def over_consumer_limits(
    consumer: Mapping[str, Any], stream: Mapping[str, Any], stream_name: str
) -> list[tuple[str, str]]:
    """(field, message) for each value of a consumer config above its stream's
    ``consumer_limits`` (:func:`limit_excess`): the server refuses such a consumer."""
    found = []
    for path, value, limit in limit_excess(consumer, stream):
        show = limit_text(path)
        message = (
            f"{show(value)} is above consumer_limits.{path} {show(limit)} of stream "
            f"{stream_name}: the server would refuse the consumer; set at most "
            f"{show(limit)}, or leave it out to get the limit"
        )
        found.append((path, message))
    return found


#: The consumer fields a stream's ``consumer_limits`` caps.
LIMITED_FIELDS = ("max_ack_pending", "inactive_threshold")


def limit_excess(
    consumer: Mapping[str, Any], stream: Mapping[str, Any]
) -> list[tuple[str, int, int]]:
    """(field, value, limit) for each value of a consumer config above its stream's
    ``consumer_limits``. The server refuses such a consumer (err 10121 max_ack_pending,
    10153 inactive_threshold), and a stream update that lowers a limit below a consumer's
    value (err 10069). Measured on 2.10-2.15: a value left out (or 0) gets the limit at
    create, and ``max_ack_pending: -1`` (no limit) is accepted and kept as -1."""
    limits: Mapping[str, Any] = stream.get("consumer_limits") or {}
    found = []
    for path in LIMITED_FIELDS:
        limit, value = int(limits.get(path) or 0), consumer.get(path)
        if limit > 0 and isinstance(value, int) and value > limit:
            found.append((path, value, limit))
    return found


def limit_text(path: str) -> Callable[[int], str]:
    """How a limited field's value reads (a count, or a duration)."""
    return str if path == "max_ack_pending" else format_duration
