"""Attacks on the changes landed on main (helper attack7): the agent's hold on contested
resources, the wait for API audits, an apply that can approve nothing, Ctrl-C at the lock
and schema patterns read as ECMA-262. Real nats-server processes; what the server holds
is read with a raw client before and after."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent_harness import ORDERS, Other, changes, fixed_source, running_agent, until
from servers import NatsServer, write

from reconciler.agent import flapping


async def _described(other: Other, wanted: str, patience: float) -> bool:
    """Whether ORDERS' description on the server becomes ``wanted`` within ``patience``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while loop.time() < deadline:
        if (await other.info("ORDERS"))["config"]["description"] == wanted:
            return True
        await asyncio.sleep(0.1)
    return False


def test_a_spec_edited_again_and_again_is_applied_each_time_never_held_as_contested(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """A person editing a spec (a commit, a file) is not another writer: each new
    declared config is healed, even past LIMIT edits within the window. Before, every
    applied step counted toward the hold, so the fifth edit within ten minutes was refused
    as 'contested' (another writer keeps changing it) and left unapplied for 60 s."""
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), interval=0.2) as (_, log),
            Other.connect(clean_server.url) as other,
        ):
            await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
            await other.publish("orders.new", 5)
            for turn in range(flapping.LIMIT + 1):
                wanted = f"orders as declared, edit {turn}"
                specs.write_text(ORDERS.replace("orders as declared", wanted), encoding="utf-8")
                # held back, it would wait for the hold (60 s)
                assert await _described(other, wanted, patience=15), turn
            assert not changes(log, "Stream ORDERS", "needs_person")
            assert await other.messages("ORDERS") == 5

    run(scenario())
