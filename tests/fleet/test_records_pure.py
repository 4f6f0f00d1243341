"""Snapshot records without Spark: writing, parsing, the schema, worker-side adapters."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest

from reconciler.fleet.canonical import live_row, newest_server, server_info
from reconciler.model.state import LiveState, ServerInfo
from reconciler.planning.snapshot import (
    BadRecord,
    parse_record,
    record_from_json,
    snapshot_records,
    write_jsonl,
)
from reconciler.specs.spec import MANAGED_KEY, MANAGED_VALUE

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "snapshot.schema.json").read_text()
)
WHEN = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
ORDERS = {"name": "ORDERS", "subjects": ["ORDERS.*"], "max_age": 0, "storage": "file"}
KV = {"name": "KV_cfg", "subjects": ["$KV.cfg.>"], "max_msgs_per_subject": 5}
NEW = {"durable_name": "NEW", "name": "NEW", "ack_policy": "explicit", "ack_wait": 30 * 10**9}


def live() -> LiveState:
    return LiveState(
        server=ServerInfo("2.12.3", 3),
        streams={"ORDERS": ORDERS, "KV_cfg": KV},
        consumers={("ORDERS", "NEW"): NEW},
    )


def test_every_stream_and_consumer_becomes_one_record_with_the_config_verbatim() -> None:
    records = snapshot_records(live(), env="eu", captured_at=WHEN)
    assert [(r["kind"], r["stream"], r["name"]) for r in records] == [
        ("Stream", "KV_cfg", "KV_cfg"),
        ("Stream", "ORDERS", "ORDERS"),
        ("Consumer", "ORDERS", "NEW"),
    ]
    assert records[1]["config"] == ORDERS
    assert {r["captured_at"] for r in records} == {"2026-03-01T12:30:00Z"}
    assert {(r["server_version"], r["api_level"]) for r in records} == {("2.12.3", 3)}


def test_written_records_follow_the_schema_and_parse_back() -> None:
    out = io.StringIO()
    assert write_jsonl(snapshot_records(live(), env="eu", captured_at=WHEN), out) == 3
    lines = out.getvalue().splitlines()
    for line in lines:
        jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(line))
    record = parse_record(lines[2])
    assert (record.env, record.kind, record.stream, record.name) == (
        "eu",
        "Consumer",
        "ORDERS",
        "NEW",
    )
    assert record.day.isoformat() == "2026-03-01"
    assert record.config == NEW


def test_records_of_other_tools_need_only_the_documented_fields() -> None:
    record = record_from_json(
        {
            "env": "x",
            "captured_at": "2026-03-01T23:30:00-02:00",
            "kind": "Stream",
            "name": "S",
            "config": {},
        }
    )
    assert record.stream == "S" and record.server_version is None
    assert record.day.isoformat() == "2026-03-02"  # grouped by UTC day


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"env": "x"}', "missing field(s): captured_at, kind, name, config"),
        (
            '{"env":"x","captured_at":"2026-01-01T00:00:00Z","kind":"Queue","name":"q","config":{}}',
            "unknown kind 'Queue'",
        ),
        (
            '{"env":"x","captured_at":"yesterday","kind":"Stream","name":"q","config":{}}',
            "not an RFC 3339 timestamp",
        ),
        (
            '{"env":"x","captured_at":"2026-01-01T00:00:00Z","kind":"Consumer","name":"c","config":{}}',
            "stream must be a non-empty string",
        ),
        (
            '{"env":"x","captured_at":"2026-01-01T00:00:00Z","kind":"Stream","name":"q","config":[]}',
            "config must be a JSON object",
        ),
    ],
)
def test_a_bad_line_says_what_is_wrong(line: str, message: str) -> None:
    with pytest.raises(BadRecord, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_record(line)


def test_bucket_streams_are_named_as_buckets_when_undeclared() -> None:
    records = snapshot_records(live(), env="eu", captured_at=WHEN)
    rows = [live_row(parse_record(json.dumps(r))) for r in records]
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("KV_cfg", "", "KeyValue", "cfg"),
        ("ORDERS", "", "Stream", "ORDERS"),
        ("ORDERS", "NEW", "Consumer", "NEW"),
    ]
    assert rows[1][4] == records[1]["config"]  # verbatim: the planner normalises it


def test_the_managed_marker_is_read_from_the_live_config() -> None:
    config = {**ORDERS, "metadata": {MANAGED_KEY: MANAGED_VALUE}}
    record = record_from_json(
        {
            "env": "x",
            "captured_at": "2026-01-01T00:00:00Z",
            "kind": "Stream",
            "name": "ORDERS",
            "config": config,
        }
    )
    assert live_row(record)[5] is True


def test_a_snapshot_without_server_facts_is_read_with_the_newest_semantics() -> None:
    newest = newest_server()
    assert server_info(None, None) == newest
    assert newest.version_tuple >= (2, 14, 0)
    assert server_info(None, 2).version == "2.12.0"
    assert server_info("2.10.25", None) == ServerInfo("2.10.25", 0)


def test_a_config_is_normalised_once_per_server_yet_a_bad_one_is_always_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same resource on ten days is checked once; the same config from another
    server version is checked again; an unreadable config is refused every time."""
    from reconciler.fleet import canonical

    calls: list[str] = []
    real = canonical.live_config

    def counting(kind: str, config: dict, server: ServerInfo) -> dict:
        calls.append(server.version)
        return real(kind, config, server)

    monkeypatch.setattr(canonical, "live_config", counting)
    monkeypatch.setattr(canonical, "_readable", set())

    def line(config: dict, day: int, version: str = "2.12.3") -> str:
        return json.dumps(
            {"env": "eu", "captured_at": f"2026-03-{day:02d}T00:00:00Z", "kind": "Stream",
             "name": "ORDERS", "config": config, "server_version": version}
        )  # fmt: skip

    for day in range(1, 11):
        live_row(parse_record(line(ORDERS, day)))
    assert calls == ["2.12.3"]
    live_row(parse_record(line(ORDERS, 11, "2.10.26")))
    assert calls == ["2.12.3", "2.10.26"]
    broken = {**ORDERS, "max_age": "a week"}
    for day in (12, 13):
        with pytest.raises(BadRecord, match="cannot be normalised"):
            live_row(parse_record(line(broken, day)))
    assert len(calls) == 4
    huge = {**ORDERS, "max_msgs": 2**70}  # beyond orjson: written the exact way
    assert json.loads(canonical.config_text(huge))["max_msgs"] == 2**70
