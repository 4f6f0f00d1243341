"""A resource another writer keeps changing is healed a few times, then held back and
said contested (needs_person), its hold doubling while the fight goes on: two agents (or
environments) with other specs on one account never fight without end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_harness import ORDERS, changes, orders_agent, until
from servers import NatsServer, write

from reconciler.agent import flapping


def test_a_resource_changed_back_again_and_again_is_held_back_then_healed_again(
    clean_server: NatsServer, tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flapping, "FIRST_HOLD", 2.0)  # the test's own, not 60 s
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with orders_agent(clean_server.url, specs, other="the-other-agent") as (
            agent,
            log,
            other,
        ):

            async def fight(turn: int) -> None:
                await other.update("ORDERS", description=f"the other agent's, turn {turn}")

            # the create was the first heal: four more fights are healed, up to LIMIT
            for turn in range(flapping.LIMIT - 1):
                await fight(turn)
                await until(
                    lambda n=turn: len(changes(log, "Stream ORDERS", "healed")) >= n + 2,
                    what=f"fight {turn} healed",
                )
            await fight(99)
            held = await until(
                lambda: changes(log, "Stream ORDERS", "needs_person"), what="held back"
            )
            assert "another writer keeps changing it" in held[0]["why"], held[0]
            assert (held[0].get("cause") or {}).get("client") == "the-other-agent", held[0]
            status = {r["name"]: r for r in agent.status()["last_cycle"]["resources"]}
            assert status["ORDERS"]["refusal"] == "contested"
            live = (await other.info("ORDERS"))["config"]["description"]
            assert live == "the other agent's, turn 99"  # not healed while held back
            assert (
                agent.metrics.registry.get_sample_value(
                    "reconcile_steps_refused_total", {"action": "contested"}
                )
                or 0
            ) >= 1

            # the hold over (2 s), the next cycle heals it; a fight right after holds it
            # twice as long
            healed = len(changes(log, "Stream ORDERS", "healed"))
            await until(
                lambda: (
                    len(changes(log, "Stream ORDERS", "healed")) > healed
                    or (agent.watch.known.get(("ORDERS", None)) == "in_sync")
                ),
                what="healed once the hold is over",
                patience=30,
            )
            assert (await other.info("ORDERS"))["config"]["description"] == "orders as declared"
            assert await other.messages("ORDERS") == 10  # every heal kept the messages

    run(scenario())
