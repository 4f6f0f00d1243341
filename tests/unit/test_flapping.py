"""The agent's hold on resources healed again and again (pure: clocks given)."""

from __future__ import annotations

from reconciler.agent.flapping import FIRST_HOLD, LIMIT, MAX_HOLD, WINDOW, Flapping
from reconciler.identity import ResourceRef
from reconciler.locations import Location
from reconciler.specs.spec import Spec

ORDERS = ResourceRef("Stream", "ORDERS")
WORKER = ResourceRef("Consumer", "worker", "ORDERS")
SPECS = [
    Spec("Stream", "ORDERS", {"name": "ORDERS", "max_msgs": 10}, Location("s.yaml", 1)),
    Spec("Consumer", "worker", {"durable_name": "worker"}, Location("s.yaml", 7), "ORDERS"),
]


def _heal(flapping: Flapping, times: int, start: float, step: float = 1.0) -> float:
    for n in range(times):
        flapping.healed([ORDERS], SPECS, start + n * step, 1_000_000 + start + n * step)
    return start + (times - 1) * step


def test_limit_heals_in_the_window_hold_the_resource_and_only_it() -> None:
    flapping = Flapping()
    last = _heal(flapping, LIMIT - 1, 0.0)
    assert flapping.held(last) == {} and flapping.next_due() is None
    flapping.healed([ORDERS, WORKER], SPECS, last + 1, 0.0)  # the LIMIT-th of ORDERS, WORKER's 1st
    held = flapping.held(last + 1)
    assert list(held) == [ORDERS]
    assert f"healed {LIMIT} times" in held[ORDERS]
    assert flapping.next_due() == last + 1 + FIRST_HOLD
    assert flapping.held(last + 1 + FIRST_HOLD) == {}  # over at its end


def test_the_hold_is_due_once_and_doubles_while_the_fight_goes_on() -> None:
    flapping = Flapping()
    now = _heal(flapping, LIMIT, 0.0)
    end = now + FIRST_HOLD
    assert flapping.due(end - 0.1) == []
    assert flapping.due(end) == [ORDERS]
    assert flapping.due(end) == [] and flapping.next_due() is None  # planned once
    flapping.healed([ORDERS], SPECS, end + 1, 0.0)  # changed again right after the hold
    assert flapping.next_due() == end + 1 + 2 * FIRST_HOLD
    for n in range(10):  # never past MAX_HOLD
        flapping.healed([ORDERS], SPECS, end + 2 + n, 0.0)
    due = flapping.next_due()
    assert due is not None and due - (end + 11) == MAX_HOLD


def test_heals_spread_wider_than_the_window_never_hold() -> None:
    flapping = Flapping()
    last = _heal(flapping, 3 * LIMIT, 0.0, step=WINDOW / (LIMIT - 1) + 1)
    assert flapping.held(last) == {}
    assert flapping.held(last + WINDOW + 1) == {}
    assert flapping._heals == {}  # forgotten once left alone for the window
