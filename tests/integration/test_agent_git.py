"""`reconcile watch --git`: the agent plans the branch head of a repository (a local bare
repository, no network) and a pushed commit is planned and, in heal mode, applied."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from agent_harness import (
    ORDERS,
    Other,
    agent_process,
    changes,
    lines,
    running_agent,
    stop_all,
    until,
    wait_for_line,
)
from dulwich import porcelain
from servers import NatsServer, unused_port

from reconciler.agent.source import GitSource
from reconciler.execution.requests import PlanRequest
from reconciler.jetstream import ConnectionOptions

NEW_STREAM = 'kind: Stream\nname: PAYMENTS\nsubjects: ["payments.>"]\n'


def push_commit(work: Path, bare: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        porcelain.add(str(work), paths=[str(path)])
    sha = porcelain.commit(
        str(work), message=message.encode(), author=b"t <t@e>", committer=b"t <t@e>"
    )
    porcelain.push(str(work), str(bare), b"HEAD:refs/heads/main")
    return bytes(sha).decode()


def origin(tmp_path: Path) -> tuple[Path, Path]:
    """A bare repository (the remote the agent fetches) and a work tree pushing to it."""
    bare, work = tmp_path / "origin.git", tmp_path / "work"
    porcelain.init(str(bare), bare=True)
    porcelain.init(str(work))
    return bare, work


def specs_source(url: str, tmp_path: Path, options: ConnectionOptions) -> GitSource:
    """The agent's source: ``specs/`` of the branch ``main`` at ``url``."""

    def make(root: Path | None) -> PlanRequest:
        assert root is not None
        return PlanRequest.of([root / "specs"], options)

    return GitSource(url, "main", tmp_path / "cache", make)


def test_a_pushed_commit_is_planned_and_healed(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    bare, work = origin(tmp_path)
    first = push_commit(work, bare, {"specs/orders.yaml": ORDERS}, "orders")
    options = ConnectionOptions(servers=clean_server.url)

    source = specs_source(f"file://{bare}", tmp_path, options)

    async def scenario() -> None:
        async with running_agent(source, mode="heal", interval=30.0, git_poll=0.2) as (
            agent,
            log,
        ):
            created = await until(
                lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created"
            )
            assert created[0]["commit"] == first
            second = push_commit(work, bare, {"specs/payments.yaml": NEW_STREAM}, "payments")
            payments = await until(
                lambda: changes(log, "Stream PAYMENTS", "healed"), what="PAYMENTS created"
            )
            assert payments[0]["commit"] == second
            assert agent.status()["commit"] == second
            assert agent.watch.last is not None and agent.watch.last.commit == second
            async with Other.connect(clean_server.url) as alice:
                assert (await alice.info("PAYMENTS"))["config"]["subjects"] == ["payments.>"]
            assert agent.metrics.git_head_age._value.get() >= 0

    run(scenario())


def test_an_environment_added_by_a_commit_is_said_and_listed_as_not_served(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``--git --all-envs`` serves the environments of the commit it started with. One a
    later commit adds was not served until a restart and nothing said so; now one log
    line names it (not again at the next commits) and ``/status`` lists it with why."""
    bare, work = origin(tmp_path)
    url = clean_server.url
    project = f"owner: shop\nspecs: [specs]\nenvironments:\n  dev:\n    servers: {url}\n"
    push_commit(work, bare, {"specs/orders.yaml": ORDERS, "reconcile.yaml": project}, "dev")
    log, port = tmp_path / "agent.log", unused_port()
    args = ["--git", f"file://{bare}", "--all-envs", "--interval", "1h", "--git-poll", "0.2s"]
    agent = agent_process(
        [*args, "--listen", f"127.0.0.1:{port}", "--log-format", "json"], cwd=tmp_path, log=log
    )
    try:
        wait_for_line(log, lambda line: line["event"] == "cycle", "dev planned")
        added = f"{project}  extra:\n    servers: {url}\n"
        push_commit(work, bare, {"reconcile.yaml": added}, "extra")
        said = wait_for_line(log, lambda line: line.get("environment") == "extra", "extra said")
        assert said[0]["event"] == "serving" and "restart" in said[0]["message"], said
        last = push_commit(work, bare, {"reconcile.yaml": f"{added}# edited\n"}, "again")
        wait_for_line(log, lambda line: line.get("commit") == last, "the last commit fetched")
        assert len([x for x in lines(log.read_text()) if x.get("environment") == "extra"]) == 1
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as answer:
            status = json.loads(answer.read())
        assert "restart" in status["not_served"]["extra"], status["not_served"]
        assert list(status["environments"]) == ["dev"]
    finally:
        stop_all([agent])


def test_messages_name_a_commits_files_as_the_repository_does(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``--git``: errors named the cached tree (``.reconcile/git/<hash>/trees/<commit>/
    specs/orders.yaml:4``), an older commit's already removed. Now a spec's problem and a
    refusal (two environments writing in one account) name ``FILE:LINE (commit
    1a2b3c4)``, in the log and /status, as does the start's error at the first commit."""
    bare, work = origin(tmp_path)
    url = clean_server.url
    project = f"owner: shop\nspecs: [specs]\nenvironments:\n  dev:\n    servers: {url}\n"
    push_commit(work, bare, {"specs/orders.yaml": ORDERS, "reconcile.yaml": project}, "dev")
    log, port = tmp_path / "agent.log", unused_port()
    args = ["--git", f"file://{bare}", "--all-envs", "--mode", "heal", "--interval", "1h"]
    agent = agent_process(
        [*args, "--git-poll", "0.2s", "--listen", f"127.0.0.1:{port}", "--log-format", "json"],
        cwd=tmp_path,
        log=log,
    )
    try:
        wait_for_line(log, lambda line: line["event"] == "change", "dev planned")
        broken = push_commit(
            work, bare, {"specs/orders.yaml": "kind: Stream\nname: X\nmax_msgs: lots\n"}, "bad"
        )
        said = wait_for_line(
            log, lambda line: line.get("error") and line.get("commit") == broken, "the problem"
        )
        assert f"specs/orders.yaml:3 (commit {broken[:7]})" in said[0]["error"], said
        twice = f"{project}  prod:\n    servers: {url}\n"
        refused = push_commit(work, bare, {"reconcile.yaml": twice}, "prod")
        said = wait_for_line(
            log, lambda line: line.get("error") and line.get("commit") == refused, "the refusal"
        )
        at = f"reconcile.yaml:6 (commit {refused[:7]}): environments.prod"
        assert at in said[0]["error"], said
        assert f"(reconcile.yaml:4 (commit {refused[:7]}))" in said[0]["error"], said
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as answer:
            status = answer.read().decode()
        assert at in status
        assert "trees/" not in log.read_text() + status
    finally:
        stop_all([agent])
    started = agent_process([*args, "--once", "--listen", "off"], cwd=tmp_path)
    _, error = started.communicate(timeout=60)
    assert started.returncode == 1 and at in error and "trees/" not in error, error
