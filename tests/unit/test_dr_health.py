"""A standby pair's rules without a server (reconciler.model.standby): the mirror's
config, the fence, promotion by version, and health from both sides' STREAM.INFO."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.model.standby import (
    fence_subject,
    is_fenced,
    lacking_window,
    mirror_config,
    pair_health,
    promoted_config,
    promotion_supported,
    unknown_ids_for,
)

pytestmark = pytest.mark.unit


def info(last: int, *, mirror: dict[str, Any] | None = None, **metadata: str) -> dict[str, Any]:
    config: dict[str, Any] = {"name": "ORDERS", "metadata": metadata}
    if mirror is not None:
        config["mirror"] = {"name": "ORDERS"}
    found: dict[str, Any] = {"config": config, "state": {"last_seq": last}}
    if mirror is not None:
        found["mirror"] = mirror
    return found


def test_the_mirror_has_no_subjects_and_names_the_origins_api() -> None:
    origin = {"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 1, "max_age": 5}
    config = mirror_config(origin, api="$JS.east.API", deliver="dr.ORDERS")
    assert "subjects" not in config
    assert config["duplicate_window"] == 1  # the origin's: it records the mirrored ids
    assert config["mirror"] == {
        "name": "ORDERS",
        "external": {"api": "$JS.east.API", "deliver": "dr.ORDERS"},
    }
    assert config["max_age"] == 5
    promoted = promoted_config(config, ["orders.>"])
    assert "mirror" not in promoted and promoted["subjects"] == ["orders.>"]


def test_the_mirror_gets_the_window_the_origin_has_when_it_sets_none() -> None:
    two_minutes = 120_000_000_000
    for origin, window in (({"max_age": 5}, 5), ({}, two_minutes), ({"max_age": 0}, two_minutes)):
        config = mirror_config({"name": "ORDERS", **origin}, api="$JS.east.API")
        assert config["duplicate_window"] == window


def test_a_mirror_without_its_window_is_given_it_back_by_the_promotion() -> None:
    """A restart of the mirror's server drops its window: the pair needs the origin's
    (or the server's default for it), and the promotion gives it."""
    origin = {"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 7}
    restarted = dict(mirror_config(origin, api="$JS.east.API"))
    del restarted["duplicate_window"]
    assert lacking_window(restarted, origin) == (0, 7)
    assert lacking_window({**restarted, "duplicate_window": 3}, origin) == (3, 7)
    assert lacking_window({**restarted, "duplicate_window": 9}, origin) is None
    assert lacking_window(restarted, {"name": "ORDERS"}) == (0, 120_000_000_000)
    assert promoted_config(restarted, ["orders.>"], origin)["duplicate_window"] == 7
    kept = promoted_config({**restarted, "duplicate_window": 9}, ["orders.>"], origin)
    assert kept["duplicate_window"] == 9


def test_the_ids_mirrored_before_the_window_stay_unknown_until_out_of_it() -> None:
    """How long the messages a mirror held when its window came back stay within it,
    by the mirror's clock (the INFO's ``ts``): never more than the window."""
    ten = 10_000_000_000

    def read(last_ts: str, ts: str = "2026-01-01T00:00:04Z") -> dict[str, Any]:
        return {"state": {"last_ts": last_ts}, "ts": ts}

    assert unknown_ids_for(read("2026-01-01T00:00:00Z"), ten) == 6.0
    assert unknown_ids_for(read("2025-12-31T23:59:00Z"), ten) == 0.0  # out of it already
    assert unknown_ids_for(read("2026-01-01T00:01:00Z"), ten) == 10.0  # a clock ahead
    assert unknown_ids_for(read("0001-01-01T00:00:00Z"), ten) == 0.0  # no message
    assert unknown_ids_for(read("yesterday"), ten) == 10.0  # unreadable: all of it
    assert unknown_ids_for({}, ten) == 0.0
    no_time = {"state": {"last_ts": "2026-01-01T00:00:00Z"}}  # the server said no ts
    assert unknown_ids_for(no_time, ten) == 10.0  # the whole window, never none


def test_the_fence_is_one_subject_of_its_own() -> None:
    assert is_fenced({"name": "ORDERS", "subjects": [fence_subject("ORDERS")]})
    assert not is_fenced({"name": "ORDERS", "subjects": ["orders.>", fence_subject("ORDERS")]})
    assert not is_fenced({"name": "ORDERS", "subjects": [fence_subject("OTHER")]})


def test_promotion_needs_2_12() -> None:
    assert not promotion_supported("2.11.11")
    assert promotion_supported("2.12.0") and promotion_supported("2.15.1-beta")


def test_the_lag_is_read_on_both_sides_not_the_mirrors_word() -> None:
    link_down = info(20, mirror={"lag": 0, "active": -1})
    health = pair_health("ORDERS", info(25), link_down)
    assert health.lag == 5 and health.reported_lag == 0 and health.active_seconds is None
    assert not health.healthy
    assert any("no contact" in p for p in health.problems)


def test_a_side_that_cannot_be_read_is_said_so() -> None:
    health = pair_health("ORDERS", None, info(20, mirror={"lag": 0, "active": 10**9}), unread="x")
    assert health.lag is None and not health.healthy
    assert health.problems[0].startswith("the origin could not be read")


def test_thresholds_come_from_the_nats_cli_metadata_keys() -> None:
    recent = {"lag": 2, "active": 2 * 10**9}
    fine = pair_health("ORDERS", info(12), info(10, mirror=recent))
    assert fine.healthy
    critical = {"io.nats.monitor.lag-critical": "2", "io.nats.monitor.seen-critical": "1s"}
    flagged = pair_health("ORDERS", info(12, **critical), info(10, mirror=recent))
    assert len(flagged.problems) == 2
    garbage = {"io.nats.monitor.lag-critical": "lots", "io.nats.monitor.seen-critical": "\x1b"}
    assert pair_health("ORDERS", info(12, **garbage), info(10, mirror=recent)).healthy


def test_lag_with_a_silent_mirror_is_stale_not_healthy() -> None:
    silent = {"lag": 0, "active": 120 * 10**9}  # two minutes without contact
    assert not pair_health("ORDERS", info(30), info(20, mirror=silent)).healthy
    assert pair_health("ORDERS", info(20), info(20, mirror=silent)).healthy  # no writes


def test_the_fleet_reads_a_standby_environment_as_plan_does() -> None:
    from pathlib import Path

    from reconciler.fleet.desired import load_project_fleet

    project = Path(__file__).resolve().parents[2] / "examples" / "dr" / "reconcile.yaml"
    loaded = {env.env: env for env in load_project_fleet(project)}
    west = {spec.name: spec for spec in loaded["west"].specs}
    east = {spec.name: spec for spec in loaded["east"].specs}
    assert west["ORDERS"].config["mirror"]["external"]["api"] == "$JS.east.API"
    assert "subjects" not in west["ORDERS"].config and "shipper" not in west
    assert east["ORDERS"].config["subjects"] == ["orders.>"] and "shipper" in east


def test_only_a_consumer_a_failover_left_paused_is_finished_by_a_rerun() -> None:
    from reconciler.model.standby import left_paused

    ours = {"paused": True, "config": {"pause_until": "2999-01-01T00:00:00Z"}}
    a_persons = {"paused": True, "config": {"pause_until": "2026-12-01T00:00:00Z"}}
    assert left_paused(ours)
    assert not left_paused(a_persons) and not left_paused({"config": {}})


def test_an_origin_that_is_a_mirror_itself_is_not_healthy() -> None:
    """A restore of the standby's backup into the primary made the origin a mirror of
    itself: both sides held the same last sequence and the pair read healthy, while
    the origin took no write."""
    recent = {"lag": 0, "active": 10**9}
    health = pair_health("ORDERS", info(30, mirror=recent), info(30, mirror=recent))
    assert not health.healthy
    assert health.problems == ("the origin is a mirror itself: it takes no write",)


def test_batch_publishing_is_left_off_the_standby_and_given_back_at_its_promotion() -> None:
    """The server refuses ``allow_batched`` on a mirror (err 10209): an origin's spec
    declaring it made a standby no apply could create, and its promotion left writers'
    batches refused."""
    origin = {"name": "ORDERS", "subjects": ["orders.>"], "allow_batched": True}
    config = mirror_config(origin, api="$JS.east.API")
    assert "allow_batched" not in config
    assert promoted_config(config, ["orders.>"], origin)["allow_batched"] is True
