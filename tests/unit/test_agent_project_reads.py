"""``reconcile watch --all-envs`` of many environments reads the project file once per
change, not once (or twice) per environment: each environment's task re-read and
re-validated the whole file after an edit (and with ``--git`` before every cycle), so
an edit of an N-environment file cost about 2N loads of it, O(N^2) in all, and the
last environment waited for every other one's loads.

The agent runs in-process here (``watch.main``) over environments whose servers refuse
connections at once: each environment's task makes its request at each attempt to
connect (every second), which is where it serves an edit. ``load_project`` is counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from dulwich import porcelain

import reconciler.specs.project as project_module
from reconciler.agent.loop import Agent
from reconciler.cli.watch_cmd import watch

ENVIRONMENTS = 30
PATIENCE = 60.0
#: Loads of the project file an edit (or a commit) may cost the whole agent.
AT_MOST = 3


def _project(n: int, *, extra: str = "", description: str = "first") -> str:
    envs = "".join(
        f"  env-{i:03d}:\n    servers: nats://127.0.0.1:1\n    user: u{i:03d}\n"
        f"    description: {description}\n"
        for i in range(n)
    )
    return f"owner: shop\nspecs: [specs]\nenvironments:\n{envs}{extra}"


class Counted:
    """``load_project``, counting its calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.real = project_module.load_project
        monkeypatch.setattr(project_module, "load_project", self)

    def __call__(self, path: str | Path) -> project_module.Project:
        self.calls += 1
        return self.real(path)


async def _until(check: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PATIENCE
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        await asyncio.sleep(0.02)


Driver = Callable[[Agent], Coroutine[Any, Any, None]]


def _run_watch(monkeypatch: pytest.MonkeyPatch, args: list[str], driver: Driver) -> None:
    """``reconcile watch ARGS`` in this process; ``driver(agent)`` runs beside it, in its
    loop, and the agent stops when it returns."""
    made = Agent.serving.__func__  # type: ignore[attr-defined]
    failed: list[BaseException] = []
    drivers: list[asyncio.Future[None]] = []

    def serving(cls: type[Agent], *a: Any, **kw: Any) -> Agent:
        agent: Agent = made(cls, *a, **kw)

        async def drive() -> None:
            try:
                await driver(agent)
            except BaseException as err:
                failed.append(err)
            finally:
                agent.stop.set()

        drivers.append(asyncio.ensure_future(drive()))
        return agent

    monkeypatch.setattr(Agent, "serving", classmethod(serving))
    common = ["--listen", "off", "--log-format", "json", "--interval", "0.1s"]
    watch.main([*args, *common], standalone_mode=False)
    if failed:
        raise failed[0]


def _all(agent: Agent, check: Callable[[Any], bool]) -> Callable[[], bool]:
    return lambda: all(check(w) for w in agent.watches.values())


@pytest.fixture
def repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "orders.yaml").write_text(
        'kind: Stream\nname: ORDERS\nsubjects: ["orders.>"]\n', encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_an_edit_is_read_once_for_every_environment(
    repository: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = repository / "reconcile.yaml"
    project.write_text(_project(ENVIRONMENTS), encoding="utf-8")
    loads = Counted(monkeypatch)
    counted: dict[str, int] = {}

    async def driver(agent: Agent) -> None:
        await _until(_all(agent, lambda w: w.failures >= 1), "every environment tried")
        loads.calls = 0
        project.write_text(_project(ENVIRONMENTS, description="edited"), encoding="utf-8")
        await _until(_all(agent, lambda w: w.source.project_reads >= 1), "the edit served")
        counted["edit"] = loads.calls

        # an invalid edit: refused for every environment, the last valid one kept
        loads.calls = 0
        broken = _project(ENVIRONMENTS, description="edited").replace(
            "env-007:\n", "env-007:\n    lifecycle: {mode: sometimes}\n"
        )
        project.write_text(broken, encoding="utf-8")
        await _until(_all(agent, lambda w: w.source.project_error), "the invalid edit refused")
        counted["invalid"] = loads.calls
        errors = {w.source.project_error[0] for w in agent.watches.values()}
        assert len(errors) == 1 and "reconcile.yaml:" in next(iter(errors)), errors
        described = {
            w.source.request().project.environments["env-000"].description
            for w in agent.watches.values()
        }
        assert described == {"edited"}  # the last valid project, in every environment

        # an environment added: not served, listed, said by every environment's task
        loads.calls = 0
        added = "  extra:\n    servers: nats://127.0.0.1:1\n"
        project.write_text(_project(ENVIRONMENTS, extra=added), encoding="utf-8")
        await _until(
            _all(agent, lambda w: "extra" in ((w.source.project_error or ("",))[0])),
            "the changed list said",
        )
        counted["added"] = loads.calls
        assert "extra" in agent.not_served.to_json()
        assert "extra" not in agent.watches

    _run_watch(monkeypatch, ["--all-envs", "--mode", "heal"], driver)
    assert counted["edit"] <= AT_MOST, counted
    assert counted["invalid"] <= AT_MOST, counted
    assert counted["added"] <= AT_MOST, counted


def _commit(work: Path, bare: Path, text: str) -> None:
    (work / "reconcile.yaml").write_text(text, encoding="utf-8")
    porcelain.add(str(work), paths=[str(work / "reconcile.yaml")])
    porcelain.commit(str(work), message=b"project", author=b"t <t@e>", committer=b"t <t@e>")
    porcelain.push(str(work), str(bare), b"HEAD:refs/heads/main")


def test_a_commit_is_read_once_for_every_environment(
    repository: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bare, work = repository / "origin.git", repository / "work"
    porcelain.init(str(bare), bare=True)
    porcelain.init(str(work))
    (work / "specs").mkdir()
    (work / "specs" / "orders.yaml").write_text(
        (repository / "specs" / "orders.yaml").read_text(), encoding="utf-8"
    )
    porcelain.add(str(work), paths=[str(work / "specs" / "orders.yaml")])
    _commit(work, bare, _project(ENVIRONMENTS))
    loads = Counted(monkeypatch)
    counted: dict[str, int] = {}

    async def driver(agent: Agent) -> None:
        await _until(_all(agent, lambda w: w.failures >= 1), "every environment tried")
        first = next(iter(agent.watches.values())).source.commit
        tries = {env: w.failures for env, w in agent.watches.items()}
        loads.calls = 0
        await _until(_all(agent, lambda w: w.failures >= tries[w.env] + 2), "two more tries each")
        counted["idle"] = loads.calls  # no commit: nothing read again

        await asyncio.to_thread(_commit, work, bare, _project(ENVIRONMENTS, description="x"))
        view = next(iter(agent.watches.values())).source
        while view.commit == first:  # as a connected environment's poll fetches it
            await view.refresh()
            await asyncio.sleep(0.1)
        tries = {env: w.failures for env, w in agent.watches.items()}
        loads.calls = 0
        await _until(_all(agent, lambda w: w.failures >= tries[w.env] + 2), "two more tries each")
        counted["commit"] = loads.calls

    args = ["--all-envs", "--mode", "heal", "--git", f"file://{bare}", "--git-poll", "0.2s"]
    _run_watch(monkeypatch, args, driver)
    assert counted["idle"] <= AT_MOST, counted
    assert counted["commit"] <= AT_MOST, counted
