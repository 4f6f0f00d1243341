"""`reconcile watch --git`: the agent plans the branch head of a repository (a local bare
repository, no network) and a pushed commit is planned and, in heal mode, applied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_harness import ORDERS, Other, changes, running_agent, until
from dulwich import porcelain
from servers import NatsServer

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
