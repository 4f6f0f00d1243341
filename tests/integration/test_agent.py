"""`reconcile watch` on a real server: drift made by another client is reported with who
made it, healed when safe, and never healed when the repair would destroy data."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agent_harness import (
    ORDERS,
    Other,
    changes,
    cycles_after,
    fixed_source,
    orders_agent,
    running_agent,
    until,
)
from servers import NatsServer, write

from reconciler.agent.cycles import Watch
from reconciler.agent.listener import AdvisoryListener


def test_drift_by_another_client_is_healed_and_says_who(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), mode="heal") as (agent, log),
            Other.connect(clean_server.url) as alice,
        ):
            await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
            await until(
                lambda: (
                    agent.watch.known and all(s == "in_sync" for s in agent.watch.known.values())
                ),
                what="in sync",
            )
            await alice.publish("orders.new", 10)
            config = (await alice.info("ORDERS"))["config"]
            config.update(description="changed by hand", max_msgs=5000)
            await alice.api("STREAM.UPDATE.ORDERS", config)

            healed = await until(
                lambda: changes(log, "Stream ORDERS", "healed")[1:], what="ORDERS healed again"
            )
            cause = healed[0]["cause"]
            assert cause["client"] == "alice-laptop"
            assert cause["operation"] == "update"
            assert cause["account"] == "$G"
            assert cause["host"] == "127.0.0.1"
            assert sorted(healed[0]["fields"]) == ["description", "max_msgs"]
            live = (await alice.info("ORDERS"))["config"]
            assert (live["description"], live["max_msgs"]) == ("orders as declared", 1000)
            assert await alice.messages("ORDERS") == 10  # the heal kept every message
            assert agent.metrics.drift_events.labels("api")._value.get() >= 1
            targeted = agent.metrics.registry.get_sample_value(
                "reconcile_plan_duration_seconds_count", {"scope": "targeted"}
            )
            assert targeted, "the advisory's re-plan read only ORDERS"
            listed = {r["name"]: r["state"] for r in agent.status()["last_cycle"]["resources"]}
            assert set(listed) == {"ORDERS", "worker"}

    run(scenario())


def test_a_heal_waits_for_the_audit_that_comes_late_and_names_who_changed_it(
    clean_server: NatsServer, tmp_path: Path, run, monkeypatch
) -> None:
    """The server sends the stream's event first and its API audit (who did it) right
    after; under load the audit can come after the debounce. The heal waits for it (a CI
    run once healed a change with no cause)."""
    original = AdvisoryListener.on_advisory

    def audits_late(self: AdvisoryListener, subject: str, data: bytes) -> None:
        if subject.endswith(".ADVISORY.API"):  # as a loaded machine delivers it
            asyncio.get_running_loop().call_later(0.4, original, self, subject, data)
        else:
            original(self, subject, data)

    monkeypatch.setattr(AdvisoryListener, "on_advisory", audits_late)
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with orders_agent(clean_server.url, specs) as (_, log, alice):
            await until(lambda: changes(log, "Stream ORDERS", "in_sync"), what="in sync")
            await alice.update("ORDERS", description="changed by hand")
            healed = await until(
                lambda: changes(log, "Stream ORDERS", "healed")[1:], what="ORDERS healed again"
            )
            assert healed[0].get("cause", {}).get("client") == "alice-laptop", healed[0]
            assert healed[0]["cause"]["operation"] == "update"
            assert await alice.messages("ORDERS") == 10

    run(scenario())


def test_a_change_whose_audit_comes_while_a_cycle_finds_it_in_sync_is_healed_naming_who(
    clean_server: NatsServer, tmp_path: Path, run, monkeypatch
) -> None:
    """A change made after a cycle read the stream, its audit come before that cycle
    reported the stream back in sync: the next cycle heals it and still names who made
    it (a CI run healed such a change with no cause: the in-sync report forgot it)."""
    original = Watch._plan_and_heal
    drifted: list[bool] = []

    async def change_after_the_read(self: Watch, *args: Any) -> Any:
        resources, scoped = await original(self, *args)
        found = {r.key: r.state for r in resources.of_streams({"ORDERS"})}
        if found.get(("ORDERS", None)) == "in_sync" and not drifted:
            drifted.append(True)
            async with Other.connect(clean_server.url) as alice:
                await alice.update("ORDERS", description="changed by hand")
            await until(lambda: ("ORDERS", None) in self.listener.causes, what="its audit")
        return resources, scoped

    monkeypatch.setattr(Watch, "_plan_and_heal", change_after_the_read)
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with orders_agent(clean_server.url, specs) as (_, log, alice):
            healed = await until(
                lambda: changes(log, "Stream ORDERS", "healed")[1:], what="ORDERS healed again"
            )
            assert drifted
            assert healed[0].get("cause", {}).get("client") == "alice-laptop", healed[0]
            assert healed[0]["cause"]["operation"] == "update"
            assert healed[0]["fields"] == ["description"]
            assert (await alice.info("ORDERS"))["config"]["description"] == "orders as declared"
            assert await alice.messages("ORDERS") == 10

    run(scenario())


def test_a_change_that_changed_nothing_is_not_blamed_for_a_later_one(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """alice sends a consumer's config as it is (an update that changes nothing); later
    the server deletes the consumer itself (its inactive threshold): the heal names no
    one, never alice for what she did not do."""
    idle = ORDERS.replace(
        "ack_policy: explicit\n", "ack_policy: explicit\ninactive_threshold: 4s\n"
    )
    specs = write(tmp_path, idle)

    async def scenario() -> None:
        async with orders_agent(clean_server.url, specs) as (agent, log, alice):
            await until(lambda: changes(log, "Consumer ORDERS/worker", "in_sync"), what="in sync")
            config = (await alice.api("CONSUMER.INFO.ORDERS.worker"))["config"]
            cycles = agent.watch.cycles
            await alice.api(
                "CONSUMER.CREATE.ORDERS.worker", {"stream_name": "ORDERS", "config": config}
            )
            await until(lambda: agent.watch.cycles > cycles, what="the cycle its audit woke")
            assert agent.watch.known and all(s == "in_sync" for s in agent.watch.known.values())
            healed = await until(
                lambda: changes(log, "Consumer ORDERS/worker", "healed")[1:],
                what="the consumer the server deleted made again",
                patience=30,
            )
            assert "cause" not in healed[0], healed[0]
            assert await alice.messages("ORDERS") == 10

    run(scenario())


def test_a_call_the_server_refused_is_not_blamed_for_a_change(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """The server deletes an idle consumer itself; alice then asks to delete it too and is
    told "consumer not found": her call changed nothing (its audit says the error), so
    the heal names no one, never "deleted by alice"."""
    idle = ORDERS.replace(
        "ack_policy: explicit\n", "ack_policy: explicit\ninactive_threshold: 3s\n"
    )
    specs = write(tmp_path, idle)

    async def scenario() -> None:
        async with orders_agent(clean_server.url, specs) as (_, log, alice):
            refused: list[dict[str, Any]] = []

            async def too_late(_: Any) -> None:
                reply = await alice.nc.request("$JS.API.CONSUMER.DELETE.ORDERS.worker", b"")
                refused.append(json.loads(reply.data))

            deleted = "$JS.EVENT.ADVISORY.CONSUMER.DELETED.ORDERS.worker"
            await alice.nc.subscribe(deleted, cb=too_late)
            healed = await until(
                lambda: changes(log, "Consumer ORDERS/worker", "healed")[1:],
                what="the consumer the server deleted made again",
                patience=30,
            )
            assert refused and "error" in refused[0], refused
            assert "cause" not in healed[0], healed[0]

    run(scenario())


def test_who_deleted_a_stream_nobody_declared_is_not_blamed_when_a_spec_declares_it(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """alice makes and deletes a scratch stream no spec declares; later a spec declares a
    stream of that name: the agent creates it because of the spec, never saying alice
    deleted it (the audit named a resource no cycle found, and was kept for ever)."""
    specs = write(tmp_path, ORDERS)
    scratch = 'kind: Stream\nname: SCRATCH\nsubjects: ["scratch.>"]\n'

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), interval=0.3) as (agent, log),
            Other.connect(clean_server.url) as alice,
        ):
            await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
            await alice.api("STREAM.CREATE.SCRATCH", {"name": "SCRATCH", "subjects": ["scratch.>"]})
            await cycles_after(agent)
            await alice.api("STREAM.DELETE.SCRATCH")
            await cycles_after(agent)
            specs.write_text(ORDERS + "---\n" + scratch, encoding="utf-8")
            healed = await until(
                lambda: changes(log, "Stream SCRATCH", "healed"), what="SCRATCH declared"
            )
            assert "cause" not in healed[0], healed[0]

    run(scenario())


def test_a_stream_deleted_out_of_band_is_created_again_naming_who_and_what_went(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), mode="heal") as (agent, log),
            Other.connect(clean_server.url, name="cleanup-script") as bob,
        ):
            await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
            await bob.publish("orders.new", 7)
            await until(
                lambda: getattr(agent.watch.streams.get("ORDERS"), "messages", 0) == 7,
                what="a cycle that read the 7 messages",
            )
            await bob.api("STREAM.DELETE.ORDERS")

            again = await until(
                lambda: changes(log, "Stream ORDERS", "healed")[1:], what="ORDERS created again"
            )
            assert again[0]["cause"]["client"] == "cleanup-script"
            assert again[0]["cause"]["operation"] == "delete"
            assert again[0]["lost"]["messages"] == 7
            assert "7 message(s)" in again[0]["message"]
            await until(
                lambda: changes(log, "Consumer ORDERS/worker", "healed")[1:],
                what="the consumer created again",
            )
            assert await bob.messages("ORDERS") == 0
            status = agent.status()["last_cycle"]
            assert status["ok"]

    run(scenario())


def test_a_repair_that_would_destroy_data_is_reported_and_never_applied(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """A storage change (a replace) and a limit lowered under what the stream holds (a
    lossy update): both need a person; the messages stay."""
    specs = write(
        tmp_path,
        ORDERS + '---\nkind: Stream\nname: AUDIT\nsubjects: ["audit.>"]\nmax_msgs: 10\n',
    )

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), mode="heal") as (agent, log),
            Other.connect(clean_server.url) as alice,
        ):
            await until(lambda: changes(log, "Stream AUDIT", "healed"), what="AUDIT created")
            await alice.api("STREAM.DELETE.ORDERS")
            memory = {"name": "ORDERS", "subjects": ["orders.>"], "storage": "memory"}
            await alice.api("STREAM.CREATE.ORDERS", memory)
            await alice.publish("orders.new", 5)
            audit = (await alice.info("AUDIT"))["config"]
            audit["max_msgs"] = 100
            await alice.api("STREAM.UPDATE.AUDIT", audit)
            await alice.publish("audit.x", 50)

            await until(
                lambda: (
                    changes(log, "Stream ORDERS", "needs_person")
                    and changes(log, "Stream AUDIT", "needs_person")
                ),
                what="both reported as needing a person",
            )
            await cycles_after(agent, 2)
            orders = await alice.info("ORDERS")
            assert orders["config"]["storage"] == "memory"
            assert orders["state"]["messages"] == 5
            audit_now = await alice.info("AUDIT")
            assert audit_now["config"]["max_msgs"] == 100
            assert audit_now["state"]["messages"] == 50
            (replace,) = changes(log, "Stream ORDERS", "needs_person")
            assert "replace" in replace["why"]
            (lossy,) = changes(log, "Stream AUDIT", "needs_person")
            assert "deletes stored data" in lossy["why"]
            consumer = changes(log, "Consumer ORDERS/worker", "needs_person")
            assert consumer and "Stream ORDERS" in consumer[0]["why"]

    run(scenario())


def test_observe_mode_reports_drift_and_writes_nothing(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), mode="observe") as (
                agent,
                log,
            ),
            Other.connect(clean_server.url) as alice,
        ):
            await until(lambda: changes(log, "Stream ORDERS", "missing"), what="ORDERS missing")
            await alice.api("STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["orders.>"]})
            drifted = await until(
                lambda: changes(log, "Stream ORDERS", "drifted"), what="ORDERS drifted"
            )
            assert drifted[0]["cause"]["operation"] == "create"
            await cycles_after(agent, 2)
            live = (await alice.info("ORDERS"))["config"]
            assert live["max_msgs"] == -1  # never written
            assert agent.metrics.heals.labels("Stream")._value.get() == 0

    run(scenario())


def test_a_resource_in_lifecycle_observe_mode_is_never_written_by_a_heal(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """mode: observe on the spec: the planner gives it no step, so the agent in heal mode
    reports its drift (and that it is missing) and never writes it."""
    specs = write(
        tmp_path,
        ORDERS + "---\nkind: Stream\nname: LEGACY\nsubjects: [legacy.>]\nmax_msgs: 10\n"
        "lifecycle: {mode: observe}\n"
        + "---\nkind: Stream\nname: GHOST\nsubjects: [ghost.>]\nlifecycle: {mode: observe}\n",
    )

    async def scenario() -> None:
        async with Other.connect(clean_server.url) as alice:
            await alice.api("STREAM.CREATE.LEGACY", {"name": "LEGACY", "subjects": ["legacy.>"]})
            await alice.publish("legacy.x", 20)
            async with running_agent(fixed_source([specs], clean_server.url), mode="heal") as (
                agent,
                log,
            ):
                await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS made")
                await cycles_after(agent, 2)
                (legacy,) = changes(log, "Stream LEGACY", "drifted")
                assert "max_msgs" in legacy["fields"]
                assert "observe" in legacy["why"]
                (ghost,) = changes(log, "Stream GHOST", "missing")
                assert "observe" in ghost["why"]
                info = await alice.info("LEGACY")
                assert info["config"]["max_msgs"] == -1
                assert info["state"]["messages"] == 20
                names = json.loads(
                    (await alice.nc.request("$JS.API.STREAM.NAMES", b"{}", timeout=5)).data
                )["streams"]
                assert "GHOST" not in names

    run(scenario())


def test_a_targeted_re_plan_reads_spec_files_changed_since_the_full_one(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """Targeted plans reuse the specs the last full plan validated only while the files
    are the same: an edit is planned by the next advisory's re-plan, not an interval later."""
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), interval=60.0) as (agent, log),
            Other.connect(clean_server.url) as alice,
        ):
            await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
            specs.write_text(ORDERS.replace("orders as declared", "edited"), encoding="utf-8")
            config = (await alice.info("ORDERS"))["config"]
            config["max_msgs"] = 7
            await alice.api("STREAM.UPDATE.ORDERS", config)
            healed = await until(
                lambda: changes(log, "Stream ORDERS", "healed")[1:], what="ORDERS healed again"
            )
            assert "description" in healed[0]["fields"]
            live = (await alice.info("ORDERS"))["config"]
            assert (live["description"], live["max_msgs"]) == ("edited", 1000)
            assert agent.watch.cycles == 2  # one full plan, one targeted: no interval between

    run(scenario())


