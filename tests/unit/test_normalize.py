"""Normalisation: both sides in one canonical form, on every supported server version."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.locations import Location
from reconciler.model.buckets import bucket_config, classify_stream, kv_stream_config
from reconciler.model.normalize import (
    CONSUMER_NAME_FIELDS,
    STREAM_NAME_FIELDS,
    VERBATIM_FIELDS,
    DesiredConfigs,
    desired_config,
    epoch_nanoseconds,
    inherited,
    live_config,
    nanoseconds_between,
    preserved_fields,
    replica_problems,
    rfc3339_utc,
    unsupported_fields,
)
from reconciler.model.state import LiveState, ServerInfo
from reconciler.specs.lifecycle import MANAGE, Lifecycle
from reconciler.specs.spec import MANAGED_KEY, MANAGED_VALUE, Kind, Spec

V210 = ServerInfo(version="2.10.26", api_level=0)
V211 = ServerInfo(version="2.11.11", api_level=1)
V212 = ServerInfo(version="2.12.8", api_level=3)
V214 = ServerInfo(version="2.14.5", api_level=4)
SECOND = 1_000_000_000
MARKER = {MANAGED_KEY: MANAGED_VALUE}


def spec(kind: Kind, name: str, stream: str | None = None, **config: Any) -> Spec:
    locations = {key: Location("s.yaml", 10 + i) for i, key in enumerate(config)}
    return Spec(kind, name, config, Location("s.yaml", 1), stream=stream, locations=locations)


# What nats-server 2.10.26 answered for `{"name": "S1"}` (recorded from a live server).
LIVE_210_MINIMAL = {
    "allow_direct": False,
    "allow_rollup_hdrs": False,
    "compression": "none",
    "consumer_limits": {},
    "deny_delete": False,
    "deny_purge": False,
    "discard": "old",
    "duplicate_window": 120000000000,
    "max_age": 0,
    "max_bytes": -1,
    "max_consumers": -1,
    "max_msg_size": -1,
    "max_msgs": -1,
    "max_msgs_per_subject": -1,
    "mirror_direct": False,
    "name": "S1",
    "num_replicas": 1,
    "retention": "limits",
    "sealed": False,
    "storage": "file",
    "subjects": ["S1"],
}


def test_minimal_stream_gets_every_server_default_and_the_marker() -> None:
    desired = desired_config(spec("Stream", "S1"), V210)
    assert desired == {**LIVE_210_MINIMAL, **_zero_210_stream(), "metadata": MARKER}


def _zero_210_stream() -> dict[str, Any]:
    return {"description": "", "no_ack": False, "first_seq": 0, "discard_new_per_subject": False}


def test_live_answer_of_an_old_server_is_filled_to_the_same_form() -> None:
    live = {**LIVE_210_MINIMAL, "metadata": MARKER}
    assert live_config("Stream", live, V210) == desired_config(spec("Stream", "S1"), V210)


def test_fields_a_server_does_not_know_are_neither_filled_nor_sent() -> None:
    old = desired_config(spec("Stream", "S1"), V210)
    new = desired_config(spec("Stream", "S1"), V212)
    assert "allow_msg_ttl" not in old and "persist_mode" not in old
    assert new["allow_msg_ttl"] is False and new["persist_mode"] == "default"
    assert "allow_batched" not in new
    assert desired_config(spec("Stream", "S1"), V214)["allow_batched"] is False


def test_server_owned_metadata_keys_are_dropped_and_others_kept() -> None:
    live = {
        **LIVE_210_MINIMAL,
        "metadata": {"_nats.ver": "2.12.8", "_nats.level": "3", "_nats.req.level": "0", "a": "b"},
    }
    assert live_config("Stream", live, V212)["metadata"] == {"a": "b"}


def test_duplicate_window_follows_a_shorter_max_age() -> None:
    desired = desired_config(spec("Stream", "S", max_age=30 * SECOND), V212)
    assert desired["duplicate_window"] == 30 * SECOND
    longer = desired_config(spec("Stream", "S", max_age=3600 * SECOND), V212)
    assert longer["duplicate_window"] == 120 * SECOND


def test_mirror_gets_no_subjects_and_no_duplicate_window() -> None:
    desired = desired_config(spec("Stream", "M", mirror={"name": "S"}), V212)
    assert "subjects" not in desired
    assert desired["duplicate_window"] == 0


def test_sourced_stream_gets_a_duplicate_window_only_before_2_14() -> None:
    sourced = spec("Stream", "A", sources=[{"name": "S", "filter_subject": ""}])
    assert desired_config(sourced, V212)["duplicate_window"] == 120 * SECOND
    assert desired_config(sourced, V214)["duplicate_window"] == 0
    assert desired_config(sourced, V214)["sources"] == [{"name": "S"}]


def test_zero_and_below_minus_one_limits_mean_unlimited_on_both_sides() -> None:
    desired = desired_config(spec("Stream", "S1", max_bytes=0, max_msgs=-5), V210)
    assert desired["max_bytes"] == -1 and desired["max_msgs"] == -1
    live = {**LIVE_210_MINIMAL, "max_msgs": -5, "metadata": MARKER}
    assert live_config("Stream", live, V210)["max_msgs"] == -1


def test_republish_source_defaults_to_everything() -> None:
    desired = desired_config(spec("Stream", "S", republish={"dest": "copy.>"}), V212)
    assert desired["republish"] == {"dest": "copy.>", "src": ">"}


def test_delete_markers_switch_on_message_ttls_and_rollups() -> None:
    desired = desired_config(spec("Stream", "S", subject_delete_marker_ttl=5 * SECOND), V211)
    assert desired["allow_msg_ttl"] is True and desired["allow_rollup_hdrs"] is True


def test_explicit_pull_consumer_gets_ack_wait_max_ack_pending_and_max_waiting() -> None:
    desired = desired_config(spec("Consumer", "C", "S", ack_policy="explicit"), V212)
    assert desired["ack_wait"] == 30 * SECOND
    assert desired["max_ack_pending"] == 1000
    assert desired["max_waiting"] == 512
    assert desired["name"] == desired["durable_name"] == "C"
    assert desired["num_replicas"] == 0 and desired["max_deliver"] == -1


def test_consumer_without_ack_policy_gets_the_server_default_none() -> None:
    desired = desired_config(spec("Consumer", "C", "S"), V212)
    assert desired["ack_policy"] == "none"
    assert desired["ack_wait"] == 0 and desired["max_ack_pending"] == 0


def test_push_consumer_has_no_max_waiting() -> None:
    push = spec("Consumer", "C", "S", deliver_subject="out", ack_policy="explicit")
    assert desired_config(push, V212)["max_waiting"] == 0


def test_backoff_sets_ack_wait_to_its_first_step() -> None:
    retry = spec("Consumer", "C", "S", ack_policy="explicit", backoff=[2 * SECOND, 5 * SECOND])
    assert desired_config(retry, V212)["ack_wait"] == 2 * SECOND


def test_consumer_inherits_the_stream_consumer_limits() -> None:
    stream = {"consumer_limits": {"max_ack_pending": 50, "inactive_threshold": 5 * SECOND}}
    desired = desired_config(
        spec("Consumer", "C", "S", ack_policy="explicit"), V212, stream_config=stream
    )
    assert desired["max_ack_pending"] == 50
    assert desired["inactive_threshold"] == 5 * SECOND


def test_consumer_fields_of_2_11_appear_from_2_11() -> None:
    assert "priority_policy" not in desired_config(spec("Consumer", "C", "S"), V210)
    assert desired_config(spec("Consumer", "C", "S"), V211)["priority_policy"] == "none"
    pinned = spec("Consumer", "C", "S", priority_policy="pinned_client", priority_groups=["g"])
    assert desired_config(pinned, V211)["priority_timeout"] == 120 * SECOND


def test_timestamps_compare_in_utc_whatever_their_spelling() -> None:
    assert rfc3339_utc("2024-01-02T03:04:05.500+01:00") == "2024-01-02T02:04:05.5Z"
    assert rfc3339_utc("2024-01-02T02:04:05.500000000Z") == "2024-01-02T02:04:05.5Z"
    assert rfc3339_utc("2024-01-02T02:04:05Z") == "2024-01-02T02:04:05Z"


def test_key_value_bucket_is_its_kv_stream() -> None:
    kv = spec("KeyValue", "sessions", history=5, ttl=30 * SECOND, max_value_size=1024)
    desired = desired_config(kv, V212)
    assert desired["name"] == "KV_sessions"
    assert desired["subjects"] == ["$KV.sessions.>"]
    assert desired["max_msgs_per_subject"] == 5
    assert desired["max_age"] == desired["duplicate_window"] == 30 * SECOND
    assert desired["max_msg_size"] == 1024 and desired["max_bytes"] == -1
    assert desired["discard"] == "new"
    assert desired["deny_delete"] and desired["allow_rollup_hdrs"] and desired["allow_direct"]
    assert desired["metadata"] == MARKER


def test_key_value_defaults_to_one_history_entry_and_a_two_minute_window() -> None:
    desired = desired_config(spec("KeyValue", "config"), V212)
    assert desired["max_msgs_per_subject"] == 1
    assert desired["duplicate_window"] == 120 * SECOND


def test_object_store_bucket_is_its_obj_stream() -> None:
    desired = desired_config(spec("ObjectStore", "blobs", compression=True), V212)
    assert desired["name"] == "OBJ_blobs"
    assert desired["subjects"] == ["$O.blobs.C.>", "$O.blobs.M.>"]
    assert desired["discard"] == "new" and desired["compression"] == "s2"
    assert desired["allow_rollup_hdrs"] and desired["allow_direct"]
    assert not desired["deny_delete"]


def test_bucket_config_reads_a_kv_stream_back_as_bucket_fields() -> None:
    fields = {"history": 5, "ttl": 30 * SECOND, "max_value_size": 1024, "replicas": 3}
    stream = kv_stream_config("sessions", fields)
    assert bucket_config("KeyValue", "sessions", stream) == {"name": "sessions", **fields}


def test_live_streams_are_classified_by_name_and_subjects() -> None:
    assert classify_stream("KV_a", {"subjects": ["$KV.a.>"]}) == ("KeyValue", "a")
    obj = {"subjects": ["$O.b.M.>", "$O.b.C.>"]}
    assert classify_stream("OBJ_b", obj) == ("ObjectStore", "b")
    assert classify_stream("KV_a", {"subjects": ["other"]}) == ("Stream", "KV_a")


def test_fields_unknown_to_the_tables_are_preserved_not_compared() -> None:
    live = {**LIVE_210_MINIMAL, "metadata": MARKER, "future_flag": True}
    assert "future_flag" not in live_config("Stream", live, V210)
    assert preserved_fields("Stream", live, V210) == {"future_flag": True}


def test_a_field_the_server_is_too_old_for_is_a_problem_at_its_line() -> None:
    problems = unsupported_fields([spec("Stream", "S", subjects=["a"], allow_msg_ttl=True)], V210)
    assert len(problems) == 1
    assert str(problems[0]) == (
        "s.yaml:11: allow_msg_ttl: needs nats-server 2.11 or newer (connected: 2.10.26)"
    )
    assert unsupported_fields([spec("Stream", "S", allow_msg_ttl=True)], V211) == []


def test_a_newer_field_left_at_its_default_is_not_a_problem() -> None:
    assert unsupported_fields([spec("Stream", "S", allow_msg_ttl=False)], V210) == []


def test_bucket_fields_are_checked_through_the_stream_fields_they_need() -> None:
    kv = spec("KeyValue", "a", limit_marker_ttl=5 * SECOND)
    assert [p.path for p in unsupported_fields([kv], V210)] == ["limit_marker_ttl"]


@pytest.mark.parametrize("server", [V210, V211, V212, V214], ids=lambda s: s.version)
def test_desired_config_is_a_fixed_point_of_live_normalisation(server: ServerInfo) -> None:
    for item in (
        spec("Stream", "S", subjects=["a.>"], max_age=10 * SECOND, metadata={"x": "y"}),
        spec("KeyValue", "k", history=3),
        spec("ObjectStore", "o"),
        spec("Consumer", "c", "S", ack_policy="explicit", filter_subject="a.b"),
    ):
        desired = desired_config(item, server)
        assert live_config(item.kind, desired, server) == desired


def test_empty_optional_structures_count_as_absent() -> None:
    desired = desired_config(spec("Stream", "S", placement={"tags": []}, sources=[]), V212)
    assert "placement" not in desired and "sources" not in desired
    assert desired["subjects"] == ["S"]


STREAM_VALUES = {
    "subjects": st.lists(st.sampled_from(["a", "b.>", "c.*"]), unique=True, max_size=3),
    "retention": st.sampled_from(["limits", "interest", "workqueue"]),
    "max_msgs": st.integers(-5, 10),
    "max_bytes": st.integers(-5, 1 << 40),
    "max_age": st.integers(0, 10**13),
    "max_msg_size": st.integers(-5, 1 << 20),
    "discard": st.sampled_from(["old", "new"]),
    "storage": st.sampled_from(["file", "memory"]),
    "duplicate_window": st.integers(0, 10**12),
    "sources": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["X", "Y"])}), max_size=2),
    "consumer_limits": st.fixed_dictionaries({}, optional={"max_ack_pending": st.integers(0, 9)}),
    "metadata": st.dictionaries(st.sampled_from(["k", "_nats.ver"]), st.just("v")),
    "allow_msg_ttl": st.booleans(),
    "allow_msg_schedules": st.booleans(),
    "subject_delete_marker_ttl": st.integers(0, 10**10),
}
CONSUMER_VALUES = {
    "ack_policy": st.sampled_from(["none", "all", "explicit"]),
    "deliver_subject": st.sampled_from(["", "out"]),
    "max_ack_pending": st.integers(-3, 5),
    "max_deliver": st.integers(-3, 5),
    "max_waiting": st.integers(-1, 5),
    "backoff": st.lists(st.integers(1, 10**10), max_size=2),
    "priority_policy": st.sampled_from(["none", "pinned_client", "overflow"]),
    "opt_start_time": st.sampled_from(["2024-01-01T00:00:00.10+01:00", "2024-01-01T00:00:00Z"]),
}


@given(
    config=st.fixed_dictionaries({}, optional=STREAM_VALUES),
    server=st.sampled_from([V210, V211, V212, V214]),
)
def test_normalising_a_stream_twice_changes_nothing(
    config: dict[str, Any], server: ServerInfo
) -> None:
    desired = desired_config(spec("Stream", "S", **config), server)
    assert live_config("Stream", desired, server) == desired


@given(
    config=st.fixed_dictionaries({}, optional=CONSUMER_VALUES),
    limits=st.fixed_dictionaries({}, optional={"max_ack_pending": st.integers(0, 9)}),
    server=st.sampled_from([V210, V211, V212, V214]),
)
def test_normalising_a_consumer_twice_changes_nothing(
    config: dict[str, Any], limits: dict[str, Any], server: ServerInfo
) -> None:
    stream = {"consumer_limits": limits}
    desired = desired_config(spec("Consumer", "C", "S", **config), server, stream_config=stream)
    assert live_config("Consumer", desired, server, stream_config=stream) == desired


def test_a_value_newer_than_the_server_is_a_problem() -> None:
    flow = spec("Consumer", "C", "S", ack_policy="flow_control")
    (problem,) = unsupported_fields([flow], V212)
    assert problem.message == "'flow_control' needs nats-server 2.14 or newer (connected: 2.12.8)"
    assert unsupported_fields([flow], V214) == []
    prioritized = spec("Consumer", "C", "S", priority_policy="prioritized", priority_groups=["g"])
    assert [p.path for p in unsupported_fields([prioritized], V211)] == ["priority_policy"]


def test_a_newer_list_field_is_reported_too() -> None:
    groups = spec("Consumer", "C", "S", priority_groups=["g"])
    assert [p.path for p in unsupported_fields([groups], V210)] == ["priority_groups"]


def test_flow_control_acks_switch_on_flow_control_with_a_one_second_heartbeat() -> None:
    # As nats-server 2.15.1 answered for {"ack_policy": "flow_control", "deliver_subject": "x"}.
    push = spec("Consumer", "B", "S", ack_policy="flow_control", deliver_subject="x")
    desired = desired_config(push, V214)
    assert desired["flow_control"] is True and desired["idle_heartbeat"] == SECOND
    assert desired["max_ack_pending"] == 1000 and desired["ack_wait"] == 0


def test_a_sealed_stream_also_denies_deletes_and_purges_and_discards_new() -> None:
    """As every server does when it seals a stream (measured on the whole matrix)."""
    desired = desired_config(spec("Stream", "S", sealed=True), V212)
    assert (desired["deny_delete"], desired["deny_purge"], desired["discard"]) == (
        True,
        True,
        "new",
    )


CLUSTER3 = ServerInfo(version="2.12.8", api_level=3, clustered=True, cluster_size=3)


def test_replicas_beyond_the_advertised_cluster_are_refused_with_both_numbers() -> None:
    problems = replica_problems(
        [spec("Stream", "S", num_replicas=5)], CLUSTER3, LiveState(CLUSTER3)
    )
    assert [str(p.location) for p in problems] == ["s.yaml:10"]
    assert "5 replicas, but the cluster has 3 servers" in problems[0].message
    assert replica_problems([spec("Stream", "S", num_replicas=3)], CLUSTER3) == []


def test_a_node_down_does_not_refuse_what_the_cluster_still_counts() -> None:
    """Two servers advertised while one is down: streams still name the third, and an
    R3 resource that is already R3 is not a change of replicas."""
    down = ServerInfo(version="2.12.8", api_level=3, clustered=True, cluster_size=2)
    new = [spec("Stream", "NEW", num_replicas=3)]
    assert replica_problems(new, down, LiveState(down, peers=frozenset({"a", "b", "c"}))) == []
    assert replica_problems(new, down, LiveState(down)) != []
    live = LiveState(down, streams={"OLD": {"name": "OLD", "num_replicas": 3}})
    assert replica_problems([spec("Stream", "OLD", num_replicas=3)], down, live) == []
    consumer = spec("Consumer", "C", stream="OLD", num_replicas=3)
    assert replica_problems([consumer], down, live) != []  # a consumer going R1 -> R3


def test_a_cluster_that_advertises_nothing_is_not_second_guessed() -> None:
    hidden = ServerInfo(version="2.12.8", api_level=3, clustered=True, cluster_size=None)
    assert replica_problems([spec("Stream", "S", num_replicas=5)], hidden, LiveState(hidden)) == []


def test_replicas_on_a_single_server_are_refused_whatever_the_live_state() -> None:
    single = ServerInfo(version="2.12.8", api_level=3)
    bucket = spec("KeyValue", "kv", replicas=3)
    assert [p.path for p in replica_problems([bucket], single, LiveState(single))] == ["replicas"]


def test_a_consumer_name_decides_only_its_name_fields() -> None:
    """What CONSUMER_NAME_FIELDS promises, on desired and live configs alike, for pull,
    push and filtered consumers, on streams of each retention."""
    shapes: list[dict[str, Any]] = [
        {},
        {"ack_policy": "explicit", "max_deliver": 5},
        {"deliver_subject": "push.x", "ack_policy": "none", "flow_control": True,
         "idle_heartbeat": 5 * SECOND},
        {"filter_subjects": ["orders.a", "orders.b"], "metadata": {"team": "x"}},
        {"inactive_threshold": 60 * SECOND, "max_ack_pending": 10},
    ]  # fmt: skip
    for retention in ("limits", "interest", "workqueue"):
        stream = desired_config(spec("Stream", "ORDERS", retention=retention), V212)
        for shape in shapes:
            configs = {
                name: desired_config(
                    spec("Consumer", name, "ORDERS", **shape), V212, stream_config=stream
                )
                for name in ("first", "second")
            }
            first, second = configs["first"], configs["second"]
            assert {k for k in first if first[k] != second[k]} == set(CONSUMER_NAME_FIELDS)
            renamed = {**first, **{k: "second" for k in CONSUMER_NAME_FIELDS}}
            assert renamed == second
            live = live_config("Consumer", first, V212, stream_config=stream)
            again = live_config("Consumer", renamed, V212, stream_config=stream)
            assert {**live, **{k: "second" for k in CONSUMER_NAME_FIELDS}} == again


def test_a_stream_name_and_its_own_subjects_decide_only_those_fields() -> None:
    """What STREAM_NAME_FIELDS promises, for streams of each retention and the settings
    whose defaults other fields decide (sources, sealing, TTL markers, republish)."""
    shapes: list[dict[str, Any]] = [
        {},
        {"max_age": 3600 * SECOND, "duplicate_window": 0},
        {"sources": [{"name": "UP"}]},
        {"sealed": True},
        {"subject_delete_marker_ttl": 300 * SECOND},
        {"republish": {"dest": "copy.>"}},
        {"consumer_limits": {"max_ack_pending": 5}, "metadata": {"team": "x"}},
    ]
    for retention in ("limits", "interest", "workqueue"):
        for shape in shapes:
            configs = {
                name: desired_config(
                    spec("Stream", name, retention=retention, subjects=[f"{name}.>"], **shape),
                    V214,
                )
                for name in ("first", "second")
            }
            first, second = configs["first"], configs["second"]
            assert {k for k in first if first[k] != second[k]} == set(STREAM_NAME_FIELDS)
            renamed = {**first, "name": "second", "subjects": ["second.>"]}
            assert renamed == second
            live = [live_config("Stream", c, V214) for c in (first, second)]
            assert {k for k in live[0] if live[0][k] != live[1][k]} == set(STREAM_NAME_FIELDS)


@pytest.mark.parametrize("server", [V210, V211, V212, V214])
def test_fields_taken_verbatim_decide_only_themselves(server: ServerInfo) -> None:
    """What VERBATIM_FIELDS promises: a consumer's filter and description, a stream's
    description, set, changed or left out, change those fields of the desired and the
    live config alike and nothing else, whatever else is declared."""
    consumer_shapes: list[dict[str, Any]] = [
        {},
        {"ack_policy": "explicit", "max_deliver": 5},
        {"deliver_subject": "push.x", "ack_policy": "none", "idle_heartbeat": 5 * SECOND},
        {"backoff": [SECOND, 5 * SECOND], "ack_policy": "explicit", "metadata": {"t": "x"}},
        {"filter_subjects": ["orders.a", "orders.b"]},
    ]
    stream_shapes: list[dict[str, Any]] = [
        {},
        {"max_age": 3600 * SECOND, "subjects": ["a.>"]},
        {"sources": [{"name": "UP"}], "sealed": True},
        {"consumer_limits": {"max_ack_pending": 5}},
    ]
    values: list[dict[str, Any]] = [
        {},
        {"description": "one", "filter_subject": "orders.a"},
        {"description": "", "filter_subject": ""},
        {"description": "two words", "filter_subject": "orders.*.>"},
    ]
    stream = desired_config(spec("Stream", "ORDERS", retention="interest"), server)
    for kind, shapes in (("Consumer", consumer_shapes), ("Stream", stream_shapes)):
        fields = set(VERBATIM_FIELDS[kind])
        for shape in shapes:
            made = []
            for chosen in values:
                own = {k: v for k, v in chosen.items() if k in fields}
                if kind == "Consumer" and "filter_subjects" in shape:
                    own.pop("filter_subject", None)
                declared = spec(kind, "c", "ORDERS", **shape, **own)  # type: ignore[arg-type]
                desired = desired_config(declared, server, stream_config=stream)
                live = live_config(kind, desired, server, stream_config=stream)
                made.append((own, desired, live))
            for own, desired, live in made:
                for key in fields & set(own):
                    assert desired[key] == live[key] == own[key]
                rest = [{k: v for k, v in c.items() if k not in fields} for c in (desired, live)]
                first = [{k: v for k, v in c.items() if k not in fields} for c in made[0][1:]]
                assert rest == first


def test_a_consumer_takes_from_its_stream_only_its_inherited_limits() -> None:
    """Consumers of streams that differ in everything but their consumer limits
    normalise alike (export shares their documents); other limits, other configs."""
    limits = {"max_ack_pending": 5, "inactive_threshold": 60 * SECOND}
    streams = [
        desired_config(spec("Stream", "A", consumer_limits=limits), V212),
        desired_config(
            spec("Stream", "B", retention="workqueue", max_age=3600 * SECOND,
                 subjects=["b.>"], consumer_limits=limits),
            V212,
        ),
    ]  # fmt: skip
    assert inherited(streams[0]) == inherited(streams[1]) == limits
    durable = spec("Consumer", "c", "A", ack_policy="explicit")
    configs = [desired_config(durable, V212, stream_config=s) for s in streams]
    assert configs[0] == configs[1]
    assert configs[0]["max_ack_pending"] == 5 and configs[0]["inactive_threshold"] == 60 * SECOND
    plain = desired_config(spec("Stream", "C"), V212)
    assert desired_config(durable, V212, stream_config=plain) != configs[0]
    pairs = zip(configs, streams, strict=True)
    live = [live_config("Consumer", c, V212, stream_config=s) for c, s in pairs]
    assert live[0] == live[1]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the server drops trailing zeros of the nanoseconds: any count of digits is read
        ("2026-11-28T16:20:16.82927Z", 1_795_882_816_829_270_000),
        ("2026-11-28T16:20:16.829270001Z", 1_795_882_816_829_270_001),
        ("2026-11-28T16:20:16Z", 1_795_882_816_000_000_000),
        ("2026-11-28T17:20:16.5+01:00", 1_795_882_816_500_000_000),
        ("not a time", None),
        (None, None),
    ],
)
def test_epoch_nanoseconds_reads_every_fraction_length_the_server_writes(text, expected) -> None:
    assert epoch_nanoseconds(text) == expected


@pytest.mark.parametrize("text", ["9999-12-31T23:00:00.5-14:00", "0001-01-01T00:00:00+14:00"])
def test_a_time_whose_utc_moment_python_cannot_hold_is_unreadable_not_a_crash(text: str) -> None:
    """Year 10000 or year 0 once in UTC: a forged restore mark or a spec's opt_start_time.
    The reader answered with OverflowError (a traceback from plan, apply and restore);
    now it is unreadable (None), and a spec's value is left for the server to judge."""
    assert epoch_nanoseconds(text) is None
    assert nanoseconds_between(text, "2026-11-28T16:20:16Z") is None
    assert rfc3339_utc(text) == text
    consumer = spec("Consumer", "C", "S", opt_start_time=text, deliver_policy="by_start_time")
    assert desired_config(consumer, V212, stream_config={"name": "S"})["opt_start_time"] == text


