"""An attacker and a careless user against one `reconcile watch` process serving many
environments: a client of one environment's account that answers the agent's JetStream
requests with replies no server sends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats
from agent_harness import changes, get, lines, project_sources, running_agent, until
from test_agent_envs import _declared, _drift, _project


def test_forged_replies_from_one_environments_account_never_stop_the_others(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """On a server without JetStream any client of the account may answer ``$JS.API.>``:
    mallory answers every request of the agent with a reply no server sends. That
    environment's cycles fail (said in /status); the other one keeps healing."""
    servers = {"good": server_factory(), "evil": server_factory(jetstream=False)}
    sources = project_sources(_project(tmp_path, servers))

    async def scenario() -> None:
        mallory = await nats.connect(servers["evil"].url, name="mallory")

        async def forge(msg: Any) -> None:
            await msg.respond(b'{"error": "boom", "api": 5, "streams": [{"config": 5}]}')

        await mallory.subscribe("$JS.API.>", cb=forge)
        try:
            async with running_agent(sources, mode="heal", interval=0.5) as (agent, log):
                evil = agent.watches["evil"]
                await until(
                    lambda: agent.stop.is_set() or evil.cycles >= 2, what="evil's cycles fail"
                )
                assert not agent.stop.is_set(), log.getvalue()[-2000:]
                await until(
                    lambda: changes(log, "Stream ORDERS", "healed", "good"), what="good healed"
                )
                await _drift(servers["good"].url, description="changed by hand")
                await until(
                    lambda: len(changes(log, "Stream ORDERS", "healed", "good")) > 1,
                    what="good healed again while evil fails",
                )
                assert await _declared(servers["good"].url)

                status = json.loads((await get(agent, "/status"))[1])["environments"]
                assert status["good"]["ready"] is True
                assert status["evil"]["ready"] is False
                assert status["evil"]["last_cycle"]["ok"] is False
                assert status["evil"]["last_cycle"]["error"]
                failed = [
                    line
                    for line in lines(log)
                    if line["event"] == "cycle" and line.get("env") == "evil"
                ]
                assert failed and all(line.get("error") for line in failed)
                assert "boom" not in log.getvalue()  # the forged text is not echoed
        finally:
            await mallory.close()

    run(scenario())
