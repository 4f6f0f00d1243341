"""Cross-resource checks and the wildcard-aware subject relations behind them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.errors import SpecError
from reconciler.identity import is_reserved
from reconciler.locations import Location
from reconciler.specs import checks
from reconciler.specs.checks import SubjectTree
from reconciler.specs.document import Document
from reconciler.specs.spec import Spec
from reconciler.specs.subjects import is_subset, is_valid_subject, subjects_overlap
from reconciler.specs.validate import load_specs, validate_documents


def docs(*bodies: dict[str, Any]) -> list[Document]:
    return [
        Document(
            body=body,
            source=Location("spec.yaml", 10 * index + 1),
            locations={key: Location("spec.yaml", 10 * index + 2) for key in body},
        )
        for index, body in enumerate(bodies)
    ]


def problems(*bodies: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        validate_documents(docs(*bodies))
    return [str(p) for p in caught.value.problems]


def stream(name: str, **config: Any) -> dict[str, Any]:
    return {"kind": "Stream", "name": name, **config}


def consumer(name: str, stream_name: str = "S", **config: Any) -> dict[str, Any]:
    return {"kind": "Consumer", "stream": stream_name, "name": name, **config}


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("orders.>", "orders.new", True),
        ("orders.*", "orders.new", True),
        ("orders.*", "orders.new.eu", False),
        ("orders.>", "orders", False),
        ("*.new", "orders.*", True),
        (">", "anything.at.all", True),
        ("a.b", "a.c", False),
        ("a.*.c", "a.b.*", True),
    ],
)
def test_subject_overlap_is_wildcard_aware(a: str, b: str, overlap: bool) -> None:
    assert subjects_overlap(a, b) is overlap
    assert subjects_overlap(b, a) is overlap


@pytest.mark.parametrize(
    ("inner", "outer", "subset"),
    [
        ("orders.new", "orders.>", True),
        ("orders.>", "orders.*", False),
        ("orders.*", "orders.>", True),
        ("orders.*.eu", "orders.>", True),
        ("orders.>", "orders.>", True),
        ("a.b", "a.*", True),
        ("a.*", "a.b", False),
    ],
)
def test_subset_means_every_match_is_covered(inner: str, outer: str, subset: bool) -> None:
    assert is_subset(inner, outer) is subset


@pytest.mark.parametrize("subject", ["a..b", ".a", "a.>.b", "a b", "a.b*", ""])
def test_malformed_subjects_are_invalid(subject: str) -> None:
    assert not is_valid_subject(subject)


def test_the_orders_scenario_passes_every_check() -> None:
    specs = validate_documents(
        docs(
            stream("ORDERS", subjects=["ORDERS.*"]),
            consumer("NEW", "ORDERS", filter_subject="ORDERS.received", ack_policy="explicit"),
            consumer("DISPATCH", "ORDERS", filter_subject="ORDERS.processed"),
            consumer("MONITOR", "ORDERS", deliver_subject="monitor.orders", idle_heartbeat="5s"),
        )
    )
    assert [s.name for s in specs] == ["ORDERS", "NEW", "DISPATCH", "MONITOR"]


def test_duplicate_names_per_kind_are_reported_at_the_second() -> None:
    found = problems(stream("S"), stream("S"), consumer("C"), consumer("C"))
    assert found == [
        "spec.yaml:12: name: duplicate Stream 'S': already declared at spec.yaml:1",
        "spec.yaml:32: name: duplicate Consumer 'C': already declared at spec.yaml:21",
    ]


def test_a_bucket_clashes_with_a_stream_of_its_stream_name() -> None:
    found = problems(stream("KV_config", subjects=["x"]), {"kind": "KeyValue", "name": "config"})
    assert found == [
        "spec.yaml:12: name: KeyValue 'config' uses stream 'KV_config', already declared at "
        "spec.yaml:1 as Stream 'KV_config'"
    ]


def test_a_consumer_of_an_undeclared_stream_is_reported() -> None:
    (found,) = problems(consumer("C", "MISSING"))
    assert found.startswith("spec.yaml:2: stream: stream 'MISSING' is not declared")
    assert "external: true" in found


def test_an_external_stream_satisfies_its_consumers() -> None:
    specs = validate_documents(docs(stream("S", external=True), consumer("C", "S")))
    assert specs[0].external


def test_consumers_of_bucket_streams_are_allowed() -> None:
    validate_documents(docs({"kind": "KeyValue", "name": "cfg"}, consumer("W", "KV_cfg")))


def test_overlapping_subjects_between_streams_are_reported_once() -> None:
    found = problems(stream("A", subjects=["orders.>"]), stream("B", subjects=["orders.new", "x"]))
    assert found == [
        "spec.yaml:2: subjects.0: subject 'orders.>' overlaps 'orders.new' of Stream 'B' "
        "(spec.yaml:11); a message may only be stored by one stream"
    ]


def test_a_stream_without_subjects_listens_on_its_name() -> None:
    found = problems(stream("orders"), stream("B", subjects=["*"]))
    assert len(found) == 1 and "overlaps" in found[0]


def test_a_stream_overlapping_a_bucket_is_reported() -> None:
    found = problems({"kind": "KeyValue", "name": "cfg"}, stream("ALL_KV", subjects=["$KV.>"]))
    assert len(found) == 1 and "'$KV.cfg.>' overlaps '$KV.>' of Stream 'ALL_KV'" in found[0]


def test_a_filter_outside_the_stream_subjects_is_reported() -> None:
    found = problems(
        stream("S", subjects=["orders.*"]),
        consumer("C", filter_subjects=["orders.new", "invoices.>"]),
    )
    assert found == [
        "spec.yaml:12: filter_subjects.1: filter 'invoices.>' matches none of the subjects of "
        "Stream 'S' (orders.*)"
    ]


def test_a_mirror_cannot_have_subjects() -> None:
    found = problems(stream("A"), stream("M", mirror={"name": "A"}, subjects=["m.>"]))
    assert found == ["spec.yaml:12: subjects: a mirror cannot have subjects"]


def test_source_cycles_are_reported() -> None:
    found = problems(
        stream("A", sources=[{"name": "C"}], subjects=["a"]),
        stream("B", sources=[{"name": "A"}], subjects=["b"]),
        stream("C", mirror={"name": "B"}),
    )
    assert found == ["spec.yaml:2: sources: sources/mirrors form a cycle: A → C → B → A"]


def test_an_external_source_is_not_part_of_a_cycle() -> None:
    external = {"name": "A", "external": {"api": "$JS.hub.API"}}
    validate_documents(docs(stream("A", sources=[external], subjects=["a"])))


def test_push_only_fields_on_a_pull_consumer_are_reported() -> None:
    found = problems(stream("S"), consumer("C", idle_heartbeat="5s", deliver_group="g"))
    assert found == [
        "spec.yaml:12: deliver_group: not allowed on a pull (no deliver_subject) consumer",
        "spec.yaml:12: idle_heartbeat: not allowed on a pull (no deliver_subject) consumer",
    ]


def test_pull_only_fields_on_a_push_consumer_are_reported() -> None:
    found = problems(stream("S"), consumer("C", deliver_subject="out", max_waiting=10))
    assert found == [
        "spec.yaml:12: max_waiting: not allowed on a push (it has deliver_subject) consumer"
    ]


def test_max_deliver_smaller_than_the_backoff_list_is_reported() -> None:
    found = problems(stream("S"), consumer("C", max_deliver=2, backoff=["1s", "2s", "3s"]))
    assert found == [
        "spec.yaml:12: max_deliver: max_deliver (2) is smaller than the backoff list (3)"
    ]


def test_ack_wait_differing_from_the_first_backoff_is_a_warning() -> None:
    warnings: list[Any] = []
    validate_documents(
        docs(stream("S"), consumer("C", ack_wait="30s", backoff=["1s", "5s"])), warnings=warnings
    )
    found = [str(w) for w in warnings]
    assert found == [
        "spec.yaml:12: warning: ack_wait: ignored: with backoff the server stores backoff[0] "
        "as ack_wait (planned so); drop ack_wait"
    ]


def test_roll_ups_on_a_stream_that_denies_purges_are_reported() -> None:
    found = problems(stream("S", allow_rollup_hdrs=True, deny_purge=True))
    assert found == [
        "spec.yaml:2: allow_rollup_hdrs: roll-ups purge messages: "
        "allow_rollup_hdrs needs deny_purge false"
    ]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"deliver_policy": "by_start_sequence"},
            "deliver_policy: deliver_policy by_start_sequence needs opt_start_seq",
        ),
        ({"deliver_policy": "by_start_time"}, "needs opt_start_time"),
        (
            {"deliver_policy": "new", "opt_start_seq": 5},
            "opt_start_seq only goes with deliver_policy by_start_sequence",
        ),
        ({"deliver_policy": "last_per_subject"}, "last_per_subject needs a filter subject"),
        (
            {"filter_subject": "a", "filter_subjects": ["b"]},
            "either filter_subject or filter_subjects",
        ),
        ({"filter_subjects": ["a.>", "a.b"]}, "filter 'a.>' overlaps 'a.b' of the same consumer"),
        ({"priority_policy": "overflow"}, "priority_policy needs priority_groups"),
    ],
)
def test_start_position_filter_and_priority_rules(config: dict[str, Any], message: str) -> None:
    found = problems(stream("S", subjects=[">"]), consumer("C", **config))
    assert len(found) == 1 and message in found[0], found


def test_work_queue_consumers_deliver_everything() -> None:
    found = problems(
        stream("Q", retention="workqueue"),
        consumer("A", "Q", ack_policy="explicit", deliver_policy="new"),
    )
    assert found == [
        "spec.yaml:12: deliver_policy: consumers of a workqueue stream need deliver_policy: all"
    ]


def test_duplicate_window_longer_than_max_age_is_reported() -> None:
    found = problems(stream("S", max_age="1m", duplicate_window="2m"))
    assert found == [
        "spec.yaml:2: duplicate_window: duplicate_window cannot be longer than max_age"
    ]


def test_work_queue_consumers_need_explicit_ack_and_disjoint_filters() -> None:
    found = problems(
        stream("Q", subjects=["jobs.>"], retention="workqueue"),
        consumer("A", "Q", ack_policy="explicit", filter_subject="jobs.>"),
        consumer("B", "Q", ack_policy="none", filter_subject="jobs.email"),
    )
    assert found == [
        "spec.yaml:12: filter_subject: filter 'jobs.>' overlaps 'jobs.email' of consumer 'B': "
        "workqueue consumers must not overlap",
        "spec.yaml:22: ack_policy: consumers of a workqueue stream need ack_policy: explicit",
    ]


def test_a_consumer_of_an_invalid_stream_is_not_also_called_undeclared() -> None:
    found = problems(stream("S", max_age="forever"), consumer("C", "S"))
    assert len(found) == 1 and "max_age" in found[0]


TOKENS = st.sampled_from(["a", "b", "*", ">"])


@st.composite
def subjects(draw: st.DrawFn) -> str:
    tokens = draw(st.lists(TOKENS, min_size=1, max_size=4))
    cut = tokens.index(">") + 1 if ">" in tokens else len(tokens)
    return ".".join(tokens[:cut])


@given(st.lists(subjects(), min_size=1, max_size=8), subjects())
def test_the_subject_tree_finds_exactly_the_overlapping_subjects(
    stored: list[str], query: str
) -> None:
    tree = SubjectTree()
    for index, subject in enumerate(stored):
        tree.add(subject, (subject, None, index))  # type: ignore[arg-type]
    found = sorted(entry[2] for entry in tree.overlapping(query))
    expected = [i for i, subject in enumerate(stored) if subjects_overlap(query, subject)]
    assert found == expected


@pytest.mark.parametrize(
    "document",
    [
        "kind: KeyValue\nname: RECONCILE_LOCKS\nhistory: 5\n",
        "kind: Stream\nname: KV_RECONCILE_LOCKS\nsubjects: ['x.>']\n",
        "kind: Consumer\nstream: KV_RECONCILE_LOCKS\nname: peek\nack_policy: none\n",
    ],
)
def test_the_apply_lock_bucket_cannot_be_declared_changed_or_attached_to(
    document: str, tmp_path: Path
) -> None:
    path = tmp_path / "lock.yaml"
    path.write_text(document)
    with pytest.raises(SpecError) as refused:
        load_specs([path])
    assert any("apply lock's bucket" in p.message for p in refused.value.problems)


@pytest.mark.parametrize(
    "document",
    [
        "kind: Stream\nname: RECONCILE_BACKUP_ORDERS\nsubjects: ['x.>']\n",
        "kind: Consumer\nstream: RECONCILE_BACKUP_ORDERS\nname: peek\nack_policy: none\n",
        "kind: Stream\nname: $MQTT_msgs\nsubjects: ['m.>']\n",
    ],
    ids=["backup-mirror", "consumer-on-backup-mirror", "mqtt"],
)
def test_streams_the_tool_or_the_server_keeps_cannot_be_declared(
    document: str, tmp_path: Path
) -> None:
    path = tmp_path / "reserved.yaml"
    path.write_text(document)
    with pytest.raises(SpecError) as refused:
        load_specs([path])
    assert any("keeps for its own streams" in p.message for p in refused.value.problems)


def test_a_consumer_naming_an_unknown_stream_gets_a_did_you_mean() -> None:
    found = problems(stream("ORDERS"), consumer("C", stream="ORDRS"))
    assert any("stream 'ORDRS' is not declared (did you mean 'ORDERS'?)" in p for p in found)


_SUBJECTS = st.sampled_from(
    ["a", "a.>", "a.b", "a.*", "a.b.c", "*.b", ">", "b.>", "b", "S", "a.", "a..b", "$KV.x.>"]
)
_STREAM_NAMES = st.sampled_from(["S", "T", "U", "KV_x", "OBJ_o", "KV_reconcile-lock", "None"])


@st.composite
def _spec_sets(draw: st.DrawFn) -> tuple[list[Spec], set[str]]:
    """Specs (in wire units, as validation leaves them) that trip the checks together:
    shared names and subjects, mirrors, cycles, workqueues, limits, reserved names."""
    specs: list[Spec] = []
    for index in range(draw(st.integers(min_value=0, max_value=9))):
        source = Location("s.yaml", 10 * index + 1)
        lines = {f: Location("s.yaml", 10 * index + 2) for f in ["name", "stream", "subjects"]}
        kind = draw(st.sampled_from(["Stream", "Stream", "Consumer", "Consumer", "KeyValue"]))
        config: dict[str, Any] = {}
        optional = {
            "subjects": st.lists(_SUBJECTS, max_size=3),
            "mirror": st.fixed_dictionaries({"name": _STREAM_NAMES}),
            "sources": st.lists(st.fixed_dictionaries({"name": _STREAM_NAMES}), max_size=2),
            "retention": st.sampled_from(["limits", "workqueue"]),
            "consumer_limits": st.fixed_dictionaries(
                {"max_ack_pending": st.integers(0, 3), "inactive_threshold": st.integers(0, 3)}
            ),
            "max_age": st.integers(0, 3),
            "duplicate_window": st.integers(0, 3),
            "allow_rollup_hdrs": st.booleans(),
            "deny_purge": st.booleans(),
            "subject_transform": st.just({"src": "a", "dest": "b"}),
            "allow_direct": st.booleans(),
            "mirror_direct": st.booleans(),
        }
        if kind == "Consumer":
            optional = {
                "filter_subject": _SUBJECTS,
                "filter_subjects": st.lists(_SUBJECTS, max_size=3),
                "deliver_policy": st.sampled_from(
                    ["all", "last_per_subject", "by_start_sequence", "by_start_time", "new"]
                ),
                "opt_start_seq": st.integers(0, 2),
                "opt_start_time": st.just("2024-01-01T00:00:00Z"),
                "deliver_subject": st.sampled_from(["", "d"]),
                "max_waiting": st.integers(0, 2),
                "idle_heartbeat": st.integers(0, 2),
                "flow_control": st.booleans(),
                "backoff": st.lists(st.integers(1, 3), max_size=3),
                "max_deliver": st.integers(-1, 3),
                "ack_wait": st.integers(0, 3),
                "priority_policy": st.sampled_from(["none", "pinned_client"]),
                "ack_policy": st.sampled_from(["explicit", "none", "all"]),
                "max_ack_pending": st.integers(-1, 5),
                "inactive_threshold": st.integers(0, 5),
            }
        for field, values in optional.items():
            if draw(st.integers(0, 3)) == 0:
                config[field] = draw(values)
        name = draw(st.sampled_from(["S", "T", "C", "x", "reconcile-lock"]))
        stream = draw(_STREAM_NAMES) if kind == "Consumer" else None
        external = kind == "Stream" and draw(st.booleans())
        specs.append(
            Spec(kind, name, config, source, stream=stream, external=external, locations=lines)
        )
    return specs, set(draw(st.lists(_STREAM_NAMES, max_size=2)))


def _rule_by_rule(specs: list[Spec], declared: set[str]) -> list[str]:
    """The checks as one pass over the specs per rule (the order the problems are said
    in: rule by rule, each rule's in the order of the specs)."""
    streams = checks.stream_specs(specs)
    stream_list = [s for s in specs if s.kind == "Stream"]
    consumers = [s for s in specs if s.kind == "Consumer"]
    first: dict[Any, Spec] = {}
    found: list[Any] = [checks.tool_owned(s) for s in specs if is_reserved(s.stream_name)]
    found += [p for s in specs if (p := checks.duplicate_name(s, first)) is not None]
    found += checks.overlapping_subjects(streams)
    found += checks.mirror_problems(stream_list, streams)
    found += checks.unreadable_origins(stream_list, streams)
    found += checks.source_cycles(stream_list)
    found += [p for s in stream_list for p in checks.stream_limits(s)]
    found += [p for s in consumers for p in checks.consumer_shape(s)]
    found += [
        p
        for s in consumers
        for p in checks.consumer_start_and_filters(s, checks.consumer_filters(s))
    ]
    queues: dict[str, list[Spec]] = {}
    for s in consumers:
        if (of := streams.get(str(s.stream))) and of.config.get("retention") == "workqueue":
            queues.setdefault(of.name, []).append(s)
    found += [p for queue in queues.values() for p in checks.work_queue_rules(queue)]
    for s in consumers:
        if (of := streams.get(str(s.stream))) is not None and not of.external:
            found += checks.consumer_within_limits(s, of)
    said = [str(p) for p in found]
    unknown = [s for s in consumers if s.stream not in streams and s.stream not in declared]
    said += [f"{s.where('stream')}: stream: stream {s.stream!r} is not declared" for s in unknown]
    for s in consumers:
        if s.stream in streams and (subjects := checks._filtered_subjects(streams[s.stream])):
            inside = checks.filters_inside_stream(
                s, checks.consumer_filters(s), streams[s.stream], subjects
            )
            said += [str(p) for p in inside]
    return said


@settings(max_examples=600, deadline=None)
@given(_spec_sets())
def test_the_one_pass_says_what_each_rule_says_over_every_spec(
    specs_declared: tuple[list[Spec], set[str]],
) -> None:
    """The checks run in one pass over the specs: the problems are those of each rule
    run over every spec, in the same order."""
    specs, declared = specs_declared
    said = [str(p) for p in checks.cross_resource_problems(specs, declared_streams=declared)]
    unknown_hint = re.compile(r"(is not declared).*")
    assert [unknown_hint.sub(r"\1", p) for p in said] == _rule_by_rule(specs, declared)


@given(_SUBJECTS, _SUBJECTS)
def test_subjects_overlap_as_their_tokens_do(first: str, second: str) -> None:
    """The quick answers (the same subject, ``P.>`` over ``P.`` and more) are the token
    walk's: every pair of the corpus, both ways."""
    tokens_a, tokens_b = first.split("."), second.split(".")
    walked = len(tokens_a) == len(tokens_b)
    for ta, tb in zip(tokens_a, tokens_b, strict=False):
        if ta == ">" or tb == ">":
            walked = True
            break
        if ta not in (tb, "*") and tb != "*":
            walked = False
            break
    assert subjects_overlap(first, second) is walked


LIMITED = {"consumer_limits": {"max_ack_pending": 54}, "subjects": ["s1.>"]}


@pytest.mark.parametrize(
    ("copy", "path"),
    [
        (stream("COPY", mirror={"name": "S1"}), "mirror"),
        (stream("COPY", subjects=["c.>"], sources=[{"name": "X"}, {"name": "S1"}]), "sources"),
    ],
)
def test_a_mirror_or_source_of_a_stream_limiting_max_ack_pending_is_refused(
    copy: dict[str, Any], path: str
) -> None:
    """The server refuses the consumer a mirror or source reads with (err 10082): the
    copy would never receive a message (tests/integration/test_jetstream_facts.py)."""
    found = problems(stream("S1", **LIMITED), stream("X", subjects=["x.>"]), copy)
    assert len(found) == 1
    assert found[0].startswith(f"spec.yaml:22: {path}: stream S1 sets consumer_limits.max_ack")
    assert "COPY would never receive a message" in found[0]


def test_a_standby_of_a_stream_limiting_max_ack_pending_is_refused() -> None:
    standby = {"primary": "east", "environment": "west"}
    (found,) = problems(stream("S1", standby=standby, **LIMITED))
    assert found.startswith("spec.yaml:2: standby: stream S1 sets consumer_limits.max_ack")
    assert "the standby mirror in west would never receive a message" in found


def test_a_counter_stream_cannot_declare_a_standby() -> None:
    """The server refuses a mirror that counts (err 10173) and an update making a stream
    count (10052): the standby could never be made, nor promoted into a counter."""
    standby = {"primary": "east", "environment": "west"}
    (found,) = problems(stream("S1", subjects=["s1.>"], allow_msg_counter=True, standby=standby))
    assert found.startswith("spec.yaml:2: standby: a counter stream (allow_msg_counter)")


@pytest.mark.parametrize(
    "limits",
    [{"inactive_threshold": 3_600_000_000_000}, {"max_ack_pending": 0}, {"max_ack_pending": -1}],
)
def test_other_consumer_limits_leave_mirrors_alone(limits: dict[str, Any]) -> None:
    specs = validate_documents(
        docs(
            stream("S1", subjects=["s1.>"], consumer_limits=limits),
            stream("MIR", mirror={"name": "S1"}),
            stream(
                "S2",
                subjects=["s2.>"],
                consumer_limits=limits,
                standby={"primary": "east", "environment": "west"},
            ),
        )
    )
    assert [spec.name for spec in specs] == ["S1", "MIR", "S2"]


def test_an_external_origin_limiting_max_ack_pending_is_not_judged_here() -> None:
    """Managed elsewhere: its limits here are only what the spec says of it."""
    specs = validate_documents(
        docs(stream("S1", external=True, **LIMITED), stream("MIR", mirror={"name": "S1"}))
    )
    assert len(specs) == 2
