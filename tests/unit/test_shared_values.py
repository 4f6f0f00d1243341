"""SharedValues: equal strings and integers become one object; nothing else changes."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.jetstream.live import SharedValues


def test_equal_values_become_one_object_and_the_configs_stay_equal() -> None:
    shared = SharedValues()
    text = b'{"ack_policy":"explicit","ack_wait":30000000000,"filter_subjects":["a.>","b"]}'
    one, two = shared(orjson.loads(text)), shared(orjson.loads(text))
    assert one == two == orjson.loads(text)
    assert one["ack_policy"] is two["ack_policy"] and one["ack_wait"] is two["ack_wait"]
    assert one["filter_subjects"][0] is two["filter_subjects"][0]
    assert one is not two and one["filter_subjects"] is not two["filter_subjects"]


def test_booleans_floats_and_nulls_keep_their_type() -> None:
    """1 == True and 1 == 1.0 in Python: a shared integer must never stand in for them."""
    shared = SharedValues()
    seen = shared({"count": 1, "zero": 0, "x": 1.0})
    assert seen == {"count": 1, "zero": 0, "x": 1.0}
    again = shared({"a": True, "b": False, "c": 1.0, "d": None, "e": 1, "f": 0})
    assert again == {"a": True, "b": False, "c": 1.0, "d": None, "e": 1, "f": 0}
    assert [type(v) for v in again.values()] == [bool, bool, float, type(None), int, int]


def test_values_are_shared_at_every_depth_and_containers_never() -> None:
    """Stream configs nest: sources are a list of dicts, a subject transform a dict in a
    dict, metadata a dict; every level comes back equal, with the same types and key
    order, and no dict or list is shared between two configs."""
    shared = SharedValues()
    text = (
        b'{"name":"S","sources":[{"name":"A","opt_start_seq":5,"subject_transforms":'
        b'[{"src":"a.>","dest":"b.>"}]},{"name":"B","external":{"api":"$JS.x.API"}}],'
        b'"metadata":{"owner":"team","n":"7"},"matrix":[[1,2],[3,[4,"x"]]],"ok":true,'
        b'"ratio":0.5,"none":null,"empty":{},"nothing":[]}'
    )
    one, two = shared(orjson.loads(text)), shared(orjson.loads(text))
    assert one == two == orjson.loads(text)
    assert orjson.dumps(one) == orjson.dumps(orjson.loads(text))  # same key order too
    assert (
        one["sources"][0]["subject_transforms"][0]["src"]
        is two["sources"][0]["subject_transforms"][0]["src"]
    )
    assert one["matrix"][1][1][0] is two["matrix"][1][1][0]
    for path in (("sources",), ("sources", 0), ("sources", 1, "external"), ("metadata",),
                 ("matrix", 1, 1), ("empty",), ("nothing",)):  # fmt: skip
        a, b = one, two
        for step in path:
            a, b = a[step], b[step]
        assert a is not b, path
    assert type(one["ok"]) is bool and type(one["ratio"]) is float and one["none"] is None


#: A consumer's own fields (names, filter, description) and others, with values of every
#: JSON type, and the values Python calls equal across types (1, 1.0, True).
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.sampled_from([0, 1, 1.0, -0.0, 0.0, 30_000_000_000, 2**64, "explicit", "0", ""])
    | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=6,
)
_FIELDS = st.sampled_from(
    [
        "name",
        "durable_name",
        "filter_subject",
        "description",
        "ack_policy",
        "max_deliver",
        "metadata",
    ]
)


def _decoded(text: bytes) -> Any:
    """What the transport decodes: orjson, or the standard library for what orjson refuses."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _typed(value: Any) -> Any:
    """``value`` with the type of every value in it spelled out (``1`` is not ``True``)."""
    if type(value) is dict:
        return ("dict", [(k, _typed(v)) for k, v in value.items()])
    if type(value) is list:
        return ("list", [_typed(v) for v in value])
    return (type(value).__name__, repr(value))  # repr: NaN is nan, -0.0 is not 0.0


def _containers(value: Any) -> list[int]:
    found = [id(value)] if type(value) in (dict, list) else []
    for item in value.values() if type(value) is dict else value if type(value) is list else ():
        found += _containers(item)
    return found


@settings(max_examples=300, deadline=None)
@given(configs=st.lists(st.dictionaries(_FIELDS, _VALUES, max_size=6), min_size=1, max_size=8))
def test_a_consumer_made_from_its_shape_s_template_is_the_config_decoded(
    configs: list[dict[str, Any]],
) -> None:
    """Consumer configs made from a template of their shape (the fast path) are exactly
    what the decoder made: equal, every value of the same type (``1``, ``1.0``, ``True``;
    NaN and integers beyond 64 bits from the standard library's decoder), fields in the
    same order, and no dict or list shared with another config, nor with a template:
    changing one config changes no other read after it."""
    shared = SharedValues()
    texts = [json.dumps(c).encode() for c in configs] * 2  # the second time: shapes known
    texts += [t.replace(b"1.0", b"NaN") for t in texts[:2]]
    made = [shared.consumer(_decoded(text)) for text in texts]
    for text, kept in zip(texts, made, strict=True):
        assert _typed(kept) == _typed(_decoded(text))
    ids = [i for kept in made for i in _containers(kept)]
    assert len(ids) == len(set(ids))
    for kept in made:
        for value in kept.values():
            if type(value) is dict:
                value["changed"] = True
    again = [shared.consumer(_decoded(text)) for text in texts]
    for text, kept in zip(texts, again, strict=True):
        assert _typed(kept) == _typed(_decoded(text))


def test_consumers_alike_share_their_field_names_and_values_but_not_their_own_fields() -> None:
    """What the template is for: consumers differing only in their names and filters
    share every field name and every other value (orjson made new ``name`` and
    ``metadata`` keys for nearly every consumer of a large account)."""
    shared = SharedValues()
    made = [
        shared.consumer(
            orjson.loads(
                b'{"durable_name":"C%d","name":"C%d","ack_policy":"explicit","filter_subject":'
                b'"s.%d","metadata":{"io.jetstream-gitops/managed-by":"reconcile"}}' % (n, n, n)
            )
        )
        for n in range(3)
    ]
    first, *others = made
    for other in others:
        assert [k for k in other] == [k for k in first]
        assert all(a is b for a, b in zip(other, first, strict=True))
        assert other["ack_policy"] is first["ack_policy"]
        assert other["metadata"] is not first["metadata"] and other["metadata"] == first["metadata"]
        assert next(iter(other["metadata"])) is next(iter(first["metadata"]))
    assert [c["name"] for c in made] == ["C0", "C1", "C2"]
    assert [c["filter_subject"] for c in made] == ["s.0", "s.1", "s.2"]
