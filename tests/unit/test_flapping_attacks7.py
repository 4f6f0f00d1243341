"""Attacks on the agent's hold on contested resources (helper attack7), pure logic."""

from __future__ import annotations

from reconciler.agent.flapping import LIMIT, Flapping
from reconciler.identity import ResourceRef
from reconciler.locations import Location
from reconciler.model.state import ServerInfo
from reconciler.planning.heal import NeedsPerson, split_for_heal
from reconciler.planning.steps import Create, Plan, Update
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


def test_a_held_stream_holds_back_its_consumers_only_when_it_is_missing() -> None:
    """Held back (contested), an existing stream's update leaves its consumer's create
    and a stream sourcing it to the heal; a missing stream's create takes them along."""
    server = ServerInfo(version="2.15.1", api_level=5)
    worker = ResourceRef("Consumer", "worker", "ORDERS")
    copy = ResourceRef("Stream", "COPY")
    copying = {"name": "COPY", "sources": [{"name": "ORDERS"}]}
    held = {ORDERS: "healed 5 times"}
    for first, blocked in (
        (Update(ref=ORDERS, config={"name": "ORDERS"}, live={"name": "ORDERS"}), False),
        (Create(ref=ORDERS, config={"name": "ORDERS"}), True),
    ):
        plan = Plan(
            server,
            changes=(
                first,
                Create(ref=worker, config={"durable_name": "worker"}),
                Create(ref=copy, config=copying),
            ),
        )
        split = split_for_heal(plan, held)
        kinds = {r.step.ref: r.kind for r in split.refused}
        assert kinds[ORDERS] is NeedsPerson.CONTESTED
        if blocked:
            assert kinds[worker] is kinds[copy] is NeedsPerson.DEPENDS
        else:
            assert [s.ref for s in split.steps] == [worker, copy]
