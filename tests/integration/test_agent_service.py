"""`reconcile watch` as a service: its HTTP endpoints, a server restart, the apply lock
free while idle, an account without advisory permissions, SIGTERM, --once."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from pathlib import Path
from typing import Any

from agent_harness import (
    ORDERS,
    Other,
    agent_process,
    changes,
    cycles_after,
    fixed_source,
    get,
    running_agent,
    until,
)
from cli_runner import reconcile
from prometheus_client.parser import text_string_to_metric_families
from servers import NatsServer, write

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions


def test_metrics_parse_and_status_names_every_resource(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with running_agent(fixed_source([specs], clean_server.url), mode="heal") as (
            agent,
            log,
        ):
            await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
            await cycles_after(agent, 1)
            code, body = await get(agent, "/metrics")
            assert code == 200
            families = {f.name: f for f in text_string_to_metric_families(body.decode())}
            for name in (
                "reconcile_resources",
                "reconcile_last_successful_plan_timestamp_seconds",
                "reconcile_drift_events",
                "reconcile_heals_applied",
                "reconcile_steps_refused",
                "reconcile_plan_duration_seconds",
                "reconcile_apply_duration_seconds",
                "reconcile_advisories",
                "reconcile_git_head_age_seconds",
                "reconcile_connected",
            ):
                assert name in families, name
            in_sync = {
                s.labels["kind"]: s.value
                for s in families["reconcile_resources"].samples
                if s.labels["state"] == "in_sync"
            }
            assert in_sync["Stream"] == 1 and in_sync["Consumer"] == 1
            heals = {s.labels["kind"]: s.value for s in families["reconcile_heals_applied"].samples}
            assert heals["Stream"] == 1
            labels = {k for f in families.values() for s in f.samples for k in s.labels}
            assert labels <= {"state", "kind", "cause", "type", "outcome", "le", "action", "scope"}

            assert (await get(agent, "/healthz"))[0] == 200
            assert (await get(agent, "/readyz"))[0] == 200
            code, body = await get(agent, "/status")
            status = json.loads(body)
            names = {r["name"]: r["state"] for r in status["last_cycle"]["resources"]}
            assert names == {"ORDERS": "in_sync", "worker": "in_sync"}
            assert status["connected"] and status["advisories"] == "subscribed"
            assert (await get(agent, "/nothing"))[0] == 404

    run(scenario())


def test_the_agent_reconnects_after_a_server_restart_and_heals_again(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    server: NatsServer = server_factory()
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with running_agent(fixed_source([specs], server.url), mode="heal") as (agent, log):
            await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
            await asyncio.to_thread(server.kill)
            await until(lambda: not agent.watch.connected, what="the agent sees the server gone")
            assert (await get(agent, "/readyz"))[0] == 503
            await asyncio.to_thread(server.start)
            await until(lambda: agent.watch.connected, what="the agent connected again")
            async with Other.connect(server.url) as alice:
                await alice.api("STREAM.DELETE.ORDERS")
            again = await until(
                lambda: changes(log, "Stream ORDERS", "healed")[1:], what="ORDERS created again"
            )
            assert again[0]["cause"]["client"] == "alice-laptop"
            await until(lambda: agent.not_ready() is None, what="ready again")

    run(scenario())


def test_an_idle_agent_holds_no_lock_an_apply_needs(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    specs = write(tmp_path, ORDERS)
    more = write(tmp_path, 'kind: Stream\nname: OTHER\nsubjects: ["other.>"]\n', "other.yaml")

    async def scenario() -> None:
        async with running_agent(fixed_source([specs], clean_server.url), mode="heal") as (
            agent,
            log,
        ):
            await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
            await cycles_after(agent, 1)
            result = await engine.apply(
                [more], ConnectionOptions(servers=clean_server.url), lock_timeout=2.0
            )
            assert [s.label for s in result.applied] == ["Stream OTHER"]

    run(scenario())


def test_an_account_without_advisory_permission_says_so_and_polls(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    users = [
        {
            "user": "ops",
            "password": "secret-pw",
            "permissions": {
                "publish": {"allow": [">"]},
                "subscribe": {"allow": ["_INBOX.>"]},
            },
        }
    ]
    server: NatsServer = server_factory(users=users)
    url = server.url.replace("nats://", "nats://ops:secret-pw@")
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with running_agent(fixed_source([specs], url), mode="heal") as (agent, log):
            await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
            assert agent.watch.listener.state.startswith("denied")
            assert agent.metrics.advisories_subscribed._value.get() == 0
            assert "secret-pw" not in log.getvalue()
            notices = [line for line in log.getvalue().splitlines() if "may not subscribe" in line]
            assert notices
            async with Other.connect(url) as alice:  # the interval's plan still finds it
                await alice.api("STREAM.DELETE.ORDERS")
            again = await until(
                lambda: changes(log, "Stream ORDERS", "healed")[1:], what="ORDERS created again"
            )
            assert again[0].get("cause") is None  # nobody named: no advisory came

    run(scenario())


def test_sigterm_stops_the_agent_cleanly(clean_server: NatsServer, tmp_path: Path) -> None:
    write(tmp_path, ORDERS)
    agent = agent_process(
        [
            "specs.yaml",
            "--server",
            clean_server.url,
            "--interval",
            "1s",
            "--mode",
            "heal",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ],
        cwd=tmp_path,
    )
    try:
        assert agent.stderr is not None
        for line in agent.stderr:
            if '"event": "cycle"' in line:
                break
        agent.send_signal(signal.SIGTERM)
        _, rest = agent.communicate(timeout=5)  # systemd's and Kubernetes' patience, shortened
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0, rest
    assert '"event": "stopped"' in rest
    lock = reconcile("lock", "status", "--server", clean_server.url, cwd=tmp_path)
    assert "apply lock RECONCILE_LOCKS/apply: free" in lock.stdout, lock.stdout


def test_once_exits_2_on_drift_0_when_healed_or_in_sync(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    write(tmp_path, ORDERS)
    args = ("watch", "specs.yaml", "--server", clean_server.url, "--once", "--listen", "off")
    observe = reconcile(*args, cwd=tmp_path)
    assert observe.returncode == 2, observe.stderr
    assert "Stream ORDERS is missing" in observe.stderr
    heal = reconcile(*args, "--mode", "heal", cwd=tmp_path)
    assert heal.returncode == 0, heal.stderr
    assert "Stream ORDERS was healed" in heal.stderr
    again = reconcile(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    policy = write(
        tmp_path,
        "rules:\n  - id: sized\n    level: deny\n    message: streams set max_bytes\n"
        "    kinds: [Stream]\n    expr: resource.desired.max_bytes > 0\n",
        "policy.yaml",
    )
    denied = reconcile(*args, "--policy", str(policy), cwd=tmp_path)
    assert denied.returncode == 3, denied.stderr
    broken = write(tmp_path, "kind: Stream\nname: BAD\nmax_msgs: lots\n", "bad.yaml")
    error = reconcile("watch", str(broken), "--server", clean_server.url, "--once", cwd=tmp_path)
    assert error.returncode == 1
    assert "Traceback" not in error.stderr


def test_a_listen_address_in_use_is_one_error_line(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    write(tmp_path, ORDERS)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = reconcile(
            "watch",
            "specs.yaml",
            "--server",
            clean_server.url,
            "--once",
            "--listen",
            f"127.0.0.1:{port}",
            cwd=tmp_path,
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "--listen off" in done.stderr  # the way out (a cron's --once beside a service)
    assert "Traceback" not in done.stderr
