"""Attacks on the changes landed on main (helper attack7): the agent's hold on contested
resources, the wait for API audits, an apply that can approve nothing, Ctrl-C at the lock
and schema patterns read as ECMA-262. Real nats-server processes; what the server holds
is read with a raw client before and after."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from agent_harness import (
    ORDERS,
    Other,
    changes,
    orders_agent,
    until,
)
from cli_runner import interrupted_at_the_lock, reconcile
from servers import NatsServer, write
from test_saved_plans import state

from reconciler.agent import flapping
from reconciler.execution import lock
from reconciler.execution.lock import Holder
from reconciler.identity import ResourceRef
from reconciler.jetstream import ConnectionOptions, open_client

WORKER = ResourceRef("Consumer", "worker", "ORDERS")


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
        async with orders_agent(clean_server.url, specs, messages=5, interval=0.2) as (
            _,
            log,
            other,
        ):
            for turn in range(flapping.LIMIT + 1):
                wanted = f"orders as declared, edit {turn}"
                specs.write_text(ORDERS.replace("orders as declared", wanted), encoding="utf-8")
                # held back, it would wait for the hold (60 s)
                assert await _described(other, wanted, patience=15), turn
            assert not changes(log, "Stream ORDERS", "needs_person")
            assert await other.messages("ORDERS") == 5

    run(scenario())


def test_a_held_stream_keeps_its_consumers_healed(
    clean_server: NatsServer, tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hold is on the resource fought over: a stream held back (another writer keeps
    changing its description) still has a consumer someone deleted created again. Before,
    the held stream's refusal took every consumer of it along ('depends on Stream
    ORDERS, which needs a person') for as long as the hold (up to an hour), though the
    stream exists and nobody fought over the consumer."""
    monkeypatch.setattr(flapping, "FIRST_HOLD", 600.0)  # held for the whole test
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with orders_agent(clean_server.url, specs, other="the-other-agent") as (
            agent,
            log,
            other,
        ):
            for turn in range(flapping.LIMIT):  # the create was the first heal
                await other.update("ORDERS", description=f"the other agent's, turn {turn}")
                if turn < flapping.LIMIT - 1:
                    await until(
                        lambda n=turn: len(changes(log, "Stream ORDERS", "healed")) >= n + 2,
                        what=f"fight {turn} healed",
                    )
            await until(lambda: changes(log, "Stream ORDERS", "needs_person"), what="held")

            await other.api("CONSUMER.DELETE.ORDERS.worker")
            await until(
                lambda: agent.watch.known.get(WORKER) == "healed",
                what="worker created again (it was refused as depending on ORDERS)",
                patience=15,
            )
            info = await other.api("CONSUMER.INFO.ORDERS.worker")
            assert info["config"]["durable_name"] == "worker"
            live = (await other.info("ORDERS"))["config"]["description"]
            assert live == f"the other agent's, turn {flapping.LIMIT - 1}"  # still held
            assert await other.messages("ORDERS") == 10

    run(scenario())


def test_ctrl_c_while_a_restore_waits_for_the_lock_says_nothing_was_changed(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """Ctrl-C while `reconcile restore` waited for the apply lock exited 130 saying only
    `aborted`: not whether anything had been restored (apply says 'nothing was
    changed'). Now it says so; the server is left as it was."""
    specs = write(tmp_path, ORDERS)
    url = clean_server.url
    assert reconcile("apply", "-y", str(specs), "--server", url, cwd=tmp_path).returncode == 0
    out = tmp_path / "backup"
    assert (
        reconcile("backup", "--all", "--out", str(out), "--server", url, cwd=tmp_path).returncode
        == 0
    )

    async def emptied_and_locked() -> None:
        async with Other.connect(url) as other:
            await other.api("STREAM.DELETE.ORDERS")
        async with open_client(ConnectionOptions(servers=url)) as client:
            holder = Holder("someone", "elsewhere", os.getpid(), "run")
            await lock.acquire(client, holder, timeout=0)

    run(emptied_and_locked())
    before = state(clean_server)
    done = interrupted_at_the_lock(
        "restore", str(out), "--server", url, "--yes", "--lock-timeout", "600", cwd=tmp_path
    )
    assert done.returncode == 130, done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert "waiting up to 600s for the apply lock" in done.stderr
    assert said[-1] == "interrupted before the restore plan was made: nothing was changed", said
    assert state(clean_server) == before  # ORDERS not restored
