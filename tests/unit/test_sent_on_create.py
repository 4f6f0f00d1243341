"""What a create leaves out (``apply.sent_on_create``): only scalar fields at the value
their absence means, never a value of another type that compares equal (``False`` and
``0``, ``True`` and ``1``), never an object or a list, never a field the tables do not
know. The planner reads what is left as it reads the whole config (``canonical``), and
the server keeps the same config: tests/integration/test_create_payload.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from reconciler.execution.apply import CONSUMER_SCALARS, STREAM_SCALARS, sent_on_create
from reconciler.locations import Location
from reconciler.model.defaults import CONSUMER_FIELDS, STREAM_FIELDS, newest_server
from reconciler.model.normalize import canonical, desired_config
from reconciler.specs.spec import Spec

SERVER = newest_server()
TRICKY = st.one_of(
    st.sampled_from([0, 1, -1, False, True, "", "none", "file", "limits", "all", 0.0, None]),
    st.sampled_from([{}, [], {"a": 1}, [0], "default", "old", "instant"]),
)


def configs(table: Any) -> st.SearchStrategy[dict[str, Any]]:
    names = st.sampled_from([*table, "unknown_field", "_nats.ver"])
    return st.dictionaries(names, TRICKY, max_size=12)


@given(config=configs(STREAM_FIELDS))
def test_a_stream_create_leaves_out_only_scalars_at_their_absent_value(
    config: dict[str, Any],
) -> None:
    _check(STREAM_SCALARS, config)


@given(config=configs(CONSUMER_FIELDS))
def test_a_consumer_create_leaves_out_only_scalars_at_their_absent_value(
    config: dict[str, Any],
) -> None:
    _check(CONSUMER_SCALARS, config)


def _check(absent: dict[str, Any], config: dict[str, Any]) -> None:
    sent = sent_on_create(absent, config)
    assert list(sent) == [name for name in config if name in sent]  # order kept
    for name, value in config.items():
        left_out = name not in sent
        expected = (
            name in absent
            and isinstance(value, str | int | bool)
            and type(value) is type(absent[name])
            and value == absent[name]
        )
        assert left_out == expected, (name, value)
        if not left_out:
            assert sent[name] is value


def test_false_is_never_taken_for_zero_nor_true_for_one() -> None:
    config = {"max_age": False, "num_replicas": True, "no_ack": 0, "sealed": 0}
    assert sent_on_create(STREAM_SCALARS, config) == config


SPECS = [
    Spec(kind="Stream", name="S", config={}, source=Location("t.yaml", 1)),
    Spec(
        kind="Stream",
        name="M",
        config={"mirror": {"name": "S"}, "storage": "memory", "description": ""},
        source=Location("t.yaml", 2),
    ),
    Spec(
        kind="KeyValue",
        name="kv",
        config={"history": 5, "ttl": 0, "compression": "s2"},
        source=Location("t.yaml", 3),
    ),
    Spec(kind="ObjectStore", name="obj", config={}, source=Location("t.yaml", 4)),
    Spec(
        kind="Consumer",
        name="c",
        stream="S",
        config={"ack_policy": "explicit", "max_deliver": -1, "deliver_subject": ""},
        source=Location("t.yaml", 5),
    ),
    Spec(kind="Consumer", name="none", stream="S", config={}, source=Location("t.yaml", 6)),
]


def test_the_planner_reads_what_a_create_sends_as_the_whole_config() -> None:
    for spec in SPECS:
        desired = desired_config(spec, SERVER)
        kind = "Consumer" if spec.kind == "Consumer" else "Stream"
        absent = CONSUMER_SCALARS if kind == "Consumer" else STREAM_SCALARS
        sent = sent_on_create(absent, desired)
        assert len(sent) < len(desired), spec.name
        assert canonical(kind, sent, SERVER) == desired, spec.name
