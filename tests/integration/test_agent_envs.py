"""`reconcile watch` over many NATS systems: one process serving a project's
environments (one server stopped, one hung: the others keep healing), shards that split
the environments between processes (one killed, its environment healed by the restarted
shard), and two agents on one environment (the apply lock: one heal, never two)."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import nats
from agent_harness import (
    ORDERS,
    Other,
    agent_process,
    changes,
    fixed_source,
    get,
    git_agent,
    lines,
    orders_healed_in,
    project_of,
    project_sources,
    running_agent,
    stop_all,
    stopped,
    until,
    wait_for_line,
)
from cli_runner import reconcile
from prometheus_client.parser import text_string_to_metric_families
from servers import NatsServer, write
from test_agent_git import NEW_STREAM, origin, push_commit

from reconciler.agent.shards import owner
from reconciler.jetstream import ConnectionOptions


def _project(root: Path, servers: dict[str, NatsServer]) -> Path:
    """A repository: ORDERS in specs/, one environment per server."""
    return project_of(root, {name: server.url for name, server in servers.items()})


async def _drift(url: str, **changed: Any) -> None:
    """Another client (alice) changes ORDERS' config by hand."""
    async with Other.connect(url) as alice:
        config = (await alice.info("ORDERS"))["config"]
        config.update(changed)
        await alice.api("STREAM.UPDATE.ORDERS", config)


async def _declared(url: str) -> bool:
    async with Other.connect(url, name="checker") as bob:
        config = (await bob.info("ORDERS"))["config"]
    return bool(config.get("description") == "orders as declared" and config["max_msgs"] == 1000)


