"""An edit of the project file (and, with ``--git``, a commit) under ``reconcile watch
--all-envs`` of many environments: what it costs the agent to absorb it.

    python bench/bench_agent_edits.py [--envs 50,200,500] [--servers 2] [--live 200]

Each environment's task makes its own request after an edit of the project file (with
``--git``: before each cycle, from the commit's tree). It read and validated the whole
file each time, and checked the list of environments to serve (another read): an
N-environment file read 2N times per edit. The agent now reads it once per change for
every environment (``agent.source.ProjectReads``). Measured in the same run, on the
agent's own code (its sources as ``watch --all-envs --mode heal`` makes them):

- one read: ``load_project`` of the N-environment file (the baseline: median of 5);
- an edit absorbed: every environment's next request after the file changed, one after
  the other as the agent's one thread runs them; the CPU seconds it takes, its ratio to
  one read, and the files read; the last environment's request waits for all the others'
  (the environments' cycles come due together: one interval after the start);
- the same with the read not shared (each environment reads, as before the change);
- a commit absorbed (``--git``, a local repository) and a cycle of every environment
  with no new commit (each one made its request from the tree again).

``--live N``: the agent as a process of its own over N environments (spread over
``--servers`` nats-servers on loopback, each with an account of its own per
environment; ``--agent-code DIR``: the agent of another tree, main's to compare),
``--interval 5s``: the time from an edit of the project file to every environment's
log line saying it was read (median, last, last after the first), and the agent's CPU
seconds in that span above its idle rate. Figures only: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

from bench_agent_envs import listening
from dulwich import porcelain

from reconciler.agent.logs import Log
from reconciler.agent.loop import WatchSettings
from reconciler.agent.source import GitSource, ProjectReads, Source
from reconciler.cli.options import CONNECTION_PARAMS
from reconciler.cli.watch_cmd import _agent_of_many, _request_maker, watch
from reconciler.jetstream.embedded import find_binary, free_port
from reconciler.specs.project import Project, load_project

TICKS = os.sysconf("SC_CLK_TCK")
_T = TypeVar("_T")


class EveryTime(ProjectReads):
    """Each caller reads the file itself: the agent before the reads were shared."""

    def load(self, path: Path) -> Project:
        self.loads += 1
        return load_project(path)

    def derived(self, project: Project, what: Hashable, work: Callable[[], _T]) -> _T:
        return work()


def project_text(n: int, urls: list[str], description: str = "first") -> str:
    envs = "".join(
        f"  env-{i:03d}:\n    servers: {urls[i % len(urls)]}\n    user: u{i:03d}\n"
        f"    password: {{env: BENCH_PASSWORD}}\n    description: {description}\n"
        for i in range(n)
    )
    return f"owner: bench\nspecs: [specs]\nenvironments:\n{envs}"


def write_repository(folder: Path, n: int, urls: list[str]) -> Path:
    (folder / "specs").mkdir(parents=True)
    (folder / "specs" / "orders.yaml").write_text(
        'kind: Stream\nname: ORDERS\nsubjects: ["orders.>"]\nstorage: memory\n',
        encoding="utf-8",
    )
    path = folder / "reconcile.yaml"
    path.write_text(project_text(n, urls), encoding="utf-8")
    return path


def sources_of(
    path: Path, reads: ProjectReads, git: str | None = None, cache: Path | None = None
) -> list[Source]:
    """Each environment's source, as ``reconcile watch --all-envs --mode heal`` makes it."""
    project = Path("reconcile.yaml") if git else path
    args = ["--all-envs", "--mode", "heal", "--project", str(project), "--listen", "off"]
    ctx = watch.make_context("watch", args)
    with ctx:
        conn = {k: v for k, v in ctx.params.items() if k in CONNECTION_PARAMS}

        def make_for(name: str) -> Any:
            return _request_maker(ctx, (), conn, "default", project, name, (), reads)

        source = None
        if git is not None:
            assert cache is not None
            source = GitSource(git, "main", cache, make_for("env-000"))
        settings = WatchSettings(interval=60.0, mode="heal", listen=None)
        log = Log("json", io.StringIO())
        agent = asyncio.run(
            _agent_of_many((), None, source, make_for, settings, log, project, reads)
        )
    assert agent is not None
    return [w.source for w in agent.watches.values()]


