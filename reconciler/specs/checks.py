"""Cross-resource checks: what JSON Schema cannot see because it looks at one document.

Each check takes every validated spec and returns problems located at the offending
field: duplicate names, consumers of undeclared streams, overlapping stream subjects,
filters outside their stream, mirror together with subjects, source/mirror cycles,
push-only and pull-only fields on the wrong consumer type, ``max_deliver`` against the
backoff list, ``duplicate_window`` against ``max_age``, the work-queue rules, and a
consumer's ``max_ack_pending`` / ``inactive_threshold`` against its stream's
``consumer_limits`` (the server refuses the consumer, err 10121 / 10153, after the stream
was created: a half-applied plan).
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
    """Every cross-resource problem of a spec set.

    ``declared_streams`` names streams declared by documents that failed validation, so a
    consumer of such a stream is not reported a second time as naming an unknown stream.
    """
    checks: list[Callable[[list[Spec]], Iterable[Problem]]] = [
        tool_owned,
        duplicate_names,
        overlapping_subjects,
        mirror_problems,
        source_cycles,
        stream_limits,
        consumer_shape,
        consumer_start_and_filters,
        work_queue_rules,
        consumers_within_limits,
    ]
    problems = [p for check in checks for p in check(specs)]
    problems.extend(consumer_streams(specs, declared_streams=declared_streams))
    return problems


def tool_owned(specs: list[Spec]) -> Iterable[Problem]:
    """Streams the tool or the server keeps for itself (:func:`identity.is_reserved`: the
    apply lock's bucket, a backup's temporary mirror, the server's MQTT streams): no spec
    may declare, change or attach to one."""
    for spec in specs:
        if not is_reserved(spec.stream_name):
            continue
        what = "attach a consumer to" if spec.kind == "Consumer" else "declare"
        whose = (
            f"the apply lock's bucket ({LOCK_BUCKET}), kept by the tool itself"
            if spec.stream_name in INTERNAL_STREAMS
            else "a name the tool or the server keeps for its own streams"
        )
        yield Problem(
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


def duplicate_names(specs: list[Spec]) -> Iterable[Problem]:
    first: dict[tuple[str, str], Spec] = {}
    for spec in specs:
        identity = (
            (spec.kind, f"{spec.stream}/{spec.name}")
            if spec.ref.is_child
            else ("stream", spec.stream_name)
        )
        earlier = first.setdefault(identity, spec)
        if earlier is not spec:
            what = f"{spec.kind} {spec.name!r}"
            if earlier.kind == spec.kind:
                message = f"duplicate {what}: already declared at {earlier.source}"
            else:
                message = (
                    f"{what} uses stream {spec.stream_name!r}, already declared at "
                    f"{earlier.source} as {earlier.kind} {earlier.name!r}"
                )
            yield Problem(spec.where("name"), "name", message)


def consumer_streams(specs: list[Spec], *, declared_streams: Collection[str]) -> Iterable[Problem]:
    streams = stream_specs(specs)
    for spec in specs:
        if spec.kind != "Consumer" or spec.stream in streams or spec.stream in declared_streams:
            continue
        hint = did_you_mean(str(spec.stream), sorted({*streams, *declared_streams}))
        message = (
            f"stream {spec.stream!r} is not declared{hint}; add it, or declare it with "
            "`external: true` if it is managed elsewhere"
        )
        yield Problem(spec.where("stream"), "stream", message)
    for spec in specs:
        if spec.kind == "Consumer" and spec.stream in streams:
            yield from _filters_inside_stream(spec, streams[str(spec.stream)])


def _filters_inside_stream(consumer: Spec, stream: Spec) -> Iterable[Problem]:
    subjects = stream_subjects(stream)
    if not subjects or stream.config.get("subject_transform"):
        return
    for path, subject in consumer_filters(consumer):
        if not any(subjects_overlap(subject, s) for s in subjects):
            message = (
                f"filter {subject!r} matches none of the subjects of {stream.kind} "
                f"{stream.name!r} ({', '.join(subjects)})"
            )
            yield Problem(consumer.where(path), path, message)


def consumer_filters(consumer: Spec) -> list[tuple[str, str]]:
    """(field path, subject) of every filter subject of a consumer."""
    config = consumer.config
    filters = (
        [("filter_subject", str(config["filter_subject"]))] if config.get("filter_subject") else []
    )
    for index, subject in enumerate(config.get("filter_subjects") or []):
        filters.append((f"filter_subjects.{index}", str(subject)))
    return filters


def overlapping_subjects(specs: list[Spec]) -> Iterable[Problem]:
    tree: SubjectTree[Entry] = SubjectTree()
    entries = [
        (subject, spec, index)
        for spec in stream_specs(specs).values()
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


def mirror_problems(specs: list[Spec]) -> Iterable[Problem]:
    declared = stream_specs(specs)
    for spec in specs:
        if spec.kind != "Stream" or not spec.config.get("mirror"):
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


def _origins(spec: Spec) -> list[str]:
    """Names of the local streams a stream copies from (external ones excluded)."""
    config = spec.config
    entries: list[Mapping[str, Any]] = [config["mirror"]] if config.get("mirror") else []
    entries.extend(config.get("sources") or [])
    return [str(e["name"]) for e in entries if not e.get("external")]


def source_cycles(specs: list[Spec]) -> Iterable[Problem]:
    streams = {s.name: s for s in specs if s.kind == "Stream"}
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


def stream_limits(specs: list[Spec]) -> Iterable[Problem]:
    for spec in specs:
        if spec.kind != "Stream":
            continue
        max_age = int(spec.config.get("max_age") or 0)
        window = int(spec.config.get("duplicate_window") or 0)
        if max_age > 0 and window > max_age:
            message = "duplicate_window cannot be longer than max_age"
            yield Problem(spec.where("duplicate_window"), "duplicate_window", message)
        if spec.config.get("allow_rollup_hdrs") and spec.config.get("deny_purge"):
            message = "roll-ups purge messages: allow_rollup_hdrs needs deny_purge false"
            yield Problem(spec.where("allow_rollup_hdrs"), "allow_rollup_hdrs", message)


def consumer_shape(specs: list[Spec]) -> Iterable[Problem]:
    for spec in specs:
        if spec.kind != "Consumer":
            continue
        config = spec.config
        push = bool(config.get("deliver_subject"))
        wrong = PULL_ONLY if push else PUSH_ONLY
        mode = "push (it has deliver_subject)" if push else "pull (no deliver_subject)"
        for name in wrong:
            if config.get(name) not in (None, 0, False, [], "", "none"):
                message = f"not allowed on a {mode} consumer"
                yield Problem(spec.where(name), name, message)
        backoff = config.get("backoff") or []
        max_deliver = int(config.get("max_deliver") or -1)
        if backoff and 0 < max_deliver < len(backoff):
            message = (
                f"max_deliver ({max_deliver}) is smaller than the backoff list ({len(backoff)})"
            )
            yield Problem(spec.where("max_deliver"), "max_deliver", message)
        ack_wait = config.get("ack_wait")
        if backoff and ack_wait and ack_wait != backoff[0]:
            message = (
                "ignored: with backoff the server stores backoff[0] as ack_wait (planned so); "
                "drop ack_wait"
            )
            yield Problem(spec.where("ack_wait"), "ack_wait", message, warning=True)
        if config.get("flow_control") and not config.get("idle_heartbeat"):
            yield Problem(
                spec.where("flow_control"), "flow_control", "flow_control needs idle_heartbeat"
            )


_START_FIELDS = {"by_start_sequence": "opt_start_seq", "by_start_time": "opt_start_time"}


def consumer_start_and_filters(specs: list[Spec]) -> Iterable[Problem]:
    """Start position against deliver_policy, and the filter rules the server enforces."""
    for spec in specs:
        if spec.kind != "Consumer":
            continue
        config = spec.config
        policy = str(config.get("deliver_policy", "all"))
        for start_policy, start_field in _START_FIELDS.items():
            if policy == start_policy and not config.get(start_field):
                message = f"deliver_policy {policy} needs {start_field}"
                yield Problem(spec.where("deliver_policy"), "deliver_policy", message)
            if policy != start_policy and config.get(start_field):
                message = f"{start_field} only goes with deliver_policy {start_policy}"
                yield Problem(spec.where(start_field), start_field, message)
        filters = consumer_filters(spec)
        if policy == "last_per_subject" and not filters:
            message = "deliver_policy last_per_subject needs a filter subject"
            yield Problem(spec.where("deliver_policy"), "deliver_policy", message)
        if config.get("filter_subject") and config.get("filter_subjects"):
            message = "give either filter_subject or filter_subjects, not both"
            yield Problem(spec.where("filter_subjects"), "filter_subjects", message)
        for position, (path, subject) in enumerate(filters):
            for _, other in filters[position + 1 :]:
                if subjects_overlap(subject, other):
                    message = f"filter {subject!r} overlaps {other!r} of the same consumer"
                    yield Problem(spec.where(path), path, message)
        if config.get("priority_policy", "none") != "none" and not config.get("priority_groups"):
            message = "priority_policy needs priority_groups"
            yield Problem(spec.where("priority_policy"), "priority_policy", message)


def work_queue_rules(specs: list[Spec]) -> Iterable[Problem]:
    streams = stream_specs(specs)
    per_stream: dict[str, list[Spec]] = defaultdict(list)
    for spec in specs:
        stream = streams.get(str(spec.stream)) if spec.kind == "Consumer" else None
        if stream is not None and stream.config.get("retention") == "workqueue":
            per_stream[stream.name].append(spec)
    for consumers in per_stream.values():
        for spec in consumers:
            if spec.config.get("ack_policy") not in ("explicit", "flow_control"):
                message = "consumers of a workqueue stream need ack_policy: explicit"
                yield Problem(spec.where("ack_policy"), "ack_policy", message)
            if spec.config.get("deliver_policy", "all") != "all":
                message = "consumers of a workqueue stream need deliver_policy: all"
                yield Problem(spec.where("deliver_policy"), "deliver_policy", message)
        yield from _work_queue_partitions(consumers)


def _work_queue_partitions(consumers: list[Spec]) -> Iterable[Problem]:
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


def consumers_within_limits(specs: list[Spec]) -> Iterable[Problem]:
    """Consumers of a declared (not external) stream against its ``consumer_limits``."""
    streams = stream_specs(specs)
    for spec in specs:
        stream = streams.get(str(spec.stream)) if spec.kind == "Consumer" else None
        if stream is None or stream.external:
            continue
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
