"""Field diffs with stable paths, and the immutable-field rules that force a replace."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.locations import Location
from reconciler.model.diff import FieldChange, ReplaceReason, diff_configs
from reconciler.model.diff import replace_reasons as replace_rules
from reconciler.model.normalize import desired_config
from reconciler.model.state import ServerInfo
from reconciler.specs.spec import Spec

V211_0 = ServerInfo(version="2.11.0", api_level=1)
V211 = ServerInfo(version="2.11.11", api_level=1)
V212_4 = ServerInfo(version="2.12.4", api_level=2)
V212 = ServerInfo(version="2.12.8", api_level=3)


def replace_reasons(*args: Any) -> list[str]:
    """The messages of the replace rules that apply."""
    return [reason.message for reason in replace_rules(*args)]


def stream(**config: Any) -> dict[str, Any]:
    return desired_config(Spec("Stream", "S", config, Location("s.yaml", 1)), V212)


def consumer(**config: Any) -> dict[str, Any]:
    return desired_config(Spec("Consumer", "C", config, Location("c.yaml", 1), stream="S"), V212)


def test_a_config_does_not_differ_from_itself() -> None:
    config = stream(subjects=["a", "b"], sources=[{"name": "X"}], metadata={"k": "v"})
    assert diff_configs(config, config) == []


def test_nested_changes_have_dotted_paths_sorted_by_key() -> None:
    live = {"metadata": {"owner": "a"}, "max_age": 1, "sources": [{"name": "X"}]}
    desired = {
        "metadata": {"owner": "b", "team": "t"},
        "max_age": 2,
        "sources": [{"name": "X", "filter_subject": "x.>"}],
    }
    assert diff_configs(desired, live) == [
        FieldChange("max_age", 1, 2),
        FieldChange("metadata.owner", "a", "b"),
        FieldChange("metadata.team", None, "t"),
        FieldChange("sources.0.filter_subject", None, "x.>"),
    ]


def test_subject_lists_are_compared_whole_and_in_order() -> None:
    changes = diff_configs({"subjects": ["b", "a"]}, {"subjects": ["a", "b"]})
    assert changes == [FieldChange("subjects", ["a", "b"], ["b", "a"])]


def test_a_field_only_on_one_side_is_none_on_the_other() -> None:
    assert diff_configs({}, {"mirror": {"name": "X"}}) == [
        FieldChange("mirror", {"name": "X"}, None)
    ]


def test_sources_of_a_different_length_are_one_change() -> None:
    changes = diff_configs(
        {"sources": [{"name": "A"}, {"name": "B"}]}, {"sources": [{"name": "A"}]}
    )
    assert [c.path for c in changes] == ["sources"]


STREAM_REPLACES = [
    ("storage", {"storage": "file"}, {"storage": "memory"}, "storage cannot be changed"),
    ("to workqueue", {}, {"retention": "workqueue"}, "retention cannot change from limits"),
    ("from workqueue", {"retention": "workqueue"}, {"retention": "interest"}, "workqueue"),
    ("add mirror", {}, {"mirror": {"name": "X"}}, "a mirror cannot be added"),
    ("change mirror", {"mirror": {"name": "X"}}, {"mirror": {"name": "Y"}}, "mirror cannot"),
    ("unseal", {"sealed": True}, {}, "sealed cannot change from true to false"),
    ("allow delete", {"deny_delete": True}, {}, "deny_delete cannot change"),
    ("allow purge", {"deny_purge": True}, {}, "deny_purge cannot change"),
    ("ttl off", {"allow_msg_ttl": True}, {}, "allow_msg_ttl cannot change from true"),
    ("counter on", {}, {"allow_msg_counter": True}, "allow_msg_counter cannot be changed"),
    ("counter off", {"allow_msg_counter": True}, {}, "allow_msg_counter cannot be changed"),
    ("schedules off", {"allow_msg_schedules": True}, {}, "allow_msg_schedules cannot change"),
    ("persist mode", {}, {"persist_mode": "async"}, "persist_mode cannot be changed"),
]


@pytest.mark.parametrize(
    ("before", "after", "reason"),
    [case[1:] for case in STREAM_REPLACES],
    ids=[case[0] for case in STREAM_REPLACES],
)
def test_immutable_stream_field_change_is_a_replace(
    before: dict[str, Any], after: dict[str, Any], reason: str
) -> None:
    live, desired = stream(**before), stream(**after)
    reasons = replace_reasons("Stream", desired, live, V212)
    assert any(reason in r for r in reasons), reasons


STREAM_UPDATES = [
    ("limits to interest", {}, {"retention": "interest"}),
    ("deny delete on", {}, {"deny_delete": True}),
    ("seal", {}, {"sealed": True}),
    ("ttl on", {}, {"allow_msg_ttl": True}),
    ("schedules on", {}, {"allow_msg_schedules": True, "allow_rollup_hdrs": True}),
    ("max age", {"max_age": 1}, {"max_age": 2}),
    ("subjects", {"subjects": ["a"]}, {"subjects": ["a", "b"]}),
    ("remove mirror on 2.12", {"mirror": {"name": "X"}}, {}),
    ("max consumers on 2.12.5+", {}, {"max_consumers": 10}),
]


@pytest.mark.parametrize(
    ("before", "after"), [c[1:] for c in STREAM_UPDATES], ids=[c[0] for c in STREAM_UPDATES]
)
def test_mutable_stream_field_change_is_an_update(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    assert replace_reasons("Stream", stream(**after), stream(**before), V212) == []


def test_removing_a_mirror_needs_2_12() -> None:
    reasons = replace_reasons("Stream", stream(), stream(mirror={"name": "X"}), V211)
    assert reasons == ["removing a mirror needs nats-server 2.12 (connected: 2.11.11)"]


def test_max_consumers_cannot_change_before_2_12_5() -> None:
    reasons = replace_reasons("Stream", stream(max_consumers=10), stream(), V212_4)
    assert reasons and reasons[0].startswith("max_consumers cannot be changed")


def test_message_ttls_cannot_even_be_switched_on_by_2_11_0() -> None:
    reasons = replace_reasons("Stream", stream(allow_msg_ttl=True), stream(), V211_0)
    assert reasons == ["allow_msg_ttl cannot be changed on nats-server 2.11.0"]
    assert replace_reasons("Stream", stream(allow_msg_ttl=True), stream(), V211) == []


CONSUMER_REPLACES = [
    ("deliver_policy", {"deliver_policy": "new"}),
    ("opt_start_seq", {"deliver_policy": "by_start_sequence", "opt_start_seq": 5}),
    ("opt_start_time", {"opt_start_time": "2024-01-01T00:00:00Z"}),
    ("ack_policy", {"ack_policy": "all"}),
    ("replay_policy", {"replay_policy": "original"}),
    ("max_waiting", {"max_waiting": 10}),
    ("flow_control", {"flow_control": True}),
    ("idle_heartbeat", {"idle_heartbeat": 5_000_000_000}),
]


@pytest.mark.parametrize(
    ("field", "after"), CONSUMER_REPLACES, ids=[case[0] for case in CONSUMER_REPLACES]
)
def test_immutable_consumer_field_change_is_a_replace(field: str, after: dict[str, Any]) -> None:
    live = consumer(ack_policy="explicit")
    desired = consumer(**{"ack_policy": "explicit", **after})
    reasons = replace_reasons("Consumer", desired, live, V212)
    assert any(r.startswith(field) for r in reasons), reasons


def test_pull_consumer_cannot_become_push() -> None:
    reasons = replace_reasons("Consumer", consumer(deliver_subject="out"), consumer(), V212)
    assert "a pull consumer cannot become push" in reasons
    back = replace_reasons("Consumer", consumer(), consumer(deliver_subject="out"), V212)
    assert "a push consumer cannot become pull" in back


def test_mutable_consumer_fields_update_in_place() -> None:
    desired = consumer(ack_policy="explicit", max_ack_pending=10, description="d", max_deliver=3)
    assert replace_reasons("Consumer", desired, consumer(ack_policy="explicit"), V212) == []


def test_consumer_storage_type_is_immutable_from_2_14_4() -> None:
    newer = ServerInfo(version="2.14.4", api_level=4)
    memory, live = consumer(mem_storage=True), consumer()
    assert replace_reasons("Consumer", memory, live, newer) == ["mem_storage cannot be changed"]
    assert replace_reasons("Consumer", memory, live, V212) == []


def test_each_replace_reason_names_the_field_that_forces_it() -> None:
    reasons = replace_rules("Stream", stream(storage="memory"), stream(), V212)
    assert reasons == [ReplaceReason("storage", "storage cannot be changed")]
    push = replace_rules("Consumer", {"deliver_subject": "x"}, {}, V212)
    assert "deliver_subject" in {reason.field for reason in push}


@given(st.data())
def test_a_diff_limited_to_some_fields_is_the_full_diff_filtered(data: st.DataObject) -> None:
    values = st.none() | st.integers(0, 2) | st.lists(st.integers(0, 1), max_size=2)
    nested = st.dictionaries(st.sampled_from("abc"), values, max_size=3)
    config = st.dictionaries(st.sampled_from(["x", "y", "z", "w"]), values | nested, max_size=4)
    desired, live = data.draw(config), data.draw(config)
    only = data.draw(st.sets(st.sampled_from(["x", "y", "z", "w", "v"])))
    full = [c for c in diff_configs(desired, live) if c.path.split(".")[0] in only]
    assert diff_configs(desired, live, only=only) == full