def one_read(path: Path) -> float:
    times = []
    for _ in range(5):
        began = time.process_time()
        load_project(path)
        times.append(time.process_time() - began)
    return statistics.median(times)


def round_of(sources: list[Source], reads: ProjectReads) -> tuple[float, float, int]:
    """Every environment's request once, one after the other: CPU seconds, the last
    one's wait (wall seconds), the files read."""
    loads, cpu, wall = reads.loads, time.process_time(), time.perf_counter()
    for source in sources:
        source.request()
    return time.process_time() - cpu, time.perf_counter() - wall, reads.loads - loads


def edit_figures(folder: Path, n: int, urls: list[str], shared: bool) -> tuple[float, ...]:
    path = write_repository(folder, n, urls)
    reads = ProjectReads() if shared else EveryTime()
    sources = sources_of(path, reads)
    round_of(sources, reads)
    time.sleep(0.01)  # another modification time
    path.write_text(project_text(n, urls, "edited"), encoding="utf-8")
    return round_of(sources, reads)


def commit(work: Path, bare: Path, text: str) -> None:
    (work / "reconcile.yaml").write_text(text, encoding="utf-8")
    porcelain.add(str(work), paths=[str(work / "reconcile.yaml")])
    porcelain.commit(str(work), message=b"edit", author=b"b <b@e>", committer=b"b <b@e>")
    porcelain.push(str(work), str(bare), b"HEAD:refs/heads/main", errstream=io.BytesIO())


def commit_figures(folder: Path, n: int, urls: list[str], shared: bool) -> tuple[float, ...]:
    bare, work = folder / "origin.git", folder / "work"
    folder.mkdir(parents=True)
    porcelain.init(str(bare), bare=True)
    porcelain.init(str(work))
    write_repository(work, n, urls)
    porcelain.add(str(work), paths=[str(work / "specs" / "orders.yaml")])
    commit(work, bare, project_text(n, urls))
    reads = ProjectReads() if shared else EveryTime()
    sources = sources_of(work / "reconcile.yaml", reads, f"file://{bare}", folder / "cache")
    round_of(sources, reads)
    idle = round_of(sources, reads)  # a cycle of each, no new commit
    commit(work, bare, project_text(n, urls, "committed"))

    before = sources[0].commit

    async def fetched() -> None:
        while sources[0].commit == before:
            await sources[0].refresh()
            await asyncio.sleep(0.2)

    loads = reads.loads
    asyncio.run(fetched())  # the new commit's list of environments read, as the agent does
    cpu, last, _ = round_of(sources, reads)
    return (cpu, last, reads.loads - loads, *idle)


def in_process(sizes: list[int]) -> None:
    urls = ["nats://127.0.0.1:4222", "nats://127.0.0.1:4223"]
    os.environ["BENCH_PASSWORD"] = "not-a-secret"
    print("in-process, the agent's sources as watch --all-envs --mode heal makes them")
    print(
        f"{'envs':>5} {'one read':>9} | {'edit: CPU':>9} {'x read':>7} {'reads':>5} "
        f"{'last waits':>10} | {'before: CPU':>11} {'x read':>7} {'reads':>5} | "
        f"{'commit: CPU':>11} {'reads':>5} {'idle cycle':>10} | {'before':>11} {'idle':>9}"
    )
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            read = one_read(write_repository(folder / "base", n, urls))
            cpu, last, loads = edit_figures(folder / "shared", n, urls, True)
            b_cpu, _, b_loads = edit_figures(folder / "each", n, urls, False)
            g_cpu, _, g_loads, idle, _, _ = commit_figures(folder / "git", n, urls, True)
            gb_cpu, _, _, b_idle, _, _ = commit_figures(folder / "git-each", n, urls, False)
        print(
            f"{n:>5} {read * 1000:>7.1f}ms | {cpu:>8.3f}s {cpu / read:>6.1f}x {loads:>5} "
            f"{last:>9.3f}s | {b_cpu:>10.3f}s {b_cpu / read:>6.1f}x {b_loads:>5} | "
            f"{g_cpu:>10.3f}s {g_loads:>5} {idle:>9.3f}s | {gb_cpu:>10.3f}s {b_idle:>8.3f}s"
        )


