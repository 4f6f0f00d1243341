"""SharedValues: equal strings and integers become one object; nothing else changes."""

from __future__ import annotations

import orjson

from reconciler.jetstream.client import SharedValues


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