def test_an_edited_spec_file_is_planned_by_the_next_interval(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """Full plans reuse validated specs only while the files are unchanged."""
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), interval=0.5) as (_, log),
            Other.connect(clean_server.url) as alice,
        ):
            await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
            specs.write_text(ORDERS.replace("orders as declared", "edited"), encoding="utf-8")
            await until(
                lambda: changes(log, "Stream ORDERS", "healed")[1:], what="the edit applied"
            )
            assert (await alice.info("ORDERS"))["config"]["description"] == "edited"

    run(scenario())


def test_a_consumer_changed_by_another_client_is_healed_and_says_who(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """A consumer update makes no consumer advisory (only the API audit): still seen at
    once, named as an update, healed."""
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), interval=60.0) as (agent, log),
            Other.connect(clean_server.url, name="ops-console") as ops,
        ):
            await until(lambda: changes(log, "Consumer ORDERS/worker", "healed"), what="created")
            info = await ops.api("CONSUMER.INFO.ORDERS.worker")
            config = {**info["config"], "max_ack_pending": 5}
            body = {"stream_name": "ORDERS", "config": config, "action": "update"}
            await ops.api("CONSUMER.CREATE.ORDERS.worker", body)
            healed = await until(
                lambda: changes(log, "Consumer ORDERS/worker", "healed")[1:], what="healed again"
            )
            assert healed[0]["cause"]["client"] == "ops-console"
            assert healed[0]["cause"]["operation"] == "update"
            assert healed[0]["fields"] == ["max_ack_pending"]
            again = await ops.api("CONSUMER.INFO.ORDERS.worker")
            assert again["config"]["max_ack_pending"] == 1000
            assert agent.watch.cycles == 2  # the audit alone woke it: no interval passed

    run(scenario())