# -- the agent as a process over real servers -------------------------------------------
def start_servers(folder: Path, count: int, n: int) -> list[tuple[subprocess.Popen[bytes], str]]:
    """``count`` nats-servers, each with an account (and user) for each environment it
    serves (environment i on server i % count)."""
    started = []
    for k in range(count):
        port = free_port()
        accounts = "".join(
            f"  A{i:03d}: {{jetstream: enabled, users: [{{user: u{i:03d}, "
            f"password: not-a-secret}}]}}\n"
            for i in range(k, n, count)
        )
        config = folder / f"s{k}.conf"
        config.write_text(
            f"listen: 127.0.0.1:{port}\njetstream: {{store_dir: {folder / f's{k}'}}}\n"
            f"accounts: {{\n{accounts}}}\n",
            encoding="utf-8",
        )
        process = subprocess.Popen(
            [str(find_binary()), "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.append((process, f"nats://127.0.0.1:{port}"))
    return started


class AgentProcess:
    """``reconcile watch`` as a process; when each environment's lines of an event came."""

    def __init__(self, folder: Path, args: list[str], code: Path | None = None) -> None:
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}
        if code is not None:  # another tree's agent (main's, to compare)
            environ["PYTHONPATH"] = str(code)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "watch", *args],
            cwd=folder,
            env=environ,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.seen: dict[str, dict[str, list[float]]] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            now = time.perf_counter()
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            with self.lock:
                by_env = self.seen.setdefault(str(line.get("event")), {})
                by_env.setdefault(str(line.get("env")), []).append(now)

    def when(self, event: str, env: str, after: float) -> float | None:
        with self.lock:
            times = self.seen.get(event, {}).get(env, [])
            return next((t for t in times if t >= after), None)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def wait_all(agent: AgentProcess, event: str, envs: list[str], after: float) -> list[float]:
    deadline = time.perf_counter() + 600
    while True:
        found = [agent.when(event, env, after) for env in envs]
        if all(t is not None for t in found):
            return [t for t in found if t is not None]
        if time.perf_counter() > deadline or agent.process.poll() is not None:
            raise TimeoutError(f"not every environment said {event}")
        time.sleep(0.05)


def live(n: int, count: int, interval: float, code: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        servers = start_servers(folder, count, n)
        urls = [url for _, url in servers]
        agent = None
        try:
            for url in urls:
                asyncio.run(listening(url))
            path = write_repository(folder, n, urls)
            envs = [f"env-{i:03d}" for i in range(n)]
            os.environ["BENCH_PASSWORD"] = "not-a-secret"
            args = ["--all-envs", "--mode", "heal", "--interval", f"{interval}s"]
            agent = AgentProcess(folder, [*args, "--listen", "off", "--log-format", "json"], code)
            start = time.perf_counter()
            wait_all(agent, "cycle", envs, start)  # each connected and planned
            wait_all(agent, "cycle", envs, time.perf_counter())  # and an interval later
            cpu0, wall0 = agent.cpu_seconds(), time.perf_counter()
            time.sleep(2 * interval)
            idle = (agent.cpu_seconds() - cpu0) / (time.perf_counter() - wall0)
            cpu0 = agent.cpu_seconds()
            edited = time.perf_counter()
            path.write_text(project_text(n, urls, "edited"), encoding="utf-8")
            read = [t - edited for t in wait_all(agent, "project", envs, edited)]
            spent = agent.cpu_seconds() - cpu0 - idle * max(read)
        finally:
            if agent is not None:
                agent.stop()
            for process, _ in servers:
                process.terminate()
            for process, _ in servers:
                process.wait()
    print(
        f"live: {n} environments on {count} nats-servers, --interval {interval:g}s: edit -> "
        f"read by each environment median {statistics.median(read):.2f} s, last "
        f"{max(read):.2f} s (after the first: {max(read) - min(read):.2f} s); CPU above "
        f"idle ({idle * 100:.1f} % of a core) {spent:.2f} s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="50,200,500", help="sizes, comma-separated")
    parser.add_argument("--live", type=int, default=0, help="environments of the live run")
    parser.add_argument("--servers", type=int, default=2, help="nats-servers of the live run")
    parser.add_argument("--interval", type=float, default=5.0, help="the live run's interval")
    parser.add_argument("--agent-code", type=Path, help="run the live agent from this tree")
    parsed = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    in_process([int(n) for n in parsed.envs.split(",")])
    if parsed.live:
        live(parsed.live, parsed.servers, parsed.interval, parsed.agent_code)
    sys.exit(0)
