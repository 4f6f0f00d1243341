"""A single server with a leafnode link (a disaster-recovery standby, an edge site) names
a cluster in its INFO (its own name), as a cluster does: it was taken for one, so a spec
of three replicas passed the plan and the apply failed midway (the streams before it
made), and its own storage limits were never checked ("not checked in a cluster"). It
advertises no other server and names the cluster as itself (docs/jetstream-notes.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats
from cli_runner import reconcile
from servers import NatsServer, joined_domains, run, write

from reconciler.execution.capacity_checks import IN_A_CLUSTER

SPECS = """\
kind: Stream
name: AAA_FIRST
subjects: ["first.>"]
---
kind: Stream
name: ORDERS
subjects: ["orders.>"]
num_replicas: 3
"""


async def _existing(url: str, count: int) -> None:
    """A stream of the user's, with ``count`` messages (made before this tool came)."""
    nc = await nats.connect(url)
    try:
        config = {"name": "EXISTING", "subjects": ["existing.>"]}
        await nc.request("$JS.API.STREAM.CREATE.EXISTING", json.dumps(config).encode())
        for i in range(count):
            await nc.request("existing.x", str(i).encode())
    finally:
        await nc.close()


async def _streams(url: str) -> dict[str, int]:
    nc = await nats.connect(url)
    try:
        reply = await nc.request("$JS.API.STREAM.LIST", b"{}")
        listed = json.loads(reply.data)["streams"]
        return {s["config"]["name"]: s["state"]["messages"] for s in listed}
    finally:
        await nc.close()


def test_a_leaf_server_is_no_cluster_three_replicas_refused_before_any_change(
    server_factory: Any, tmp_path: Path
) -> None:
    _, west = joined_domains(server_factory)
    assert _clustered_by_info(west)  # the INFO says a cluster: what the tool took
    run(_existing(west.url, 5))
    specs = write(tmp_path, SPECS)

    planned = reconcile("plan", str(specs), "--server", west.url, cwd=tmp_path)
    assert planned.returncode == 1, planned.stdout + planned.stderr
    assert f"{specs.name}:8" in planned.stderr and "num_replicas" in planned.stderr
    applied = reconcile("apply", str(specs), "--server", west.url, "--yes", cwd=tmp_path)
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert "AAA_FIRST" not in applied.stdout  # nothing applied before the refusal
    streams = run(_streams(west.url))
    assert "AAA_FIRST" not in streams and "ORDERS" not in streams
    assert streams["EXISTING"] == 5


def test_a_leaf_server_s_own_storage_limits_are_checked(
    server_factory: Any, tmp_path: Path
) -> None:
    _, west = joined_domains(server_factory)
    run(_existing(west.url, 1))
    specs = write(tmp_path, SPECS.replace("num_replicas: 3", "max_bytes: 1GiB"))
    planned = reconcile(
        "plan", str(specs), "--server", west.url, "--monitor", west.monitor_url, cwd=tmp_path
    )
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert IN_A_CLUSTER not in planned.stdout
    assert "the server's own limit is unknown" not in planned.stdout


def _clustered_by_info(server: NatsServer) -> bool:
    async def info() -> dict[str, Any]:
        nc = await nats.connect(server.url)
        try:
            return dict(nc._server_info)
        finally:
            await nc.close()

    found = run(info())
    return bool(found.get("cluster")) and not found.get("connect_urls")
