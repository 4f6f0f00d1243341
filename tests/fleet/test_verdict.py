"""The plan's matching rules, one stream and its consumers at a time (no Spark)."""

from __future__ import annotations

import json
from typing import Any

from reconciler.fleet.verdict import Pair, stream_findings


def text(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


STREAM = {"name": "S", "storage": "file", "max_age": 10}
CONSUMER = {"name": "C", "ack_policy": "explicit", "max_deliver": 5}


def declared(consumer: str, config: dict[str, Any], **extra: Any) -> Pair:
    kind = "Consumer" if consumer else "Stream"
    return Pair(consumer, kind, consumer or "S", text(config), **extra)


def both(consumer: str, want: dict[str, Any], have: dict[str, Any], **extra: Any) -> Pair:
    kind = "Consumer" if consumer else "Stream"
    name = consumer or "S"
    return Pair(
        consumer, kind, name, text(want), live_kind=kind, live_name=name, live=text(have), **extra
    )


def undeclared(
    consumer: str, config: dict[str, Any], *, managed: bool = False, kind: str = ""
) -> Pair:
    kind = kind or ("Consumer" if consumer else "Stream")
    return Pair(
        consumer, live_kind=kind, live_name=consumer or "S", live=text(config), managed=managed
    )


def statuses(stream: str, pairs: list[Pair]) -> list[tuple[Any, ...]]:
    return [(f[0], f[1], f[2], f[3], f[4]) for f in stream_findings(stream, pairs)]


def test_equal_configs_are_in_sync_and_each_changed_field_is_one_finding() -> None:
    found = list(
        stream_findings(
            "S", [both("", STREAM, {**STREAM, "max_age": 20}), both("C", CONSUMER, CONSUMER)]
        )
    )
    assert found == [
        ("Stream", None, "S", "drifted", "max_age", "10", "20"),
        ("Consumer", "S", "C", "in_sync", None, None, None),
    ]


def test_declared_but_absent_is_missing_with_the_whole_desired_config() -> None:
    found = list(stream_findings("S", [declared("", STREAM)]))
    assert [f[3] for f in found] == ["missing"]
    assert json.loads(str(found[0][5])) == STREAM


def test_undeclared_resources_are_unmanaged_or_orphaned_by_the_marker() -> None:
    assert statuses("S", [undeclared("", STREAM)]) == [("Stream", None, "S", "unmanaged", None)]
    assert statuses("S", [undeclared("", STREAM, managed=True)]) == [
        ("Stream", None, "S", "orphaned", None)
    ]
    assert statuses("KV_b", [undeclared("", STREAM, kind="KeyValue")])[0][0] == "KeyValue"


def test_an_undeclared_consumer_is_listed_only_under_a_declared_stream() -> None:
    assert statuses("S", [undeclared("", STREAM), undeclared("X", CONSUMER)]) == [
        ("Stream", None, "S", "unmanaged", None)
    ]
    assert statuses("S", [both("", STREAM, STREAM), undeclared("X", CONSUMER)]) == [
        ("Stream", None, "S", "in_sync", None),
        ("Consumer", "S", "X", "unmanaged", None),
    ]


def test_a_stream_that_needs_a_replace_takes_its_consumers_with_it() -> None:
    pairs = [
        both("", {**STREAM, "storage": "memory"}, STREAM, server_version="2.12.3", api_level=3),
        both("C", CONSUMER, CONSUMER),
        undeclared("X", CONSUMER),
    ]
    assert statuses("S", pairs) == [
        ("Stream", None, "S", "drifted", "storage"),
        ("Consumer", "S", "C", "missing", None),
    ]


def test_external_streams_are_never_listed_but_count_as_declared() -> None:
    external = Pair(
        "", "Stream", "S", None, external=True, live_kind="Stream", live_name="S", live=text(STREAM)
    )
    assert statuses("S", [external, undeclared("X", CONSUMER)]) == [
        ("Consumer", "S", "X", "unmanaged", None)
    ]


def test_the_apply_lock_bucket_is_not_listed_when_undeclared() -> None:
    assert statuses("KV_RECONCILE_LOCKS", [undeclared("", STREAM, kind="KeyValue")]) == []


def test_consumers_of_an_absent_stream_row_are_judged_on_their_own() -> None:
    # a declared consumer on a stream nobody declares: the plan still compares it
    assert statuses("S", [both("C", CONSUMER, {**CONSUMER, "max_deliver": 9})]) == [
        ("Consumer", "S", "C", "drifted", "max_deliver")
    ]
