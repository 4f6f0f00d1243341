"""Fleet fixtures: one Spark session for every test, and a real two-environment fleet.

``fleet_case`` builds the fleet once per session on two real nats-servers: specs are
applied, then drift is injected by hand through the JetStream API (changed fields, a
deleted consumer, unmanaged and orphaned streams, a spec changed after the apply so its
stream needs a replace), each server is snapshotted with ``reconcile snapshot`` as a user
runs it, and ``reconcile drift``'s own engine (``run.plan`` + ``drift.from_plan``)
computes the expected report of each environment in-process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from fleet_findings import FleetCase
from servers import NatsServer, run

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions
from reconciler.planning import drift
from reconciler.specs.spec import MANAGED_KEY, MANAGED_VALUE

REPO = Path(__file__).resolve().parents[2]
HOUR = 3600 * 10**9


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from reconciler.fleet.session import spark_session

    session = spark_session("local[2]", shuffle_partitions=2)
    yield session
    session.stop()


async def api(url: str, op: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    nc = await nats.connect(url)
    try:
        payload = json.dumps(body).encode() if body is not None else b""
        msg = await nc.request(f"$JS.API.{op}", payload, timeout=5)
    finally:
        await nc.close()
    answer: dict[str, Any] = json.loads(msg.data)
    assert "error" not in answer, answer
    return answer


async def inject_eu(url: str) -> None:
    """Changed fields, a missing consumer, an unmanaged and an orphaned stream."""
    config = (await api(url, "STREAM.INFO.ORDERS"))["config"]
    config.update(max_age=HOUR, description="changed by hand")
    await api(url, "STREAM.UPDATE.ORDERS", config)
    await api(url, "CONSUMER.DELETE.ORDERS.DISPATCH")
    await api(url, "STREAM.CREATE.LEGACY", {"name": "LEGACY", "subjects": ["legacy.>"]})
    legacy_consumer = {"durable_name": "L", "ack_policy": "explicit"}
    await api(url, "CONSUMER.CREATE.LEGACY.L", {"stream_name": "LEGACY", "config": legacy_consumer})
    adhoc = {"durable_name": "ADHOC", "ack_policy": "none", "filter_subject": "ORDERS.x"}
    await api(url, "CONSUMER.CREATE.ORDERS.ADHOC", {"stream_name": "ORDERS", "config": adhoc})
    old = {"name": "OLD", "subjects": ["old.>"], "metadata": {MANAGED_KEY: MANAGED_VALUE}}
    await api(url, "STREAM.CREATE.OLD", old)


async def inject_us(url: str) -> None:
    """A changed bucket, and a stream managed elsewhere with inherited consumer limits."""
    config = (await api(url, "STREAM.INFO.KV_app_config"))["config"]
    config["max_msgs_per_subject"] = 2
    await api(url, "STREAM.UPDATE.KV_app_config", config)
    raw = {"name": "RAW", "subjects": ["raw.>"], "consumer_limits": {"max_ack_pending": 50}}
    await api(url, "STREAM.CREATE.RAW", raw)
    for name, metadata in (("READER", {MANAGED_KEY: MANAGED_VALUE}), ("SPY", {})):
        config = {"durable_name": name, "ack_policy": "explicit", "metadata": metadata}
        await api(url, f"CONSUMER.CREATE.RAW.{name}", {"stream_name": "RAW", "config": config})


US_EXTRA = """\
kind: Stream
name: RAW
external: true
---
kind: Consumer
stream: RAW
name: READER
ack_policy: explicit
"""


def snapshot(env: str, url: str, out: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "reconciler",
            "snapshot",
            "--env",
            env,
            "--server",
            url,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def expected(folder: Path, url: str) -> drift.DriftReport:
    plan = run(engine.plan([folder], ConnectionOptions(servers=url)))
    return drift.from_plan(plan)


@pytest.fixture(scope="session")
def fleet_case(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetCase]:
    base = tmp_path_factory.mktemp("fleet")
    specs, snaps = base / "specs", base / "snapshots"
    servers = {env: NatsServer(base / f"nats-{env}").start() for env in ("eu", "us")}
    try:
        for env, server in servers.items():
            shutil.copytree(REPO / "examples" / "shop", specs / env, dirs_exist_ok=True)
            shutil.copytree(REPO / "examples" / "buckets", specs / env, dirs_exist_ok=True)
            options = ConnectionOptions(servers=server.url)
            result = run(engine.apply([specs / env], options))
            assert result.ok, result.failed
        run(inject_eu(servers["eu"].url))
        run(inject_us(servers["us"].url))
        orders = specs / "us" / "orders.yaml"  # declared storage changes: a replace
        orders.write_text(orders.read_text().replace("storage: file", "storage: memory"))
        (specs / "us" / "flags.yaml").write_text("kind: KeyValue\nname: flags\n")
        (specs / "us" / "raw.yaml").write_text(US_EXTRA)
        reports = {}
        for env, server in servers.items():
            snapshot(env, server.url, snaps / f"{env}.jsonl")
            reports[env] = expected(specs / env, server.url)
        yield FleetCase(specs, snaps, reports, servers)
    finally:
        for server in servers.values():
            server.stop()
