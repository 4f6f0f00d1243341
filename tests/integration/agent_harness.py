"""An in-process `reconcile watch` agent for the agent tests, and another client to make
drift with (nats-py, raw JSON API, its own connect name)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import nats
from cli_runner import cleaned_environ
from servers import write

from reconciler.agent.logs import Log
from reconciler.agent.loop import Agent, WatchSettings
from reconciler.agent.source import FixedSource, Source
from reconciler.execution.environments import environment_target
from reconciler.execution.requests import PlanRequest
from reconciler.jetstream import ConnectionOptions
from reconciler.specs.project import load_project

#: How long a test waits for the agent to see something (a bound, never a measurement).
PATIENCE = 30.0

ORDERS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_msgs: 1000
description: orders as declared
---
kind: Consumer
stream: ORDERS
name: worker
ack_policy: explicit
"""


def project_of(root: Path, urls: Mapping[str, str], specs: str = ORDERS) -> Path:
    """A repository in ``root``: ``specs`` (ORDERS) in specs/, and a project file of one
    environment per entry of ``urls`` (name -> its server's URL)."""
    (root / "specs").mkdir()
    write(root / "specs", specs, "orders.yaml")
    envs = "".join(f"  {name}:\n    servers: {url}\n" for name, url in urls.items())
    return write(root, f"owner: shop\nspecs: [specs]\nenvironments:\n{envs}", "reconcile.yaml")


def fixed_source(paths: list[Path], url: str) -> FixedSource:
    options = ConnectionOptions(servers=url)
    return FixedSource(lambda root: PlanRequest.of(paths, options))


def project_sources(project: Path, base: ConnectionOptions | None = None) -> dict[str, FixedSource]:
    """Each environment of the project file ``project`` as the CLI resolves it (its
    server, overlays, the project's owner), planned as ``reconcile watch --all-envs`` does."""
    loaded = load_project(project)
    base = base or ConnectionOptions()

    def source(name: str) -> FixedSource:
        target = environment_target(loaded, name, base, loaded.owner or "default")
        return FixedSource(lambda root: PlanRequest.for_target(target))

    return {name: source(name) for name in loaded.environments}


@contextlib.asynccontextmanager
async def running_agent(
    source: Source | Mapping[str, Source],
    *,
    mode: str = "heal",
    interval: float = 1.0,
    **settings: Any,
) -> AsyncIterator[tuple[Agent, io.StringIO]]:
    """The agent running in this loop (JSON log into a buffer), stopped at exit; given
    a mapping of environment names to sources, one agent serving them all."""
    log = io.StringIO()
    watch = WatchSettings(
        interval=interval,
        mode="heal" if mode == "heal" else "observe",
        listen=settings.pop("listen", ("127.0.0.1", 0)),
        **settings,
    )
    agent = (
        Agent.serving(source, watch, Log("json", log))
        if isinstance(source, Mapping)
        else Agent(source, watch, Log("json", log))
    )
    task = asyncio.ensure_future(agent.run())
    try:
        yield agent, log
    finally:
        agent.stop.set()
        await asyncio.wait_for(task, 15)


def lines(log: io.StringIO | str) -> list[dict[str, Any]]:
    """The JSON log's lines (a buffer, or the text an agent process wrote)."""
    text = log if isinstance(log, str) else log.getvalue()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def get(agent: Agent, path: str) -> tuple[int, bytes]:
    """``GET path`` from the agent's HTTP listener: status and body."""
    assert agent.http is not None
    port = agent.http.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def changes(
    log: io.StringIO, resource: str, state: str, env: str | None = None
) -> list[dict[str, Any]]:
    """The log's change lines of ``resource`` into ``state`` (of environment ``env``)."""
    return [
        line
        for line in lines(log)
        if line["event"] == "change"
        and line["resource"] == resource
        and line["state"] == state
        and (env is None or line.get("env") == env)
    ]


async def until(check: Callable[[], Any], *, what: str, patience: float = PATIENCE) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while True:
        found = check()
        if found:
            return found
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        await asyncio.sleep(0.05)


async def orders_healed_in(log: io.StringIO, envs: Iterable[str]) -> None:
    """Wait until the log says ORDERS was created (healed) in each of ``envs``."""
    for env in envs:
        await until(
            lambda env=env: changes(log, "Stream ORDERS", "healed", env),
            what=f"ORDERS created in {env}",
        )


async def cycles_after(agent: Agent, n: int = 2) -> None:
    """Wait until ``n`` more cycles have finished."""
    start = agent.watch.cycles
    await until(lambda: agent.watch.cycles >= start + n, what=f"{n} more cycles")


