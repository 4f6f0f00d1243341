"""An attacker and a careless user against one `reconcile watch` process serving many
environments: a client of one environment's account that answers the agent's JetStream
requests with replies no server sends, or with an error text meant for a terminal."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
from pathlib import Path
from typing import Any

import nats
import pytest
from agent_harness import (
    ORDERS,
    PATIENCE,
    Other,
    agent_process,
    changes,
    get,
    git_agent,
    lines,
    one_server_by_two_names,
    orders_healed_in,
    project_sources,
    running_agent,
    stopped,
    until,
    wait_for_line,
)
from cli_runner import reconcile
from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo
from servers import Cluster, NatsServer, write
from test_agent_attacks import HangingGit
from test_agent_envs import _declared, _drift, _healed, _names_one_per_shard, _project
from test_agent_git import NEW_STREAM, origin, push_commit

from reconciler.agent import commits
from reconciler.agent.cycles import Cycle
from reconciler.agent.source import GitSource, SharedCheckout
from reconciler.execution.environments import environment_target
from reconciler.execution.requests import PlanRequest
from reconciler.jetstream import ConnectionOptions
from reconciler.specs.project import load_project

pytestmark = pytest.mark.slow  # attack runs: .ci/run's second stage


def _orders_and_a_copy(folder: Path) -> None:
    """``specs/orders.yaml`` (ORDERS) and ``overlays/o.yaml`` declaring ORDERS otherwise:
    the environment copied from another, its server left as it was."""
    (folder / "specs").mkdir()
    write(folder / "specs", ORDERS, "orders.yaml")
    (folder / "overlays").mkdir()
    write(folder / "overlays", "kind: Stream\nname: ORDERS\ndescription: copied\n", "o.yaml")


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


def test_a_server_error_text_is_escaped_in_readyz(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """The server comes back without JetStream, and mallory answers the agent's requests
    with an error text that clears the screen of whoever curls /readyz and writes a line
    of its own: /readyz (text; /status is JSON) escapes it."""
    servers = {"evil": server_factory()}
    sources = project_sources(_project(tmp_path, servers))
    forged = {"error": {"code": 500, "err_code": 10000, "description": "\x1b[2J\r\nready\u202e"}}

    async def scenario() -> None:
        async with running_agent(sources, mode="heal", interval=0.5) as (agent, _):
            evil = agent.watches["evil"]
            await until(lambda: evil.last_success is not None, what="a first plan")
            server = servers["evil"]
            await asyncio.to_thread(server.stop)
            del server.settings["jetstream"]
            await asyncio.to_thread(server.start, wait=False)
            await asyncio.to_thread(server.wait_ready, jetstream=False)
            mallory = await nats.connect(server.url, name="mallory")

            async def forge(msg: Any) -> None:
                await msg.respond(json.dumps(forged).encode())

            await mallory.subscribe("$JS.API.>", cb=forge)
            try:
                await until(
                    lambda: evil.connected and evil.last is not None and not evil.last.ok,
                    what="a plan failed on mallory's answer",
                )
                code, body = await get(agent, "/readyz")
            finally:
                await mallory.close()
            assert code == 503
            text = body.decode()
            assert "[2J" in text  # the reason is there, escaped
            assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
            assert text.count("\n") == 1 and text.endswith("\n")

    run(scenario())


def _make_for(name: str) -> Any:
    """Environment ``name`` of the checkout's project file, as watch --all-envs --git
    plans it."""

    def make(root: Path | None) -> PlanRequest:
        assert root is not None
        loaded = load_project(root / "reconcile.yaml")
        target = environment_target(loaded, name, ConnectionOptions(), "shop")
        return PlanRequest.for_target(target)

    return make


def test_a_hung_git_server_never_stops_the_environments_healing_the_last_commit(
    server_factory: Any, tmp_path: Path, run: Any, monkeypatch: Any
) -> None:
    """``--all-envs --git``: the git server stops answering a fetch. Every environment
    goes on planning (and healing) the last commit fetched, an advisory's change within
    the test's patience; the fetch's answer is taken when it comes."""
    monkeypatch.setattr(commits, "HEAD_CHECK_SECONDS", 1.0)  # a heal's look under the lock
    servers = {"blue": server_factory(), "green": server_factory()}
    bare, work = origin(tmp_path)
    envs = "".join(f"  {name}:\n    servers: {s.url}\n" for name, s in servers.items())
    project = f"owner: shop\nspecs: [specs]\nenvironments:\n{envs}"
    push_commit(work, bare, {"reconcile.yaml": project, "specs/orders.yaml": ORDERS}, "1")
    git = HangingGit(bare)
    make_for = _make_for

    async def scenario() -> None:
        shared = SharedCheckout(GitSource(git.url, "main", tmp_path / "cache", make_for("blue")))
        await shared.refresh()
        sources = {name: shared.view(make_for(name)) for name in servers}
        settings = {"interval": 600.0, "git_poll": 0.2}
        async with running_agent(sources, mode="heal", **settings) as (_, log):
            await orders_healed_in(log, servers)
            git.hang.set()
            await asyncio.to_thread(git.entered.wait, 30)
            for env, server in servers.items():
                await _drift(server.url, description="changed by hand")
                await until(
                    lambda env=env: len(changes(log, "Stream ORDERS", "healed", env)) > 1,
                    what=f"{env} healed while the git server hangs",
                )
                assert await _declared(server.url)
            blue = servers["blue"]  # a restart while the git server hangs: a new connection
            await asyncio.to_thread(blue.stop)
            await asyncio.to_thread(blue.start)
            healed = len(changes(log, "Stream ORDERS", "healed", "blue"))
            await _drift(blue.url, description="changed by hand again")
            await until(
                lambda: len(changes(log, "Stream ORDERS", "healed", "blue")) > healed,
                what="blue reconnected and healed while the git server hangs",
            )
            push_commit(work, bare, {"specs/payments.yaml": NEW_STREAM}, "2")
            git.release.set()  # the hung fetch answers: the new head
            for env in servers:
                await until(
                    lambda env=env: changes(log, "Stream PAYMENTS", "healed", env),
                    what=f"the commit pushed meanwhile healed in {env}",
                )

    try:
        run(scenario())
    finally:
        git.close()


def test_two_environments_healed_in_one_account_are_refused_before_any_write(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """A careless copy of an environment keeps its server: two environments, one account,
    one user, the second's overlay declaring ORDERS otherwise. Healed together they undid
    each other's heals at once, by advisory, forever (311 heals in 8 s measured). In heal
    mode the start is refused at the copy's line, in every shard serving one of them,
    before anything connects; observing them, or one of them in lifecycle observe, runs."""
    zero, one = _names_one_per_shard()
    _orders_and_a_copy(tmp_path)
    url = clean_server.url
    project = (
        f"owner: shop\nspecs: [specs]\nenvironments:\n  {zero}:\n    servers: {url}\n"
        f"  {one}:\n    servers: {url}\n    overlays: [overlays]\n"
    )
    write(tmp_path, project, "reconcile.yaml")
    once = ("watch", "--once", "--listen", "off")
    for args in (("--all-envs",), ("--shard", "0/2"), ("--shard", "1/2")):
        done = reconcile(*once, "--mode", "heal", *args, cwd=tmp_path)
        assert done.returncode == 1, (args, done.stderr)
        assert f"reconcile.yaml:6: environments.{one}:" in done.stderr, (args, done.stderr)
        assert f"environments.{zero} (reconcile.yaml:4)" in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        assert not run(_streams(url)), args  # nothing written

    observed = reconcile(*once, "--mode", "observe", "--all-envs", cwd=tmp_path)
    assert observed.returncode == 2, observed.stderr  # ORDERS missing in both: reported
    write(tmp_path, project + "    lifecycle: {mode: observe}\n", "reconcile.yaml")
    healed = reconcile(*once, "--mode", "heal", "--all-envs", cwd=tmp_path)
    assert healed.returncode == 2, healed.stderr  # zero healed; one reports the difference
    assert run(_declared(url))  # as zero declares it


async def _streams(url: str) -> list[str]:
    async with Other.connect(url, name="checker") as bob:
        return sorted((await bob.api("STREAM.NAMES"))["streams"] or [])


def _push_unwritable(bare: Path) -> str:
    """A commit adding a file whose name (300 bytes) no Linux file system takes: git
    stores it, a checkout cannot write it. Made with dulwich's objects (a work tree
    cannot hold it either)."""
    repo = Repo(str(bare))
    try:
        head = repo.refs[b"refs/heads/main"]
        tree = Tree()
        for item in repo[repo[head].tree].items():
            tree.add(item.path, item.mode, item.sha)
        blob = Blob.from_string(b"x")
        tree.add(b"L" * 300, 0o100644, blob.id)
        commit = Commit()
        commit.tree, commit.parents = tree.id, [head]
        commit.author = commit.committer = b"mallory <m@e>"
        commit.commit_time = commit.author_time = int(time.time())
        commit.commit_timezone = commit.author_timezone = 0
        commit.message = b"a name too long"
        for obj in (blob, tree, commit):
            repo.object_store.add_object(obj)
        repo.refs[b"refs/heads/main"] = commit.id
        return commit.id.decode()
    finally:
        repo.close()


def test_a_commit_no_checkout_can_write_keeps_the_last_commit_planned(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """A pushed commit holds a file name of 300 bytes: writing its tree failed with an
    OSError that ended the agent, every environment with it (and its staging folder was
    left). The fetch fails as any other does: said in /status, the last commit planned
    and healed, the next good commit taken."""
    servers = {"blue": server_factory(), "green": server_factory()}
    bare, work = origin(tmp_path)
    envs = "".join(f"  {name}:\n    servers: {s.url}\n" for name, s in servers.items())
    project = f"owner: shop\nspecs: [specs]\nenvironments:\n{envs}"
    first = push_commit(work, bare, {"reconcile.yaml": project, "specs/orders.yaml": ORDERS}, "1")

    async def scenario() -> None:
        cache = tmp_path / "cache"
        shared = SharedCheckout(GitSource(f"file://{bare}", "main", cache, _make_for("blue")))
        await shared.refresh()
        sources = {name: shared.view(_make_for(name)) for name in servers}
        settings = {"interval": 600.0, "git_poll": 0.2}
        async with running_agent(sources, mode="heal", **settings) as (agent, log):
            await orders_healed_in(log, servers)
            _push_unwritable(bare)
            await until(
                lambda: agent.stop.is_set() or all(w.commits.error for w in agent.watches.values()),
                what="the fetch of the commit fails",
            )
            assert not agent.stop.is_set(), log.getvalue()[-3000:]
            status = json.loads((await get(agent, "/status"))[1])["environments"]
            for env, server in servers.items():
                assert status[env]["commit"] == first
                assert status[env]["git"]["error"]
                assert "LLLL" not in status[env]["git"]["error"]
                await _drift(server.url, description="changed by hand")
                await until(
                    lambda env=env: len(changes(log, "Stream ORDERS", "healed", env)) > 1,
                    what=f"{env} healed on the last commit",
                )
            assert not [p for p in (cache / "trees").iterdir() if p.name.startswith(".")]
            # the branch forced back to the good commit, and a new one pushed on it
            with Repo(str(bare)) as repo:
                repo.refs[b"refs/heads/main"] = first.encode()
            push_commit(work, bare, {"specs/payments.yaml": NEW_STREAM}, "3")
            for env in servers:
                await until(
                    lambda env=env: changes(log, "Stream PAYMENTS", "healed", env),
                    what=f"the next commit healed in {env}",
                )

    run(scenario())


def test_a_project_file_named_and_missing_is_said_by_its_name(tmp_path: Path) -> None:
    """``--project prod.yml --all-envs`` with a typo: the error said a project file was
    needed ("reconcile.yaml or --project"), as if none had been given."""
    done = reconcile("watch", "--project", "prod.yml", "--all-envs", "--once", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "prod.yml" in done.stderr and "Traceback" not in done.stderr, done.stderr
    again = reconcile("watch", "--shard", "0/2", "--once", "--listen", "off", cwd=tmp_path)
    assert again.returncode == 1 and "need a project file" in again.stderr, again.stderr


def test_a_commit_that_puts_two_environments_in_one_account_heals_neither(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """``--all-envs --git --mode heal``: a later commit points green (whose overlay
    declares ORDERS otherwise) at blue's server. Each commit's project file is held to
    the rule the start holds the first to: both environments' cycles fail saying why,
    and nothing is written on blue (the agent would undo its own heals forever)."""
    servers = {"blue": server_factory(), "green": server_factory()}
    bare, work = origin(tmp_path)
    overlay = "kind: Stream\nname: ORDERS\ndescription: copied\n"

    def project(green_url: str) -> str:
        return (
            f"owner: shop\nspecs: [specs]\nenvironments:\n  blue:\n    servers: "
            f"{servers['blue'].url}\n  green:\n    servers: {green_url}\n"
            "    overlays: [overlays]\n"
        )

    files = {"specs/orders.yaml": ORDERS, "overlays/o.yaml": overlay}
    push_commit(work, bare, {"reconcile.yaml": project(servers["green"].url), **files}, "1")
    log = tmp_path / "agent.log"
    agent = git_agent(bare, cwd=tmp_path, log=log)
    audits: list[str] = []

    async def listen() -> Any:
        nc = await nats.connect(servers["blue"].url, name="auditor")

        async def note(msg: Any) -> None:
            audits.append(str(json.loads(msg.data).get("subject")))

        await nc.subscribe("$JS.EVENT.ADVISORY.API", cb=note)
        return nc

    try:
        for env in servers:
            wait_for_line(log, _healed(env), f"ORDERS created in {env}")

        async def scenario() -> None:
            auditor = await listen()
            try:
                await asyncio.to_thread(
                    push_commit, work, bare, {"reconcile.yaml": project(servers["blue"].url)}, "2"
                )
                second = await asyncio.to_thread(_head, bare)
                for env in servers:
                    found = await asyncio.to_thread(
                        wait_for_line,
                        log,
                        lambda line, env=env: (
                            line["event"] == "cycle"
                            and line.get("env") == env
                            and line.get("commit") == second
                        ),
                        f"{env} plans the second commit",
                    )
                    assert "writes where environments.blue" in found[0].get("error", ""), found
                await auditor.flush()
            finally:
                await auditor.close()
            assert not [a for a in audits if ".UPDATE." in a or ".CREATE." in a], audits

        run(scenario())
    finally:
        stopped(agent)


def _head(bare: Path) -> str:
    with Repo(str(bare)) as repo:
        return bytes(repo.refs[b"refs/heads/main"]).decode()


def test_an_agent_stopped_while_the_server_info_is_asked_leaves_no_asyncio_traceback(
    server_factory: Any, tmp_path: Path, run: Any, caplog: Any
) -> None:
    """On an account without JetStream mallory takes the agent's account INFO request and
    never answers it (the stream list beside it fails at once: no responders). The agent
    is stopped while it waits: every awaiter of the shared INFO read was cancelled, the
    read itself then failed unawaited, and asyncio printed "Task exception was never
    retrieved" with a traceback on the agent's standard error (seen now and then with
    forged ``null`` replies by the attacker pass; holding the answer makes it every time)."""
    servers = {"evil": server_factory(jetstream=False)}
    sources = project_sources(_project(tmp_path, servers))

    async def scenario() -> None:
        mallory = await nats.connect(servers["evil"].url, name="mallory")
        asked = asyncio.Event()

        async def hold(msg: Any) -> None:
            asked.set()  # and no answer

        await mallory.subscribe("$JS.API.INFO", cb=hold)
        try:
            async with running_agent(sources, mode="heal", interval=0.5):
                await asyncio.wait_for(asked.wait(), PATIENCE)
                await mallory.flush()
        finally:
            await mallory.close()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        run(scenario())
        gc.collect()  # a task dropped with its exception says so when it is freed
    said = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert not said, said


def test_one_server_named_two_ways_is_refused_by_what_the_server_says(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """The copy names the same server as ``localhost`` where the first says
    ``127.0.0.1``: the project file's text differs, the server's answer (its id, the
    account, the user) does not. In heal mode the second environment to connect is
    refused at its line, naming the other, before its first plan (the first heals
    alone); observing both runs."""
    zero, one = _names_one_per_shard()
    _orders_and_a_copy(tmp_path)
    url = clean_server.url
    one_server_by_two_names(tmp_path, url, zero, one)
    once = ("watch", "--once", "--listen", "off")
    done = reconcile(*once, "--mode", "heal", "--all-envs", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = {zero: "reconcile.yaml:4", one: "reconcile.yaml:6"}
    refused = [
        (env, peer)
        for env, peer in ((zero, one), (one, zero))
        if f"{lines[env]}: environments.{env}: writes where environments.{peer} "
        f"({lines[peer]}) does" in done.stderr
    ]
    assert len(refused) == 1, done.stderr
    (env, peer) = refused[0]
    healed = run(_described(url))  # as the environment that was not refused declares it
    assert healed == ("copied" if peer == one else "orders as declared"), (healed, env)

    observed = reconcile(*once, "--mode", "observe", "--all-envs", cwd=tmp_path)
    assert observed.returncode == 2, observed.stderr  # the two declare ORDERS otherwise
    assert "writes where" not in observed.stderr, observed.stderr


async def _described(url: str) -> str:
    async with Other.connect(url, name="checker") as bob:
        return str((await bob.info("ORDERS"))["config"].get("description"))


@pytest.mark.cluster
def test_two_nodes_of_one_cluster_are_one_seat(cluster: Cluster, tmp_path: Path) -> None:
    """Two environments name two nodes of one fresh cluster: two server ids, one cluster
    name (which another cluster may share), no account lineage yet. Each agent keeps the
    lineage as it connects (one value wins, both read it): the second to connect is
    refused."""
    zero, one = _names_one_per_shard()
    _orders_and_a_copy(tmp_path)
    first, second = cluster.nodes[0].url, cluster.nodes[1].url
    project = (
        f"owner: shop\nspecs: [specs]\nenvironments:\n  {zero}:\n    servers: {first}\n"
        f"  {one}:\n    servers: {second}\n    overlays: [overlays]\n"
    )
    write(tmp_path, project, "reconcile.yaml")
    once = ("watch", "--once", "--listen", "off", "--mode", "heal")
    done = reconcile(*once, "--all-envs", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    said = (
        f"reconcile.yaml:6: environments.{one}: writes where environments.{zero} "
        "(reconcile.yaml:4) does",
        f"reconcile.yaml:4: environments.{zero}: writes where environments.{one} "
        "(reconcile.yaml:6) does",
    )
    assert sum(s in done.stderr for s in said) == 1, done.stderr


def test_a_missing_spec_folder_stops_the_start_at_its_line(
    server_factory: Any, tmp_path: Path
) -> None:
    """The project file names a spec folder and an overlay folder that are not there:
    the agent started, served, and each cycle of that environment failed ("specs:1: no
    such file"). Now the start stops (exit 1) naming the project file's lines and the
    environment, before anything connects; the other environments are not served."""
    servers = {"blue": server_factory(), "green": server_factory()}
    _project(tmp_path, servers)
    project = (tmp_path / "reconcile.yaml").read_text()
    write(tmp_path, project.replace("specs: [specs]", "specs: [specs, more]"), "reconcile.yaml")
    with (tmp_path / "reconcile.yaml").open("a") as file:
        file.write("    overlays: [green-overlays]\n")
    log = tmp_path / "agent.log"
    agent = agent_process(
        ["--all-envs", "--mode", "heal", "--listen", "off"], cwd=tmp_path, log=log
    )
    try:
        code = agent.wait(60)
    finally:
        if agent.poll() is None:
            agent.kill()
    said = log.read_text()
    assert code == 1, said
    assert "reconcile.yaml:2: specs.1: " in said and "environment blue" in said, said
    assert "reconcile.yaml:8: environments.green.overlays.0: " in said, said
    assert "Traceback" not in said and "serving" not in said, said


def test_a_spec_folder_a_later_commit_adds_is_planned_when_it_comes(
    server_factory: Any, tmp_path: Path
) -> None:
    """With --git the first commit may not hold the spec folder yet: the start goes on,
    the environment's cycles fail until a commit adds it, then it is healed."""
    servers = {"blue": server_factory()}
    bare, work = origin(tmp_path)
    project = (
        f"owner: shop\nspecs: [specs]\nenvironments:\n  blue:\n    servers: {servers['blue'].url}\n"
    )
    push_commit(work, bare, {"reconcile.yaml": project}, "1")
    log = tmp_path / "agent.log"
    agent = git_agent(bare, cwd=tmp_path, log=log)
    try:
        wait_for_line(
            log,
            lambda line: line["event"] == "cycle" and line.get("error"),
            "the first commit's cycle fails",
        )
        push_commit(work, bare, {"specs/orders.yaml": ORDERS}, "2")
        wait_for_line(log, _healed("blue"), "ORDERS healed once a commit adds the folder")
    finally:
        stopped(agent)


def test_status_asked_again_and_again_is_encoded_once_per_cycle(
    server_factory: Any, tmp_path: Path, run: Any, monkeypatch: Any
) -> None:
    """Anyone who reaches the port may ask for /status in a loop: with 21,000 resources
    each answer encoded every resource again (3.1 MB, 50-80 ms of the one core the
    cycles need). Now a cycle's resources are encoded once, and the same body is served
    while nothing changed; a cycle that follows (a change made by hand, healed) is in the
    next answer, and every answer is the JSON of the document the agent holds."""
    servers = {"blue": server_factory(), "green": server_factory()}
    sources = project_sources(_project(tmp_path, servers))
    encoded: list[str] = []
    to_json = Cycle.to_json

    def counted(cycle: Cycle) -> dict[str, Any]:
        encoded.append(str(cycle.started_at))
        return to_json(cycle)

    monkeypatch.setattr(Cycle, "to_json", counted)

    async def scenario() -> None:
        async with running_agent(sources, mode="heal", interval=600.0) as (agent, log):
            await orders_healed_in(log, servers)
            await until(
                lambda: all(w.last is not None and w.last.ok for w in agent.watches.values()),
                what="a cycle done in each environment",
            )
            cycles = sum(w.cycles for w in agent.watches.values())
            encoded.clear()
            bodies = [(await get(agent, "/status"))[1] for _ in range(20)]
            ran = sum(w.cycles for w in agent.watches.values()) - cycles  # meanwhile
            assert len(encoded) <= len(servers) + ran, encoded  # once per cycle, not per ask
            assert len(set(bodies)) <= 1 + ran
            assert agent.endpoints.status() is agent.endpoints.status()  # served again
            assert json.loads(bodies[-1]) == json.loads(json.dumps(agent.status(), default=str))

            await _drift(servers["blue"].url, description="changed by hand")
            await until(
                lambda: len(changes(log, "Stream ORDERS", "healed", "blue")) > 1,
                what="blue healed again",
            )
            after = json.loads((await get(agent, "/status"))[1])["environments"]["blue"]
            summary = after["last_cycle"]["summary"]
            assert summary.get("healed"), after["last_cycle"]

    run(scenario())


def test_the_environment_refused_its_seat_heals_nothing_while_the_other_heals(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """Serving (not --once): the environment refused its seat (the server named
    ``localhost`` where the other says ``127.0.0.1``) says why in /status and heals
    nothing, connection after connection; the other heals a change made by hand."""
    _orders_and_a_copy(tmp_path)
    url = clean_server.url
    project = (
        f"owner: shop\nspecs: [specs]\nenvironments:\n  blue:\n    servers: {url}\n"
        f"  green:\n    servers: {url.replace('127.0.0.1', 'localhost')}\n"
        "    overlays: [overlays]\n"
    )
    sources = project_sources(write(tmp_path, project, "reconcile.yaml"))

    async def scenario() -> None:
        async with running_agent(sources, mode="heal", interval=600.0, first_backoff=0.1) as (
            agent,
            log,
        ):
            watches = agent.watches

            def refused() -> list[str]:
                return [
                    str(env) for env, w in watches.items() if "writes where" in (w.link.error or "")
                ]

            await until(refused, what="one environment refused its seat")
            (loser,) = refused()
            winner = "green" if loser == "blue" else "blue"
            await until(lambda: changes(log, "Stream ORDERS", "healed", winner), what="healed")
            await until(lambda: watches[loser].failures >= 3, what="refused again")
            await _drift(url, description="changed by hand")
            await until(
                lambda: len(changes(log, "Stream ORDERS", "healed", winner)) > 1,
                what="the other heals the change",
            )
            await until(lambda: watches[loser].failures >= 5, what="refused again")
            assert not changes(log, "Stream ORDERS", "healed", loser)
            assert watches[loser].cycles == 0
            status = json.loads((await get(agent, "/status"))[1])["environments"]
            assert f"environments.{winner}" in status[loser]["error"]
            assert status[winner]["ready"] is True

    run(scenario())


def test_a_tree_a_plan_reads_is_kept_while_newer_commits_are_checked_out(
    server_factory: Any, tmp_path: Path, run: Any, monkeypatch: Any
) -> None:
    """``--all-envs --git``: blue plans commit 2 (its specs read from trees/<2>/) while two
    more commits land and green's polls check them out. Each checkout kept only the new
    tree and the one before: commit 4's removed commit 2's tree under blue's plan, whose
    cycle failed (and was retried). A tree is kept while a cycle reads it, and removed by
    the next checkout once none does. Ordered by events: blue's read of commit 2's specs
    waits until commit 4 is checked out."""
    from reconciler.execution import pipeline

    monkeypatch.setattr(SharedCheckout, "FETCH_GAP", 0.0)
    servers = {"blue": server_factory(), "green": server_factory()}
    bare, work = origin(tmp_path)
    envs = "".join(f"  {name}:\n    servers: {s.url}\n" for name, s in servers.items())
    project = f"owner: shop\nspecs: [specs]\nenvironments:\n{envs}"
    push_commit(work, bare, {"reconcile.yaml": project, "specs/orders.yaml": ORDERS}, "1")
    trees = tmp_path / "cache" / "trees"
    original = pipeline.loaded_while
    held: dict[str, Any] = {}  # the commit whose read by blue waits, and the events

    async def gated(request: Any, observer: Any, reading: Any) -> Any:
        commit = held.get("commit")
        if request.env == "blue" and commit and any(commit in str(p) for p in request.paths):
            held.pop("commit")
            held["entered"].set()
            await held["release"].wait()
        return await original(request, observer, reading)

    monkeypatch.setattr(pipeline, "loaded_while", gated)

    async def scenario() -> None:
        git = GitSource(f"file://{bare}", "main", tmp_path / "cache", _make_for("blue"))
        shared = SharedCheckout(git)
        await shared.refresh()
        sources = {name: shared.view(_make_for(name)) for name in servers}
        settings = {"interval": 600.0, "git_poll": 0.1}
        async with running_agent(sources, mode="heal", **settings) as (_, log):
            await orders_healed_in(log, servers)
            held.update(entered=asyncio.Event(), release=asyncio.Event())
            second = push_commit(work, bare, {"specs/payments.yaml": NEW_STREAM}, "2")
            held["commit"] = second
            await asyncio.wait_for(held["entered"].wait(), PATIENCE)  # blue reads commit 2
            for n in (3, 4):
                newer = NEW_STREAM + f"description: commit {n}\n"
                head = push_commit(work, bare, {"specs/payments.yaml": newer}, str(n))
                await until(lambda head=head: git.commit == head, what=f"commit {n} fetched")
            assert (trees / second).is_dir()  # blue's plan still reads it
            held["release"].set()

            def of_second() -> list[dict[str, Any]]:
                return [
                    line
                    for line in lines(log)
                    if line["event"] == "cycle"
                    and line.get("env") == "blue"
                    and line.get("commit") == second
                ]

            await until(of_second, what="blue's cycle of commit 2 done")
            assert [line.get("error") for line in of_second()] == [None]
            more = 'kind: Stream\nname: MORE\nsubjects: ["more.>"]\n'
            head = push_commit(work, bare, {"specs/more.yaml": more}, "5")
            await until(lambda: git.commit == head, what="commit 5 fetched")
            assert not (trees / second).exists()  # read by no cycle now: rotated out

    run(scenario())
