"""What crosses from the JVM into the verdict's Python pass: each resource once per config."""

from __future__ import annotations

import io
import pickle
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reconciler.fleet.match import EPOCH, _collapsed, _group_rows, declared_frame
from reconciler.fleet.records import read_snapshots
from reconciler.model.state import LiveState, ServerInfo
from reconciler.planning.snapshot import snapshot_records, write_jsonl

pytestmark = pytest.mark.integration

ORDERS = {"name": "ORDERS", "subjects": ["ORDERS.*"], "max_age": 0, "storage": "file"}
WORK = {"durable_name": "WORK", "name": "WORK", "ack_policy": "explicit"}
START = datetime(2026, 3, 1, 3, 0, tzinfo=UTC)


def snapshot(folder: Path, name: str, when: datetime, orders: dict[str, Any]) -> None:
    live = LiveState(
        server=ServerInfo("2.12.3", 3),
        streams={"ORDERS": orders},
        consumers={("ORDERS", "WORK"): WORK},
    )
    out = io.StringIO()
    write_jsonl(snapshot_records(live, env="eu", captured_at=when), out)
    (folder / name).write_text(out.getvalue())


def test_each_resource_reaches_python_once_per_config_with_its_days(
    spark: Any, tmp_path: Path
) -> None:
    for day in range(6):  # the same configs six days running ...
        snapshot(tmp_path, f"day{day}.jsonl", START + timedelta(days=day), ORDERS)
    edited = {**ORDERS, "description": "edited by hand"}  # ... but for a later capture
    snapshot(tmp_path, "day5-late.jsonl", START + timedelta(days=5, hours=6), edited)
    live, _ = read_snapshots(spark, sorted(tmp_path.glob("*.jsonl")))
    specs = declared_frame(spark, {"eu": {"ORDERS": (None, ())}})
    rows = _collapsed(specs, live, 2).collect()
    records = [r for r in rows if r["specs"] is None]
    # 14 records in: one row per resource and config (the raw records crossed one each)
    assert len(records) == 3
    days = {(r["consumer"], "edited" in r["config"]): sorted(r["day"]) for r in records}
    first = (START.date() - EPOCH).days
    assert days[("", False)] == [first + d for d in range(6)]
    assert days[("", True)] == [first + 5]
    assert days[("WORK", False)] == sorted([first + d for d in range(6)] + [first + 5])
    [group] = [r for r in rows if r["specs"] is not None]
    assert pickle.loads(group["specs"]) == (None, ())


def test_the_latest_capture_of_a_day_wins_whatever_the_order_read() -> None:
    day = (date(2026, 3, 1) - EPOCH).days
    rows = [
        ("eu", "S", "", '{"v":1}', None, [day, day + 1], [10, 50]),
        ("eu", "S", "", '{"v":2}', None, [day], [20]),  # later that day: wins
        ("eu", "S", "", '{"v":3}', None, [day + 1], [50]),  # the same moment: larger text
        ("eu", "S", "C", '{"c":1}', None, [day + 1], [5]),
    ]
    expected = {"": {day: '{"v":2}', day + 1: '{"v":3}'}, "C": {day + 1: '{"c":1}'}}
    for ordered in (rows, rows[::-1]):
        assert _group_rows(ordered) == ((None, ()), expected)