class Other:
    """Another client (as a person's laptop would be): raw JetStream API over nats-py."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(cls, url: str, name: str = "alice-laptop") -> AsyncIterator[Other]:
        nc = await nats.connect(url, name=name, allow_reconnect=False, max_reconnect_attempts=0)
        try:
            yield cls(nc)
        finally:
            await nc.close()

    async def api(self, op: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = b"" if body is None else json.dumps(body).encode()
        reply = await self.nc.request(f"$JS.API.{op}", payload, timeout=5)
        answer: dict[str, Any] = json.loads(reply.data)
        assert "error" not in answer, answer
        return answer

    async def info(self, stream: str) -> dict[str, Any]:
        return await self.api(f"STREAM.INFO.{stream}")

    async def update(self, stream: str, **fields: Any) -> None:
        """Change ``fields`` of ``stream``'s live config (drift, as a person makes it)."""
        config = (await self.info(stream))["config"]
        config.update(fields)
        await self.api(f"STREAM.UPDATE.{stream}", config)

    async def messages(self, stream: str) -> int:
        return int((await self.info(stream))["state"]["messages"])

    async def publish(self, subject: str, n: int) -> None:
        for i in range(n):
            await self.nc.request(subject, f"m{i}".encode(), timeout=5)


@contextlib.asynccontextmanager
async def orders_agent(
    url: str,
    specs: Path,
    *,
    other: str = "alice-laptop",
    messages: int = 10,
    interval: float = 3600,
) -> AsyncIterator[tuple[Agent, io.StringIO, Other]]:
    """An agent healing ``specs`` (ORDERS) on ``url`` (by default every hour: advisories
    only), ORDERS created by it and ``messages`` published by another client named
    ``other``."""
    async with (
        running_agent(fixed_source([specs], url), interval=interval) as (agent, log),
        Other.connect(url, name=other) as client,
    ):
        await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
        await client.publish("orders.new", messages)
        yield agent, log, client


def agent_process(args: list[str], *, cwd: Path, log: Path | None = None) -> subprocess.Popen[str]:
    """``reconcile watch ARGS`` as its own process (no NATS_/RECONCILE_ variable of this
    one leaks in); its log (standard error) into the file ``log``, else a pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "reconciler", "watch", *args],
        cwd=cwd,
        env=cleaned_environ(),
        stderr=subprocess.PIPE if log is None else log.open("w"),
        text=True,
    )


def git_agent(bare: Path, *, cwd: Path, log: Path) -> subprocess.Popen[str]:
    """An agent healing every environment of the project in the git repository ``bare``
    (polled every 0.2 s), logging JSON lines into ``log``, no port."""
    args = ["--git", f"file://{bare}", "--all-envs", "--mode", "heal", "--interval", "1h"]
    return agent_process(
        [*args, "--git-poll", "0.2s", "--listen", "off", "--log-format", "json"], cwd=cwd, log=log
    )


def stopped(agent: subprocess.Popen[str]) -> int | None:
    """``agent`` stopped as systemd and Kubernetes stop it (SIGTERM), killed when it has
    not ended 10 s later (then raising); its exit status."""
    agent.send_signal(signal.SIGTERM)
    try:
        return agent.wait(10)
    finally:
        if agent.poll() is None:
            agent.kill()


def link_error(project: Path, env: str, run: Any) -> str:
    """The connection error an agent of ``project`` (no git) gives environment ``env``,
    once it has one."""

    async def scenario() -> str:
        async with running_agent(project_sources(project), interval=0.5) as (agent, _log):
            watch = agent.watches[env]
            await until(lambda: watch.link.error, what=f"{env}'s connection refused")
            return str(watch.link.error)

    return str(run(scenario()))


def one_server_by_two_names(folder: Path, url: str, zero: str, one: str) -> None:
    """A project whose environments ``zero`` and ``one`` are the one server at ``url``,
    ``one`` by the name ``localhost`` (its own overlays in ``folder/overlays``): the
    project file's text differs, the server's answer does not."""
    other = url.replace("127.0.0.1", "localhost")
    assert other != url
    project = (
        f"owner: shop\nspecs: [specs]\nenvironments:\n  {zero}:\n    servers: {url}\n"
        f"  {one}:\n    servers: {other}\n    overlays: [overlays]\n"
    )
    write(folder, project, "reconcile.yaml")


def stop_all(agents: Iterable[subprocess.Popen[str]]) -> None:
    """Every agent still running :func:`stopped` (a test's clean-up: never raises)."""
    for agent in agents:
        if agent.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                stopped(agent)


def wait_for_line(
    log: Path, check: Callable[[dict[str, Any]], Any], what: str, patience: float = 60.0
) -> list[dict[str, Any]]:
    """The lines of an agent process's JSON log (the file ``log``) that ``check`` accepts,
    once there is one; fail naming ``what`` (and showing the log's end)."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        found = [line for line in lines(log.read_text()) if check(line)]
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting: {what}\n{log.read_text()[-3000:]}")
