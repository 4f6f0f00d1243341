"""Attacks on the changes landed on main (helper attack7), pure logic."""

from __future__ import annotations

from reconciler.agent.flapping import LIMIT, Flapping
from reconciler.identity import ResourceRef
from reconciler.locations import Location
from reconciler.specs.spec import Spec

ORDERS = ResourceRef("Stream", "ORDERS")


def _orders(max_msgs: int) -> list[Spec]:
    config = {"name": "ORDERS", "max_msgs": max_msgs}
    return [Spec("Stream", "ORDERS", config, Location("s.yaml", 1))]


def test_heals_toward_a_new_declared_config_each_time_never_hold() -> None:
    """Each heal applying another declared config (a person's commits) starts afresh:
    only heals back to the same declared config are a fight."""
    flapping = Flapping()
    for n in range(3 * LIMIT):
        flapping.healed([ORDERS], _orders(n), float(n), 0.0)
    assert flapping.held(3 * LIMIT) == {} and flapping.next_due() is None


def test_a_hold_ends_when_the_resource_is_declared_otherwise() -> None:
    """A commit during the hold (the person settling the fight) is applied at once."""
    flapping = Flapping()
    for n in range(LIMIT):
        flapping.healed([ORDERS], _orders(1), float(n), 0.0)
    assert ORDERS in flapping.held(LIMIT)
    flapping.declared(_orders(1))  # the same spec: still held
    assert ORDERS in flapping.held(LIMIT)
    flapping.declared(_orders(2))  # declared anew
    assert flapping.held(LIMIT) == {} and flapping.next_due() is None
