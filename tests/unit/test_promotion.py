"""What a standby's stream, promoted as it is, does unlike its spec (pure):
``model.promotion.promotion_gaps``. The failover's refusals of each field against a real
server are in tests/integration/test_dr_attacks18b.py."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.model.promotion import REFUSED, UNREADABLE, promotion_gaps
from reconciler.model.state import ServerInfo

SERVER = ServerInfo("2.15.1", 5)
WEEK = 7 * 24 * 3600 * 10**9
DECLARED: dict[str, Any] = {"name": "ORDERS", "subjects": ["orders.>"], "max_age": WEEK}
#: West's mirror as ``apply --env west`` makes it of DECLARED, read back (2.15.1).
MIRROR: dict[str, Any] = {
    "name": "ORDERS",
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": WEEK,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "discard": "old",
    "storage": "file",
    "num_replicas": 1,
    "duplicate_window": 120_000_000_000,
    "mirror": {"name": "ORDERS", "external": {"api": "$JS.east.API", "deliver": ""}},
    "compression": "none",
    "allow_direct": False,
    "mirror_direct": False,
    "sealed": False,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
    "consumer_limits": {},
    "allow_msg_ttl": False,
}


def gaps(change: dict[str, Any], declared: dict[str, Any] = DECLARED, **server: Any) -> list[Any]:
    at = ServerInfo(**{"version": "2.15.1", "api_level": 5, **server})
    return promotion_gaps({**MIRROR, **change}, declared, at)


def test_the_mirror_apply_makes_and_its_promotion_are_the_declared_stream() -> None:
    assert gaps({}) == []
    promoted = {k: v for k, v in MIRROR.items() if k != "mirror"} | {"subjects": ["orders.>"]}
    assert promotion_gaps(promoted, DECLARED, SERVER) == []


def test_what_the_promotion_gives_back_and_the_server_switches_on_is_no_gap() -> None:
    """``allow_msg_schedules`` is given back by the promotion, and the server then turns
    on ``allow_rollup_hdrs`` (as for the declared stream): the mirror lacks both."""
    declared = {**DECLARED, "allow_msg_schedules": True, "allow_msg_ttl": True}
    assert gaps({"allow_msg_ttl": True}, declared) == []


@pytest.mark.parametrize(
    ("change", "field", "by_update"),
    [
        ({"max_msg_size": 10}, "max_msg_size", True),
        ({"max_age": 3600 * 10**9}, "max_age", True),
        ({"retention": "interest"}, "retention", True),
        ({"retention": "workqueue"}, "retention", False),
        ({"discard": "new"}, "discard", True),
        ({"no_ack": True}, "no_ack", True),
        ({"sealed": True}, "sealed", False),
        ({"deny_delete": True}, "deny_delete", False),
        ({"allow_msg_ttl": True}, "allow_msg_ttl", False),
        ({"allow_rollup_hdrs": True}, "allow_rollup_hdrs", True),
        ({"consumer_limits": {"inactive_threshold": 2 * 10**9}}, "consumer_limits.", True),
        ({"storage": "memory"}, "storage", False),
        ({"num_replicas": 1}, "num_replicas", True),
        ({"persist_mode": "async"}, "persist_mode", False),
        ({"max_consumers": 1}, "max_consumers", True),
    ],
)
def test_a_field_that_takes_fewer_writes_or_keeps_less_is_refused(
    change: dict[str, Any], field: str, by_update: bool
) -> None:
    declared = {**DECLARED, "num_replicas": 3} if field == "num_replicas" else DECLARED
    found = gaps(change, declared)  # a seal: deny_delete, deny_purge, discard new
    assert len(found) == (4 if field == "sealed" else 1)
    (gap,) = [gap for gap in found if gap.field.startswith(field)]
    assert gap.refused and gap.by_update is by_update


def test_the_declared_value_kept_by_the_spec_refuses_its_absence_too() -> None:
    declared = {**DECLARED, "deny_delete": True, "allow_direct": True, "max_msg_size": 100}
    found = {gap.field: gap for gap in gaps({"max_msg_size": 200}, declared)}
    assert set(found) == {"deny_delete", "allow_direct"}  # a larger size takes more
    assert all(gap.refused and gap.by_update for gap in found.values())
    assert str(found["deny_delete"]).startswith("deny_delete false (declared true): it allows")


def test_what_only_answers_otherwise_is_said_not_refused() -> None:
    declared = {**DECLARED, "storage": "memory", "retention": "interest"}
    found = gaps({"allow_direct": True, "storage": "file"}, declared)
    assert {(gap.field, gap.refused) for gap in found} == {
        ("allow_direct", False),
        ("storage", False),
        ("retention", False),  # limits keeps more than the declared interest
    }


def test_an_update_sets_max_consumers_only_from_2_12_5() -> None:
    (gap,) = gaps({"max_consumers": 1}, version="2.12.3", api_level=2)
    assert gap.field == "max_consumers" and not gap.by_update


def test_a_config_no_server_sends_is_refused() -> None:
    forged = {**MIRROR, "mirror": None, "duplicate_window": 0, "max_age": "forever"}
    assert promotion_gaps(forged, DECLARED, SERVER) == [UNREADABLE]


def test_every_refused_field_is_one_the_field_table_knows() -> None:
    from reconciler.model.defaults import STREAM_FIELDS

    assert {rule.field.split(".")[0] for rule in REFUSED} <= set(STREAM_FIELDS)
