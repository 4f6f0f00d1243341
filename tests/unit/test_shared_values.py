"""SharedValues: equal strings and integers become one object; nothing else changes."""

from __future__ import annotations

import orjson

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