def test_one_process_heals_every_environment_while_one_server_is_down_and_one_hangs(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    servers = {name: server_factory() for name in ("east", "west", "gone", "hung")}
    project = _project(tmp_path, servers)
    # a request to the hung server waits a minute: an agent that planned one environment
    # after the other would keep east and west waiting past the test's patience
    sources = project_sources(project, ConnectionOptions(timeout=60.0))

    async def scenario() -> None:
        async with running_agent(sources, mode="heal", interval=1.0) as (agent, log):
            await orders_healed_in(log, servers)
            async with Other.connect(servers["east"].url) as alice:
                await alice.publish("orders.new", 10)
            await asyncio.to_thread(servers["hung"].pause)
            await asyncio.to_thread(servers["gone"].kill)
            await until(
                lambda: agent.watches["gone"].link.reachable is False, what="gone unreachable"
            )
            healed_east = len(changes(log, "Stream ORDERS", "healed", "east"))
            await _drift(servers["east"].url, description="changed by hand", max_msgs=5000)
            async with Other.connect(servers["west"].url) as alice:
                await alice.api("STREAM.DELETE.ORDERS")
            await until(
                lambda: len(changes(log, "Stream ORDERS", "healed", "east")) > healed_east,
                what="east healed while gone is down and hung hangs",
            )
            await until(
                lambda: len(changes(log, "Stream ORDERS", "healed", "west")) > 1,
                what="west's ORDERS created again",
            )
            assert await _declared(servers["east"].url)
            assert await _declared(servers["west"].url)
            async with Other.connect(servers["east"].url) as alice:
                assert await alice.messages("ORDERS") == 10  # the heal kept every message

            status = json.loads((await get(agent, "/status"))[1])
            gone = status["environments"]["gone"]
            assert gone["reachable"] is False and gone["connected"] is False
            assert gone["unreachable_since"] is not None and gone["error"]
            for env in ("east", "west"):
                assert status["environments"][env]["reachable"] is True
                assert status["environments"][env]["ready"] is True
            assert status["environments"]["gone"]["ready"] is False
            # one server down is the world's fault: the agent stays ready (a rollout of it
            # would stall otherwise); /status and reconcile_connected say which is down
            assert (await get(agent, "/readyz"))[0] == 200

            families = {
                f.name: f
                for f in text_string_to_metric_families((await get(agent, "/metrics"))[1].decode())
            }
            connected = {s.labels["env"]: s.value for s in families["reconcile_connected"].samples}
            assert connected["gone"] == 0 and connected["east"] == 1 and connected["west"] == 1
            assert all("env" in s.labels for f in families.values() for s in f.samples)

            for line in lines(log):
                if line["event"] in ("cycle", "change", "error", "notice"):
                    assert line.get("env") in servers, line
        await asyncio.to_thread(servers["hung"].resume)

    run(scenario())


def _names_one_per_shard() -> tuple[str, str]:
    """Two environment names that rendezvous hashing gives to shards 0 and 1 of 2."""
    candidates = ["dev", "prod", "staging", "eu", "us", "asia", "qa", "perf"]
    zero = next(n for n in candidates if owner(n, 2) == 0)
    one = next(n for n in candidates if owner(n, 2) == 1)
    return zero, one


def _healed(env: str, resource: str = "Stream ORDERS") -> Any:
    return lambda line: (
        line["event"] == "change"
        and line.get("env") == env
        and line["resource"] == resource
        and line["state"] == "healed"
    )


def test_a_killed_shard_restarted_takes_its_environment_back_and_heals_it(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    zero, one = _names_one_per_shard()
    servers = {zero: server_factory(), one: server_factory()}
    _project(tmp_path, servers)
    common = ["--mode", "heal", "--interval", "1h", "--listen", "127.0.0.1:0", "--log-format"]
    args = [*common, "json", "--project", "reconcile.yaml"]
    first, second = tmp_path / "shard0.log", tmp_path / "shard1.log"
    agents = [
        agent_process([*args, "--shard", "0/2"], cwd=tmp_path, log=first),
        # the pod-name form a StatefulSet gives (examples/agent/kubernetes.yaml)
        agent_process([*args, "--shard", "reconcile-watch-1/2"], cwd=tmp_path, log=second),
    ]
    try:
        wait_for_line(first, _healed(zero), f"shard 0 creates ORDERS in {zero}")
        wait_for_line(second, _healed(one), f"shard 1 creates ORDERS in {one}")
        for server in servers.values():
            run(_publish_ten(server.url))

        agents[1].send_signal(signal.SIGKILL)
        agents[1].wait(10)
        run(_drift(servers[one].url, description="changed by hand", max_msgs=5000))
        run(_delete_consumer(servers[one].url))
        run(_drift(servers[zero].url, description="changed by hand"))
        wait_for_line(
            first,
            lambda line: (
                line["event"] == "change"
                and line.get("env") == zero
                and line.get("cause", {}).get("operation") == "update"
                and line["state"] == "healed"
            ),
            "shard 0 heals its own environment meanwhile",
        )
        assert not run(_declared(servers[one].url))  # nobody else heals shard 1's environment

        agents[1] = agent_process(
            [*args, "--shard", "reconcile-watch-1/2"], cwd=tmp_path, log=second
        )
        # its first cycle (at start: the interval is an hour) heals what changed meanwhile
        cycles = wait_for_line(
            second, lambda line: line["event"] == "cycle", "the restarted shard's first cycle"
        )
        assert cycles[0]["trigger"] == "connected" and cycles[0].get("healed") == 2, cycles[0]
        assert run(_declared(servers[one].url))
        assert run(_messages(servers[one].url)) == 10
        assert run(_consumers(servers[one].url)) == ["worker"]
        for path, mine in ((first, zero), (second, one)):
            named = {
                line.get("env")
                for line in lines(path.read_text())
                if line["event"] in ("cycle", "change")
            }
            assert named == {mine}, (path.name, named)  # one environment, one agent
    finally:
        stop_all(agents)


async def _publish_ten(url: str) -> None:
    async with Other.connect(url) as alice:
        await alice.publish("orders.new", 10)


async def _messages(url: str) -> int:
    async with Other.connect(url, name="checker") as bob:
        return await bob.messages("ORDERS")


async def _consumers(url: str) -> list[str]:
    async with Other.connect(url, name="checker") as bob:
        return sorted(c["name"] for c in (await bob.api("CONSUMER.LIST.ORDERS"))["consumers"])


async def _delete_consumer(url: str) -> None:
    async with Other.connect(url) as alice:
        await alice.api("CONSUMER.DELETE.ORDERS.worker")


def test_a_shard_whose_every_server_is_down_stays_ready_and_one_reachable_failing_is_not(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """A shard serving one environment (a StatefulSet's pod): its server killed, the
    agent is still ready (/readyz 200: the world's fault; a rollout of the agents must
    not stall on it), while /status and ``reconcile_connected`` say the environment is
    down. Its server back and every plan failing (an invalid spec: maybe the agent's own
    fault, and the rollout should stop) it is 503."""
    servers = {"only": server_factory()}
    sources = project_sources(
        _project(tmp_path, servers), ConnectionOptions(timeout=1.0, connect_timeout=1.0)
    )

    async def scenario() -> None:
        async with running_agent(sources, mode="heal", interval=0.5) as (agent, log):
            await orders_healed_in(log, ["only"])
            assert (await get(agent, "/readyz"))[0] == 200
            only = agent.watches["only"]
            server = servers["only"]
            await asyncio.to_thread(server.kill)
            await until(lambda: only.link.reachable is False, what="only unreachable")
            assert (await get(agent, "/readyz"))[0] == 200
            status = json.loads((await get(agent, "/status"))[1])
            assert status["ready"] is True
            assert status["environments"]["only"]["ready"] is False
            assert status["environments"]["only"]["reachable"] is False
            await asyncio.to_thread(server.start)
            await until(lambda: only.last is not None and only.last.ok, what="planned again")
            write(tmp_path / "specs", "kind: Stream\nname: [not a name]\n", "broken.yaml")
            await until(
                lambda: only.link.reachable and only.last is not None and not only.last.ok,
                what="a plan failed on the reachable server (an invalid spec)",
            )
            code, body = await get(agent, "/readyz")
            assert code == 503, body

    run(scenario())


def test_two_agents_on_one_environment_heal_each_change_once(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """A shard restarted while the old process still runs (a rolling update, a paused
    pod) has two agents on one environment: the apply lock serialises their heals and
    each plans again under it, so every change is repaired by one write."""
    specs = write(tmp_path, ORDERS)
    url = clean_server.url

    async def scenario() -> None:
        audits: list[str] = []
        watcher = await nats.connect(url, name="auditor")

        async def note(msg: Any) -> None:
            subject = json.loads(msg.data).get("subject")
            if isinstance(subject, str):
                audits.append(subject)

        await watcher.subscribe("$JS.EVENT.ADVISORY.API", cb=note)
        try:
            async with (
                running_agent(fixed_source([specs], url), mode="heal", interval=0.5) as (one, log1),
                running_agent(fixed_source([specs], url), mode="heal", interval=0.5) as (two, log2),
            ):
                await until(
                    lambda: all(
                        a.watch.known and set(a.watch.known.values()) == {"in_sync"}
                        for a in (one, two)
                    ),
                    what="both agents in sync",
                )
                assert audits.count("$JS.API.STREAM.CREATE.ORDERS") == 1

                def heals() -> int:
                    return len(changes(log1, "Stream ORDERS", "healed")) + len(
                        changes(log2, "Stream ORDERS", "healed")
                    )

                for round_ in range(3):
                    await _drift(url, description=f"changed by hand {round_}")
                    await until(lambda r=round_: heals() >= r + 2, what="healed")
                    start = (one.watch.cycles, two.watch.cycles)
                    await until(
                        lambda s=start: one.watch.cycles > s[0] + 1 and two.watch.cycles > s[1] + 1,
                        what="two more cycles each",
                    )
                    # alice's update and exactly one heal per round
                    assert audits.count("$JS.API.STREAM.UPDATE.ORDERS") == 2 * (round_ + 1)
                assert heals() == 4  # the create and three updates, each by one agent
                assert await _declared(url)
        finally:
            await watcher.close()

    run(scenario())


def test_once_over_every_environment_heals_the_reachable_and_exits_1_for_the_other(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    servers = {"live": server_factory(), "down": server_factory()}
    _project(tmp_path, servers)
    servers["down"].kill()
    args = ("watch", "--once", "--mode", "heal", "--listen", "off")
    done = reconcile(*args, "--all-envs", "--log-format", "json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    logged = lines(done.stderr)
    assert any(_healed("live")(line) for line in logged)
    assert any(line["event"] == "error" and line.get("env") == "down" for line in logged)
    assert run(_declared(servers["live"].url))
    again = reconcile(*args, "--env", "live", cwd=tmp_path)  # one --env: as before
    assert again.returncode == 0, again.stderr


def test_watch_refuses_what_names_no_environment_before_it_connects(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    write(tmp_path / "specs", ORDERS, "orders.yaml")
    project = (
        "owner: shop\nspecs: [specs]\nenvironments:\n  dev: {servers: nats://127.0.0.1:1}\n"
        "  prod:\n    servers: nats://127.0.0.1:2\n    user: ops\n"
        "    password: {env: AGENT_TEST_UNSET_PASSWORD}\n"
    )
    write(tmp_path, project, "reconcile.yaml")
    cases = [
        # an environment that cannot be resolved stops the start, at its line, before
        # any environment connects (as plan --all-envs does)
        (("--all-envs",), 1, "reconcile.yaml:8: environments.prod.password"),
        (("specs", "--all-envs"), 1, "no PATHS"),
        (("--all-envs", "--env", "dev"), 1, "not both"),
        (("--shard", "2/2"), 1, "--shard"),
        (("--env", "dev", "--env", "nope"), 1, "nope"),
    ]
    for args, code, says in cases:
        done = reconcile("watch", *args, "--once", "--listen", "off", cwd=tmp_path)
        assert done.returncode == code, (args, done.stderr)
        assert says in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
        assert "cannot connect" not in done.stderr, (args, done.stderr)


def test_every_environment_plans_the_branch_head_of_one_checkout(
    server_factory: Any, tmp_path: Path
) -> None:
    """``--git`` with ``--all-envs``: the project file is the branch head's; one fetch
    serves every environment, and a pushed commit is healed in each."""
    servers = {"blue": server_factory(), "green": server_factory()}
    bare, work = origin(tmp_path)
    envs = "".join(f"  {name}:\n    servers: {s.url}\n" for name, s in servers.items())
    project = f"owner: shop\nspecs: [specs]\nenvironments:\n{envs}"
    first = push_commit(work, bare, {"reconcile.yaml": project, "specs/orders.yaml": ORDERS}, "1")
    log = tmp_path / "agent.log"
    agent = git_agent(bare, cwd=tmp_path, log=log)
    try:
        for env in servers:
            found = wait_for_line(log, _healed(env), f"ORDERS created in {env}")
            assert found[0]["commit"] == first
        second = push_commit(work, bare, {"specs/payments.yaml": NEW_STREAM}, "2")
        for env in servers:
            found = wait_for_line(log, _healed(env, "Stream PAYMENTS"), f"PAYMENTS in {env}")
            assert found[0]["commit"] == second
    finally:
        assert stopped(agent) == 0
