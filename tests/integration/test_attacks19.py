"""The agent serving many environments (``--all-envs``, ``--shard``) and its HTTP
endpoints, attacked as an attacker and a careless operator would, against real
nats-server processes."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pytest
from agent_harness import ORDERS, agent_process, stop_all, wait_for_line
from prometheus_client.parser import text_string_to_metric_families
from servers import NatsServer, unused_port, write

from reconciler.agent.shards import owner

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage


def _rss_mib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("VmRSS")).split()[1]) // 1024


def _status_size(port: int, *, more_than: int, patience: float = 60.0) -> int:
    """The size of /status once it is over ``more_than`` bytes (the cycles planned)."""
    deadline = time.monotonic() + patience
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=30) as reply:
            size = len(reply.read())
        if size > more_than or time.monotonic() > deadline:
            assert size > more_than, size
            return size
        time.sleep(0.2)


def _stuck_clients(port: int, n: int) -> list[socket.socket]:
    """``n`` clients that ask for /status and never read the answer."""
    clients = []
    for _ in range(n):
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(("127.0.0.1", port))
        client.sendall(b"GET /status HTTP/1.1\r\n\r\n")
        clients.append(client)
    for client in clients:  # each answered: its body handed to the connection
        client.settimeout(30)
        assert client.recv(1) == b"H"
    return clients


def test_clients_that_never_read_a_large_status_hold_no_copy_of_it_each(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Each connection asking for /status got the whole body handed to its transport at
    once: what the kernel did not take (a client that never reads, beyond a few MiB) was
    a copy held by the process for 5 s. 64 such clients held 64 copies: a 5 MiB /status
    (8,000 resources with long names) took the agent from 82 to 240 MiB, three rounds of
    them to 501 MiB, never given back (a pod's 512 MiB limit kills it). The body is
    handed over a part at a time, each once the last has left."""
    stream = "S" * 255
    consumers = "".join(
        f"---\nkind: Consumer\nstream: {stream}\nname: C{c:05d}{'y' * 249}\nack_policy: explicit\n"
        for c in range(8000)
    )
    (tmp_path / "specs").mkdir()
    write(tmp_path / "specs", f"kind: Stream\nname: {stream}\nsubjects: [s.>]\n{consumers}")
    write(
        tmp_path,
        f"owner: shop\nspecs: [specs]\nenvironments:\n  a:\n    servers: {clean_server.url}\n"
        f"  b:\n    servers: {clean_server.url}\n",
        "reconcile.yaml",
    )
    log = tmp_path / "agent.log"
    args = ["--env", "a", "--env", "b", "--mode", "observe", "--interval", "1h"]
    agent = agent_process(
        [*args, "--listen", "127.0.0.1:0", "--log-format", "json"], cwd=tmp_path, log=log
    )
    try:
        listening = wait_for_line(log, lambda line: line["event"] == "listening", "listening")
        port = int(str(listening[0]["message"]).rsplit(":", 1)[1].split("/")[0])
        body = _status_size(port, more_than=8_000_000)  # both environments' 8,001 resources
        before = _rss_mib(agent.pid)
        held: list[socket.socket] = []
        highest = before
        try:
            for _ in range(2):  # a new round: the old clients gone, 64 new ones
                for client in held:
                    client.close()
                held = _stuck_clients(port, 64)
                highest = max(highest, _rss_mib(agent.pid))
        finally:
            for client in held:
                client.close()
        # a copy each was 64 bodies a round; a part each is a few MiB in all
        assert highest - before < 10 * body / 2**20, (before, highest, body)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=30) as reply:
            assert len(reply.read()) == body  # a client that reads gets all of it
    finally:
        stop_all([agent])


def _metrics(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    return {
        family.name: {tuple(sorted(s.labels.items())): s.value for s in family.samples}
        for family in text_string_to_metric_families(text)
    }


def test_an_environment_added_while_the_shards_run_is_a_series_until_a_restart_serves_it(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """An edit (or a commit) adding an environment is served by no shard until its shard
    restarts: said once in the log and in /status, but an alert, which reads metrics, saw
    nothing: the environment has no series at all, so ``reconcile_connected{env} == 0``
    never fires, and in Kubernetes nothing restarts the pod. Its shard now counts it
    (``reconcile_environment_not_served{env}`` 1, the other shard nothing) until an edit
    no longer names it."""
    names = ["dev", "prod", "staging", "eu", "us", "asia", "qa", "perf"]
    zero = next(n for n in names if owner(n, 2) == 0)
    one = next(n for n in names if owner(n, 2) == 1)
    added = next(n for n in names if n not in (zero, one))
    url = clean_server.url
    (tmp_path / "specs").mkdir()
    write(tmp_path / "specs", ORDERS, "orders.yaml")
    project = f"owner: shop\nspecs: [specs]\nenvironments:\n  {zero}: {{servers: {url}}}\n"
    project += f"  {one}: {{servers: {url}}}\n"
    write(tmp_path, project, "reconcile.yaml")
    shards, ports = [], []
    try:
        for index in (0, 1):
            log, port = tmp_path / f"shard{index}.log", unused_port()
            args = ["--shard", f"reconcile-watch-{index}/2", "--mode", "observe"]
            args += ["--interval", "0.3s", "--listen", f"127.0.0.1:{port}", "--log-format", "json"]
            shards.append(agent_process(args, cwd=tmp_path, log=log))
            ports.append(port)
            wait_for_line(log, lambda line: line["event"] == "cycle", f"shard {index} planned")
        assert not _metrics(ports[0]).get("reconcile_environment_not_served")
        write(tmp_path, project + f"  {added}: {{servers: {url}}}\n", "reconcile.yaml")
        serving = owner(added, 2)
        wait_for_line(
            tmp_path / f"shard{serving}.log",
            lambda line: line["event"] == "serving" and line.get("environment") == added,
            f"{added} said not served",
        )
        counted = _metrics(ports[serving]).get("reconcile_environment_not_served", {})
        assert counted == {(("env", added),): 1.0}
        assert not _metrics(ports[1 - serving]).get("reconcile_environment_not_served")

        write(tmp_path, project, "reconcile.yaml")  # named no more: the series goes
        deadline = time.monotonic() + 30
        while _metrics(ports[serving]).get("reconcile_environment_not_served"):
            assert time.monotonic() < deadline, "the series outlived the edit removing it"
            time.sleep(0.2)
    finally:
        stop_all(shards)
