"""Snapshot records without Spark: writing, parsing, the schema, worker-side adapters."""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reconciler.fleet import canonical
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


def test_the_tools_own_streams_and_their_consumers_are_left_out() -> None:
    """The apply lock's bucket and a backup's temporary mirror are the tool's
    bookkeeping (``identity.tools_own``, the rule backup follows), not the environment:
    they were written as records of it."""
    state = live()
    own = {"KV_RECONCILE_LOCKS": KV, "RECONCILE_BACKUP_ORDERS": ORDERS}
    with_own = LiveState(
        server=state.server,
        streams={**state.streams, **own},
        consumers={**state.consumers, ("RECONCILE_BACKUP_ORDERS", "C"): NEW},
    )
    records = snapshot_records(with_own, env="eu", captured_at=WHEN)
    assert records == snapshot_records(state, env="eu", captured_at=WHEN)


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
        (  # year 10000 in UTC: an OverflowError crashed the job, not a refused line
            '{"env":"x","captured_at":"9999-12-31T23:00:00-14:00","kind":"Stream","name":"q",'
            '"config":{}}',
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


# The read keeps what each record says, collapsed: checked against the record-at-a-time
# path (parse_record + live_row, as the read used them before it collapsed), on lines
# made to be awkward: repeats, equal captures, offsets, servers, unreadable configs.
STAMPS = ["2026-03-01T10:00:00Z", "2026-03-01T23:30:00-02:00", "2026-03-02T00:00:00+00:00",
          "2026-03-01T10:00:00", "yesterday", 7]  # fmt: skip
CONFIGS = [ORDERS, {**ORDERS, "max_age": 60 * 10**9}, KV, NEW, {**ORDERS, "max_age": "a week"},
           {**ORDERS, "max_msgs": 2**70}, []]  # fmt: skip
record_lines = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {
                "env": st.sampled_from(["eu", "us", "eu", ""]),
                "captured_at": st.sampled_from(STAMPS),
                "kind": st.sampled_from(["Stream", "Consumer", "Stream", "Queue"]),
                "stream": st.sampled_from(["ORDERS", "KV_cfg"]),
                "name": st.sampled_from(["ORDERS", "KV_cfg", "NEW"]),
                "config": st.sampled_from(CONFIGS),
            },
            optional={
                "server_version": st.sampled_from(["2.10.26", "2.12.3", "2.9.0", "v2", None]),
                "api_level": st.sampled_from([0, 3, -1, None, True]),
            },
        ).map(json.dumps),
        st.sampled_from(["{oops", "[1]", "", "  ", '{"env": "eu"}']),
    ),
    max_size=40,
)


def tied(level: int) -> str:
    record = {"env": "eu", "captured_at": STAMPS[0], "kind": "Stream", "name": "ORDERS",
              "config": ORDERS, "server_version": "2.12.3", "api_level": level}  # fmt: skip
    return json.dumps(record)


