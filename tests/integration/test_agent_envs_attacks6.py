"""An attacker and a careless operator against one `reconcile watch` process serving
many environments (issue 42, "Many NATS systems"): a server that stops answering while
the agent is connected, a server that takes the connection and fails every cycle."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import nkeys
import pytest
from agent_harness import (
    Other,
    changes,
    get,
    lines,
    orders_healed_in,
    project_sources,
    running_agent,
    until,
)
from prometheus_client.parser import text_string_to_metric_families
from test_agent_envs import _declared, _drift, _project

from reconciler.jetstream import ConnectionOptions

pytestmark = pytest.mark.slow  # attack runs: .ci/run's second stage


async def _connected(agent: Any) -> dict[str, float]:
    """``reconcile_connected`` by environment, from /metrics."""
    text = (await get(agent, "/metrics"))[1].decode()
    return {
        sample.labels["env"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "reconcile_connected"
        for sample in family.samples
    }


def test_a_server_that_stops_answering_is_said_unreachable_while_the_other_heals(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """``hung``'s server is stopped (SIGSTOP) while the agent is connected: its TCP
    connection stays open, so every request only times out, and nats-py's own pings
    would notice after minutes. Its first failed cycle asks for a PONG, gets none, and
    the environment is unreachable in /status and ``reconcile_connected`` (it said
    connected and reachable until then); ``good`` heals meanwhile, every message kept."""
    servers = {"good": server_factory(), "hung": server_factory()}
    project = _project(tmp_path, servers)
    sources = project_sources(project, ConnectionOptions(timeout=1.0, connect_timeout=1.0))

    async def scenario() -> None:
        async with running_agent(sources, mode="heal", interval=0.5) as (agent, log):
            await orders_healed_in(log, servers)
            async with Other.connect(servers["good"].url) as alice:
                await alice.publish("orders.new", 7)
            await asyncio.to_thread(servers["hung"].pause)
            hung = agent.watches["hung"]
            await until(lambda: hung.link.reachable is False, what="hung said unreachable")
            status = json.loads((await get(agent, "/status"))[1])["environments"]
            assert status["hung"]["reachable"] is False
            assert status["hung"]["connected"] is False
            assert status["hung"]["unreachable_since"] is not None
            assert status["hung"]["ready"] is False
            assert (await _connected(agent))["hung"] == 0

            healed = len(changes(log, "Stream ORDERS", "healed", "good"))
            await _drift(servers["good"].url, description="changed by hand", max_msgs=9000)
            await until(
                lambda: len(changes(log, "Stream ORDERS", "healed", "good")) > healed,
                what="good healed while hung is unreachable",
            )
            assert await _declared(servers["good"].url)
            async with Other.connect(servers["good"].url) as alice:
                assert await alice.messages("ORDERS") == 7
            assert status["good"]["reachable"] is True and status["good"]["ready"] is True
            assert (await _connected(agent))["good"] == 1
            # /readyz: one environment down is the world's fault (docs/agent.md)
            assert (await get(agent, "/readyz"))[0] == 200

            await asyncio.to_thread(servers["hung"].resume)
            await until(lambda: hung.link.connected, what="hung connected again")
            await until(lambda: hung.not_ready() is None, what="hung planned again")
            assert (await _connected(agent))["hung"] == 1

    try:
        run(scenario())
    finally:
        servers["hung"].resume()


def test_a_server_without_jetstream_is_retried_with_the_backoff_not_every_second(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """``nojs``'s server takes the connection and fails every cycle (JetStream is off):
    each attempt opened a connection, reset the failure count and failed, so it was
    tried again every ``first_backoff`` forever (a new connection each time, the 1 s of
    docs/agent.md never doubling). The failures now grow (1, 2, 3, ...) and so does the
    wait; the server saw one connection per attempt, no more."""
    servers = {"good": server_factory(), "nojs": server_factory(jetstream=False)}
    sources = project_sources(_project(tmp_path, servers))

    def attempts(log: Any) -> list[int]:
        return [
            int(line["failures"])
            for line in lines(log)
            if line["event"] == "error" and line.get("env") == "nojs"
        ]

    async def scenario() -> None:
        async with running_agent(sources, mode="heal", interval=60.0, first_backoff=0.1) as (
            agent,
            log,
        ):
            await orders_healed_in(log, ["good"])
            await until(lambda: len(attempts(log)) >= 4, what="four attempts on nojs")
            assert attempts(log)[:4] == [1, 2, 3, 4], attempts(log)
            assert agent.watches["nojs"]._backoff() >= 0.8  # 0.1 s doubled three times
            varz = await asyncio.to_thread(servers["nojs"].monitor, "varz")
            assert varz["total_connections"] <= len(attempts(log)) + 1
            status = json.loads((await get(agent, "/status"))[1])["environments"]["nojs"]
            assert status["ready"] is False and status["error"]
            assert "JetStream" in status["error"]

    run(scenario())


SEED = "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY"
JWT = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJqdGkiOiJTRUNSRVQifQ.c2lnbmF0dXJl"


def test_a_credentials_variable_holding_the_secret_itself_is_never_printed(
    server_factory: Any, tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A careless operator puts the creds file's text (a Kubernetes Secret as a variable,
    not as a file) in the variable ``creds: {env: NAME}`` names, and a seed in the one
    ``nkey: {env: NAME}`` names. Neither is a file: the error said "credentials file not
    found: " and the value, seed and JWT included, in the log and in /status. It now
    says how long the value is, never the value; the other environment heals."""
    servers = {"good": server_factory(), "creds": server_factory(), "seed": server_factory()}
    project = _project(tmp_path, servers)
    text = project.read_text()
    text = text.replace(
        f"servers: {servers['creds'].url}\n",
        f"servers: {servers['creds'].url}\n    creds: {{env: A6_CREDS}}\n",
    ).replace(
        f"servers: {servers['seed'].url}\n",
        f"servers: {servers['seed'].url}\n    nkey: {{env: A6_SEED}}\n",
    )
    project.write_text(text)
    creds = (
        f"-----BEGIN NATS USER JWT-----\n{JWT}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{SEED}\n------END USER NKEY SEED------\n"
    )
    monkeypatch.setenv("A6_CREDS", creds)
    monkeypatch.setenv("A6_SEED", SEED)
    sources = project_sources(project)

    async def scenario() -> None:
        async with running_agent(sources, mode="heal", interval=0.5) as (agent, log):
            await orders_healed_in(log, ["good"])
            for env in ("creds", "seed"):
                await until(lambda env=env: agent.watches[env].link.error, what=f"{env} failed")
            status = (await get(agent, "/status"))[1].decode()
            metrics = (await get(agent, "/metrics"))[1].decode()
            readyz = (await get(agent, "/readyz"))[1].decode()
            for env in ("creds", "seed"):
                error = json.loads(status)["environments"][env]["error"]
                assert error.startswith("credentials file not found"), error
            for shown in (log.getvalue(), status, metrics, readyz):
                for secret in (SEED, JWT, "eyJ0eXAi", SEED[10:30]):
                    assert secret not in shown
            assert await _declared(servers["good"].url)

    run(scenario())


