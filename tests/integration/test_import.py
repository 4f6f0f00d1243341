"""``reconcile import --from nats-cli``: the nats CLI's own files become specs whose first
plan on a server configured from the same files changes nothing but the ownership marker.

The configs are the nats CLI's test data (github.com/nats-io/natscli, nats/testdata:
ORDERS_config.json, mem1_config.json) and the shapes the CLI writes: a bare config, a
StreamInfo (`nats stream info -j`), a consumer config with its stream.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, run

pytestmark = pytest.mark.integration

ORDERS = {  # natscli nats/testdata/ORDERS_config.json (allow_msg_ttl left out: 2.11+)
    "name": "ORDERS",
    "subjects": ["ORDERS.*"],
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 31536000000000000,
    "max_msg_size": -1,
    "storage": "file",
    "num_replicas": 1,
    "duplicate_window": 3600000000000,
}
MEM1 = {  # natscli nats/testdata/mem1_config.json
    "name": "mem1",
    "subjects": ["MEMORY.*"],
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msg_size": -1,
    "storage": "memory",
    "num_replicas": 1,
}
CONSUMER = {
    "stream_name": "ORDERS",
    "durable_name": "NEW",
    "deliver_policy": "all",
    "ack_policy": "explicit",
    "ack_wait": 30000000000,
    "max_deliver": 5,
    "filter_subject": "ORDERS.new",
    "replay_policy": "instant",
}


async def configure_as_the_nats_cli_does(url: str) -> None:
    import nats

    nc = await nats.connect(url)
    try:
        for stream in (ORDERS, MEM1):
            reply = await nc.request(
                f"$JS.API.STREAM.CREATE.{stream['name']}", json.dumps(stream).encode()
            )
            assert "error" not in json.loads(reply.data)
        config = {k: v for k, v in CONSUMER.items() if k != "stream_name"}
        body = {"stream_name": "ORDERS", "config": config}
        reply = await nc.request("$JS.API.CONSUMER.CREATE.ORDERS.NEW", json.dumps(body).encode())
        assert "error" not in json.loads(reply.data)
    finally:
        await nc.close()


def test_nats_cli_files_import_and_plan_nothing_but_the_marker(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    source = tmp_path / "natscli"
    source.mkdir()
    (source / "ORDERS_config.json").write_text(json.dumps(ORDERS))
    info: dict[str, Any] = {"config": MEM1, "created": "2026-01-01T00:00:00Z", "state": {}}
    (source / "mem1_info.json").write_text(json.dumps(info))
    (source / "NEW_consumer.json").write_text(json.dumps(CONSUMER))
    run(configure_as_the_nats_cli_does(clean_server.url))

    imported = reconcile(
        "import", "--from", "nats-cli", str(source), "--out", "specs", cwd=tmp_path
    )
    assert imported.returncode == 0, imported.stderr
    orders = (tmp_path / "specs" / "stream-ORDERS.yaml").read_text()
    assert "max_age: 365d" in orders and "duplicate_window: 1h" in orders  # human units
    assert "kind: Consumer" in orders and "max_deliver: 5" in orders
    assert "ack_wait" not in orders  # 30s is the default: only what changes something
    assert "managed-by" not in orders  # nothing invented
    assert (tmp_path / "specs" / "stream-mem1.yaml").exists()

    plan = reconcile(
        "plan", "specs", "--server", clean_server.url, "--format", "json", cwd=tmp_path
    )
    assert plan.returncode == 0, plan.stderr
    changes = json.loads(plan.stdout)["changes"]
    assert len(changes) == 3
    for change in changes:  # adoption only: the marker, nothing else
        assert change["action"] == "update", change
        assert {f["path"].split(".")[0] for f in change["fields"]} == {"metadata"}, change

    apply = reconcile("apply", "specs", "--server", clean_server.url, "-y", cwd=tmp_path)
    assert apply.returncode == 0, apply.stderr
    again = reconcile(
        "plan", "specs", "--server", clean_server.url, "--detailed-exitcode", cwd=tmp_path
    )
    assert again.returncode == 0, again.stdout


def test_an_invalid_file_is_reported_at_its_line_and_nothing_is_written(tmp_path: Path) -> None:
    source = tmp_path / "natscli"
    source.mkdir()
    (source / "bad.json").write_text('{\n  "name": "X",\n  "retention": "sometimes"\n}\n')
    done = reconcile("import", "--from", "nats-cli", str(source), "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1
    assert "bad.json:3: retention:" in done.stderr
    assert not (tmp_path / "specs").exists()
