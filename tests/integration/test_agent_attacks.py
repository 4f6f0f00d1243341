"""`reconcile watch` attacked by another client of the same account: any client may publish
on ``$JS.EVENT.ADVISORY.>`` (nats-server does not reserve those subjects), so every
advisory is forged text. A forged one costs a bounded re-plan and decides nothing."""

from __future__ import annotations

import json
from pathlib import Path

from agent_harness import ORDERS, Other, fixed_source, running_agent, until
from servers import NatsServer, write


def _stream_action(name: str) -> bytes:
    body = {"type": "io.nats.jetstream.advisory.v1.stream_action", "stream": name}
    return json.dumps(body).encode()


def test_a_forged_advisory_naming_an_impossible_stream_is_ignored(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """A name with a space (or CR LF) made the agent's re-plan build an invalid subject:
    nats-py's BadSubjectError ended the agent (one message from any client stopped it)."""
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), mode="heal") as (agent, _log),
            Other.connect(clean_server.url, name="mallory") as mallory,
        ):
            await until(
                lambda: agent.known and all(s == "in_sync" for s in agent.known.values()),
                what="in sync",
            )
            for name in ("A B", "bad\r\nPUB x 1", ">", "*", "x" * 300):
                before = agent.cycles
                subject = "$JS.EVENT.ADVISORY.STREAM.UPDATED.X"
                await mallory.nc.publish(subject, _stream_action(name))
                await mallory.nc.flush()
                await until(lambda b=before: agent.cycles > b, what=f"a cycle after {name!r}")
            await mallory.publish("orders.new", 3)
            config = (await mallory.info("ORDERS"))["config"]
            config.update(description="changed by hand")
            await mallory.api("STREAM.UPDATE.ORDERS", config)
            await until(lambda: agent.known.get(next(iter(agent.known))) == "healed", what="healed")
            assert agent.connected and agent.last is not None and agent.last.ok
            live = (await mallory.info("ORDERS"))["config"]
            assert live["description"] == "orders as declared"  # healed: the agent runs
            assert await mallory.messages("ORDERS") == 3

    run(scenario())