class DrippingEndpoint:
    """An HTTP endpoint that answers a byte every ``pause`` seconds (each read of the
    client's well within its socket timeout): a monitoring port behind a broken proxy,
    or an attacker's. Loopback, a thread per connection, closed at exit."""

    def __init__(self, pause: float = 0.1, length: int = 600) -> None:
        self.pause, self.length = pause, length
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while not self.closed.is_set():
                conn, _ = self.sock.accept()
                threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.length
        with contextlib.suppress(OSError), conn:
            conn.recv(4096)
            for byte in answer + b" " * self.length:
                if self.closed.wait(self.pause):
                    return
                conn.sendall(bytes([byte]))

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


def test_a_monitoring_endpoint_that_drips_fails_its_cycle_and_never_holds_the_exit(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """``slow`` names a monitoring endpoint (``monitor:``, read by every plan) that answers
    a byte every 0.1 s: each read came within the socket's timeout, so the read went on
    for the whole answer (a minute here; for ever for an attacker), its cycle never
    ended, and SIGTERM waited for the executor's thread. Now the whole read is bounded by
    the request timeout: the cycle fails saying so, the other environment heals, and the
    agent stops at once."""
    endpoint = DrippingEndpoint()
    servers = {"good": server_factory(), "slow": server_factory()}
    project = _project(tmp_path, servers)
    slow_url = servers["slow"].url
    project.write_text(
        project.read_text().replace(
            f"servers: {slow_url}\n", f"servers: {slow_url}\n    monitor: {endpoint.url}\n"
        )
    )
    sources = project_sources(project, ConnectionOptions(timeout=1.0))

    async def scenario() -> None:
        async with running_agent(sources, mode="heal", interval=0.5) as (agent, log):
            slow = agent.watches["slow"]
            await until(
                lambda: slow.link.error and "jsz" in slow.link.error, what="slow's read cut off"
            )
            await orders_healed_in(log, ["good"])
            await _drift(servers["good"].url, description="changed by hand")
            healed = len(changes(log, "Stream ORDERS", "healed", "good"))
            await until(
                lambda: len(changes(log, "Stream ORDERS", "healed", "good")) >= healed,
                what="good healed",
            )
            assert slow.not_ready() is not None
            async with Other.connect(slow_url) as alice:  # nothing planned, nothing made
                names = await alice.api("STREAM.NAMES")
            assert "ORDERS" not in (names.get("streams") or [])

    started = time.monotonic()
    try:
        run(scenario())  # asyncio.run's end waits for the executor's threads
    finally:
        endpoint.close()
    # the answer takes over a minute to drip: the exit waited for none of it
    assert time.monotonic() - started < 60


def test_a_creds_file_with_a_broken_seed_fails_its_environment_not_the_agent(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """``nkey``'s creds file has the nats CLI's markers and a seed nkeys cannot read (a
    truncated copy), against a server that asks for a signed nonce: nats-py raised
    nkeys' own error out of the connect, which ended every environment's watch (and
    printed a traceback). Now that environment fails at its creds file, never quoting
    it; the other heals."""
    public = nkeys.from_seed(SEED.encode()).public_key.decode()
    servers = {"good": server_factory(), "nkey": server_factory(users=[{"nkey": public}])}
    project = _project(tmp_path, servers)
    broken = SEED[:30]
    creds = (
        f"-----BEGIN NATS USER JWT-----\n{JWT}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{broken}\n------END USER NKEY SEED------\n"
    )
    (tmp_path / "nkey.creds").write_text(creds)
    url = servers["nkey"].url
    project.write_text(
        project.read_text().replace(f"servers: {url}\n", f"servers: {url}\n    creds: nkey.creds\n")
    )
    sources = project_sources(project)

    async def scenario() -> None:
        async with running_agent(sources, mode="heal", interval=0.5) as (agent, log):
            watch = agent.watches["nkey"]
            await until(
                lambda: agent.stop.is_set() or watch.link.error, what="nkey's connect failed"
            )
            assert not agent.stop.is_set(), log.getvalue()[-2000:]
            assert watch.link.error is not None
            assert "nkey.creds" in watch.link.error and broken not in watch.link.error
            await orders_healed_in(log, ["good"])
            assert await _declared(servers["good"].url)
            assert broken not in log.getvalue()

    run(scenario())
