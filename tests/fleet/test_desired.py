"""The desired side of the fleet job without Spark: env folders, contexts, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.errors import ReconcileError, SpecError
from reconciler.fleet.desired import Context, desired_rows, env_folders, load_fleet

SPECS = """\
kind: Stream
name: RAW
external: true
---
kind: Consumer
stream: RAW
name: READER
ack_policy: explicit
---
kind: Stream
name: ORDERS
subjects: [orders.>]
allow_msg_ttl: true
"""


def fleet(tmp_path: Path) -> Path:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "specs.yaml").write_text(SPECS)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.yaml").write_text("kind: Stream\nname: X\nmax_age: 10 parsecs\n")
    (tmp_path / ".hidden").mkdir()
    return tmp_path


def test_each_visible_sub_folder_is_an_environment_and_invalid_ones_carry_problems(
    tmp_path: Path,
) -> None:
    envs = {e.env: e for e in load_fleet(fleet(tmp_path))}
    assert sorted(envs) == ["bad", "dev"]
    assert not envs["bad"].valid and str(envs["bad"].problems[0]).startswith(
        f"{tmp_path / 'bad' / 'x.yaml'}:3"
    )
    assert envs["dev"].needed_streams() == ("RAW",)
    assert envs["dev"].declared_streams() == {"RAW", "ORDERS"}


def test_a_fleet_folder_needs_environment_sub_folders(tmp_path: Path) -> None:
    with pytest.raises(ReconcileError, match="no environment sub-folders"):
        env_folders(tmp_path)


def test_consumers_of_an_external_stream_inherit_its_live_consumer_limits(tmp_path: Path) -> None:
    env = {e.env: e for e in load_fleet(fleet(tmp_path))}["dev"]
    raw = json.dumps({"name": "RAW", "consumer_limits": {"max_ack_pending": 50}})
    rows = desired_rows(env, Context("2.12.3", 3, (("RAW", raw),)), 7)
    by_name = {(r[2], r[3]): r for r in rows}
    assert json.loads(str(by_name[("RAW", "READER")][6]))["max_ack_pending"] == 50
    assert by_name[("RAW", "")][6] is None and by_name[("RAW", "")][8] is True  # external
    assert {r[1] for r in rows} == {7}


def test_what_the_plan_refuses_refuses_the_day(tmp_path: Path) -> None:
    env = {e.env: e for e in load_fleet(fleet(tmp_path))}["dev"]
    with pytest.raises(SpecError, match="external stream RAW does not exist"):
        desired_rows(env, Context("2.12.3", 3, (("RAW", None),)), 0)
    raw = json.dumps({"name": "RAW"})
    with pytest.raises(SpecError, match=r"allow_msg_ttl: needs nats-server 2\.11"):
        desired_rows(env, Context("2.10.25", 0, (("RAW", raw),)), 0)
