"""The agent over many NATS systems: ``reconcile watch --all-envs`` (one process) and
``--shard 0/2`` + ``--shard 1/2`` (two processes) over a project of many environments,
each its own nats-server on loopback.

    python bench/bench_agent_envs.py [--envs 50] [--streams 3] [--trials 40] [--idle 10]

For each way of running, in the same run on the same servers (every stream deleted
between them):
- start -> converged: from the agent processes' start to every environment's streams
  and consumers created (healed) from nothing;
- change -> healed, one at a time: another client updates one stream's description in
  a random environment; the time until the agent's log line says ``healed`` (median, p99);
- change -> healed, a burst: one change in every environment at once; each
  environment's time (median, p99, max): a slow environment would hold up the others;
- idle CPU: the agent processes' CPU seconds per wall second while nothing changes
  (interval 1 h, advisories on);
- RSS of the agent processes (the sum over shards; each one's as well).
The agents are processes of their own (``python -m reconciler watch``), their log read
line by line as it is written; CPU and RSS are read from /proc. Figures only: nothing
here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import nats
from bench_agent import quantiles, set_description, start_server

TICKS = os.sysconf("SC_CLK_TCK")
chance = random.Random(42)


def start_servers(folder: Path, count: int) -> list[tuple[subprocess.Popen[bytes], str]]:
    return [start_server(folder / f"js{i}") for i in range(count)]


def write_project(folder: Path, urls: list[str], streams: int) -> list[str]:
    (folder / "specs").mkdir()
    docs = []
    names = [f"S{i:03d}" for i in range(streams)]
    for name in names:
        docs.append(
            f"kind: Stream\nname: {name}\nsubjects: [{name.lower()}.>]\nstorage: memory\n"
            "description: declared\n"
        )
        for c in range(2):
            docs.append(f"kind: Consumer\nstream: {name}\nname: C{c}\nack_policy: explicit\n")
    (folder / "specs" / "streams.yaml").write_text("---\n".join(docs), encoding="utf-8")
    envs = "".join(f"  env-{i:03d}: {{servers: {url}}}\n" for i, url in enumerate(urls))
    project = f"owner: bench\nspecs: [specs]\nenvironments:\n{envs}"
    (folder / "reconcile.yaml").write_text(project, encoding="utf-8")
    return names


class AgentProcess:
    """``reconcile watch`` as a process; each change line noted with when it arrived."""

    def __init__(self, folder: Path, args: list[str]) -> None:
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "watch", *args],
            cwd=folder,
            env=environ,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.seen: dict[tuple[str, str, str], list[float]] = {}
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
            if line.get("event") == "change":
                key = (str(line.get("env")), str(line.get("resource")), str(line.get("state")))
                with self.lock:
                    self.seen.setdefault(key, []).append(now)

    def when(self, env: str, resource: str, state: str, after: float) -> float | None:
        with self.lock:
            return next((t for t in self.seen.get((env, resource, state), []) if t >= after), None)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def healed(
    agents: list[AgentProcess], env: str, resource: str, after: float, patience: float = 300.0
) -> float:
    deadline = time.perf_counter() + patience
    while True:
        for agent in agents:
            found = agent.when(env, resource, "healed", after)
            if found is not None:
                return found - after
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{env} {resource} not healed within {patience:g}s")
        await asyncio.sleep(0.005)


async def listening(url: str, patience: float = 60.0) -> None:
    """Wait until the server at ``url`` accepts connections."""
    host, port = url.removeprefix("nats://").split(":")
    deadline = time.monotonic() + patience
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def delete_everything(url: str) -> None:
    nc = await nats.connect(url)
    try:
        reply = json.loads((await nc.request("$JS.API.STREAM.NAMES", b"{}", timeout=30)).data)
        for name in reply.get("streams") or []:
            await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=30)
    finally:
        await nc.close()


async def run_way(
    label: str,
    shards: list[list[str]],
    folder: Path,
    envs: list[str],
    connections: dict[str, Any],
    names: list[str],
    args: argparse.Namespace,
) -> None:
    common = ["--project", "reconcile.yaml", "--mode", "heal", "--interval", "1h"]
    common += ["--listen", "off", "--log-format", "json"]
    agents = [AgentProcess(folder, [*common, *extra]) for extra in shards]
    start = min(a.started for a in agents)
    try:
        every = [
            healed(agents, env, f"Consumer {name}/C1", start) for env in envs for name in names
        ]
        converged = max(await asyncio.gather(*every))
        await asyncio.sleep(2.0)  # let the start's last cycles end
        cpu0, wall0 = sum(a.cpu_seconds() for a in agents), time.perf_counter()
        await asyncio.sleep(args.idle)
        idle = (sum(a.cpu_seconds() for a in agents) - cpu0) / (time.perf_counter() - wall0)
        single = []
        for trial in range(args.trials):
            env, name = chance.choice(envs), chance.choice(names)
            began = time.perf_counter()
            await set_description(connections[env], name, f"changed {trial}")
            single.append(await healed(agents, env, f"Stream {name}", began))
        name = names[0]
        began = time.perf_counter()
        await asyncio.gather(*(set_description(connections[env], name, "burst") for env in envs))
        burst = await asyncio.gather(
            *(healed(agents, env, f"Stream {name}", began) for env in envs)
        )
        rss = [a.rss_mib() for a in agents]
    finally:
        for agent in agents:
            agent.stop()
    median, p99 = quantiles(single)
    b_median, b_p99 = quantiles(list(burst))
    print(f"{label}:")
    print(f"  start -> {len(envs)} environments converged (from nothing)  {converged:7.2f} s")
    print(
        f"  change -> healed, one at a time ({args.trials})   median {median * 1000:7.1f} ms"
        f"  p99 {p99 * 1000:7.1f} ms  (goal: p99 < 1 s)"
    )
    print(
        f"  change -> healed, one in every environment at once  median {b_median * 1000:7.1f} ms"
        f"  p99 {b_p99 * 1000:7.1f} ms  max {max(burst) * 1000:7.1f} ms"
    )
    print(f"  idle CPU (interval 1 h, advisories on)          {idle * 100:6.2f} % of a core")
    each = " + ".join(f"{r:.0f}" for r in rss)
    print(f"  RSS                                              {sum(rss):6.0f} MiB ({each})")


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        servers = start_servers(folder, args.envs)
        urls = [url for _, url in servers]
        connections: dict[str, Any] = {}
        try:
            envs = [f"env-{i:03d}" for i in range(args.envs)]
            for env, url in zip(envs, urls, strict=True):
                await listening(url)
                connections[env] = await nats.connect(url, name="bench-other")
            names = write_project(folder, urls, args.streams)
            print(
                f"{args.envs} environments (a nats-server each on loopback), "
                f"{args.streams * 3} resources each ({args.streams} streams, 2 consumers each); "
                f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
            )
            ways = [
                ("one process (--all-envs)", [["--all-envs"]]),
                ("two shards (--shard 0/2, --shard 1/2)", [["--shard", "0/2"], ["--shard", "1/2"]]),
            ]
            for label, shards in ways:
                await asyncio.gather(*(delete_everything(url) for url in urls))
                await run_way(label, shards, folder, envs, connections, names, args)
        finally:
            for nc in connections.values():
                await nc.close()
            for process, _ in servers:
                process.terminate()
            for process, _ in servers:
                process.wait()
    print(f"(load average {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=50)
    parser.add_argument("--streams", type=int, default=3, help="streams per environment")
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU")
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