@settings(max_examples=300, deadline=None)
@given(lines=record_lines)
@example(lines=[tied(3), tied(0), tied(3)])  # one moment, two API levels: the larger
@example(lines=[tied(0), tied(3)])
def test_the_read_collapses_exactly_what_each_record_says(lines: list[str]) -> None:
    from reconciler.fleet.records import DAY_MICROSECONDS, EPOCH, MICROSECOND, UnitRows

    fast = UnitRows()
    seen: dict[tuple[str, ...], list[tuple[int, int]]] = {}
    bad, counts, latest = [], Counter[tuple[str, int]](), {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            fast.add_line(line)
        except BadRecord as err:
            fast.add_bad(str(err), file="f", line=number)
        try:  # the record-at-a-time path
            record = parse_record(line)
            text = canonical.config_text(record.config)
            stream_name, consumer, *_ = live_row(record, text)
        except BadRecord as err:
            bad.append((None,) * 6 + ("f", None, number, str(err)))
            continue
        captured = (record.captured_at - EPOCH) // MICROSECOND
        day = captured // DAY_MICROSECONDS
        seen.setdefault((record.env, stream_name, consumer, text), []).append((day, captured))
        counts[(record.env, day)] += 1
        rank = (
            captured,
            record.server_version or "",
            record.api_level if record.api_level is not None else -1,
        )
        if (record.env, day) not in latest or rank > latest[(record.env, day)][0]:
            latest[(record.env, day)] = (rank, (captured, record.server_version, record.api_level))
    rows = list(fast.rows())
    good = {tuple(r[:4]): list(zip(r[4], r[5], strict=True)) for r in rows if r[9] is None}
    assert good == seen
    assert [r for r in rows if r[9] is not None] == bad
    assert fast.tally() == (
        len(bad),
        {on: (n, *latest[on][1]) for on, n in counts.items()},
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.text()
    | st.floats(allow_nan=True, allow_infinity=True),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(config=st.dictionaries(st.text(), json_values, max_size=6))
def test_a_config_reads_back_from_its_text_as_json_loads_reads_it(config: dict) -> None:
    """The planning pass reads configs back with orjson, where it can: exactly what the
    standard reader gives (big integers, NaN, lone surrogates go the standard way)."""
    text = canonical.config_text(config)
    want = json.loads(text)
    got = canonical.config_from_text(text)
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    assert repr(got) == repr(want)


@pytest.mark.parametrize("levels", [62, 600, 1_100, 100_000])
def test_a_record_nested_too_deep_is_a_bad_line_and_the_read_goes_on(
    tmp_path: Path, levels: int
) -> None:
    """A snapshot line nesting ``[`` ``levels`` deep in a config's metadata (records come
    from other machines and tools): past orjson's 1,024 levels the standard reader, and
    from about 600 the config's normalisation, raised RecursionError in the worker, which
    is no bad line: the fleet job stopped with Spark's traceback. It is now a bad line at
    its FILE:LINE, refused as a spec nesting that deep is, and the next line is read."""
    from reconciler.fleet.lines import Piece
    from reconciler.fleet.records import read_unit

    good = {"env": "eu", "captured_at": "2026-03-01T10:00:00Z", "kind": "Stream",
            "name": "ORDERS", "config": ORDERS}  # fmt: skip
    deep = {**good, "config": {**ORDERS, "metadata": {"x": "DEEP"}}}
    nested = json.dumps(deep).replace('"DEEP"', "[" * levels + "]" * levels)
    snapshot = tmp_path / "eu.jsonl"
    snapshot.write_text(f"{nested}\n{json.dumps(good)}\n")

    rows = read_unit([Piece(str(snapshot))])

    assert [row[-4:] for row in rows.bad] == [
        (str(snapshot), None, 1, "nesting deeper than 64 levels")
    ]
    assert [key[:3] for key in rows.seen] == [("eu", "ORDERS", "")]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_record_holding_nan_or_infinity_is_a_bad_line_and_the_read_goes_on(
    tmp_path: Path, constant: str
) -> None:
    """``NaN`` and ``Infinity`` are no JSON: no server sends them and no snapshot written
    here holds them. A forged record's were read, and reached summary.json, which was
    then no JSON for a strict reader. Such a line is now a bad line at its FILE:LINE."""
    from reconciler.fleet.lines import Piece
    from reconciler.fleet.records import read_unit

    good = {"env": "eu", "captured_at": "2026-03-01T10:00:00Z", "kind": "Stream",
            "name": "ORDERS", "config": ORDERS}  # fmt: skip
    forged = json.dumps({**good, "config": {**ORDERS, "max_msgs": "X"}})
    snapshot = tmp_path / "eu.jsonl"
    forged = forged.replace('"X"', constant)
    snapshot.write_text(f"{forged}\n{json.dumps(good)}\n")

    rows = read_unit([Piece(str(snapshot))])

    assert [row[-4:][:3] for row in rows.bad] == [(str(snapshot), None, 1)]
    assert constant in rows.bad[0][-1]
    assert [key[:3] for key in rows.seen] == [("eu", "ORDERS", "")]