def test_nanoseconds_between_crosses_a_second_with_fractions_of_unequal_length() -> None:
    assert nanoseconds_between("2026-11-28T16:20:16.9Z", "2026-11-28T16:20:17.05Z") == 150_000_000


#: Container values a consumer may declare (each copy must own its own).
CONSUMER_CONTAINERS = {
    "metadata": st.dictionaries(st.sampled_from(["team", "_nats.ver"]), st.just("v"), max_size=2),
    "filter_subjects": st.lists(st.sampled_from(["a.1", "a.2"]), unique=True, max_size=2),
    "priority_groups": st.lists(st.sampled_from(["g", "h"]), unique=True, max_size=2),
}
VERBATIM_VALUES = {
    "filter_subject": st.sampled_from(["", "a.b", "a.*", "orders.>"]),
    "description": st.sampled_from(["", "x", "é\u2028"]),
}


@given(
    shapes=st.lists(
        st.fixed_dictionaries({}, optional={**CONSUMER_VALUES, **CONSUMER_CONTAINERS}),
        min_size=1,
        max_size=3,
    ),
    consumers=st.lists(
        st.tuples(
            st.integers(0, 2),
            st.sampled_from(["A", "B", "C0"]),
            st.fixed_dictionaries({}, optional=VERBATIM_VALUES),
            st.sampled_from([MANAGE, Lifecycle(prevent_destroy=True)]),
        ),
        max_size=12,
    ),
    limits=st.fixed_dictionaries({}, optional={"max_ack_pending": st.integers(0, 9)}),
    owner=st.sampled_from(["default", "teamb"]),
    server=st.sampled_from([V210, V211, V212, V214]),
)
def test_desired_configs_of_a_plan_are_desired_config_of_each(
    shapes: list[dict[str, Any]],
    consumers: list[tuple[int, str, dict[str, Any], Lifecycle]],
    limits: dict[str, Any],
    owner: str,
    server: ServerInfo,
) -> None:
    """DesiredConfigs works a consumer shape out once and copies it: each copy is what
    desired_config gives that consumer, field order included, and owns its containers."""
    stream = {"consumer_limits": limits}
    configs = DesiredConfigs()
    made = []
    for shape, name, verbatim, lifecycle in consumers:
        declared = spec("Consumer", name, "S", **{**shapes[shape % len(shapes)], **verbatim})
        declared = declared.with_lifecycle(lifecycle)
        got = configs.of(declared, server, stream_config=stream, owner=owner)
        want = desired_config(declared, server, stream_config=stream, owner=owner)
        assert got == want and repr(got) == repr(want)  # field order, nested ones too
        made.append(got)
    held = [id(v) for got in made for v in got.values() if isinstance(v, (dict, list))]
    assert len(held) == len(set(held))  # no two configs share a container


def test_desired_configs_keep_each_consumers_metadata_in_its_own_order() -> None:
    """Two consumers declaring the same metadata in other orders are two shapes: each
    config holds its metadata in the order desired_config gives it (the declared one)."""
    configs = DesiredConfigs()
    for name, metadata in (("A", {"a": "1", "b": "2"}), ("B", {"b": "2", "a": "1"})):
        declared = spec("Consumer", name, "S", ack_policy="explicit", metadata=metadata)
        got = configs.of(declared, V212, stream_config={})
        want = desired_config(declared, V212, stream_config={})
        assert list(got["metadata"]) == list(want["metadata"])
        assert repr(got) == repr(want)


def test_desired_configs_never_take_one_value_written_null_for_another() -> None:
    """NaN and None are both ``null`` in a shape's JSON: such a consumer is worked out as
    it is, never given another's config."""
    configs = DesiredConfigs()
    for value in (float("nan"), None, float("inf"), None):
        declared = spec("Consumer", "C", "S", ack_policy="explicit", sample_freq=value)
        got = configs.of(declared, V212, stream_config={})
        want = desired_config(declared, V212, stream_config={})
        assert repr(got) == repr(want)
