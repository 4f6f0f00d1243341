"""Configs a real server returns for the examples are valid specs (schemas accept the wire).

For each example set the resources are created on a real nats-server from the validated
specs (buckets as their KV_/OBJ_ streams), read back with STREAM.INFO / CONSUMER.INFO, and
the configs the server sends are validated: as documents (kind added), through the loader
as `nats ... info -j` files, and against the document schema. Runs on the installed server
and on the cached older releases of the version matrix.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from servers import SERVER_MATRIX, NatsServer

from reconciler.locations import Location
from reconciler.specs.document import Document
from reconciler.specs.schema import validator
from reconciler.specs.spec import Spec
from reconciler.specs.validate import load_specs, validate_documents

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [ROOT / "examples" / name for name in ("shop", "workqueue", "buckets")]
OLDER = list(SERVER_MATRIX)


def stream_config(spec: Spec) -> dict[str, Any]:
    """The stream a spec needs on the server (buckets as the Go client creates them)."""
    config = dict(spec.config)
    if spec.kind == "Stream":
        return config
    bucket: dict[str, Any] = {
        "name": spec.stream_name,
        "storage": config.get("storage", "file"),
        "num_replicas": config.get("replicas", 1),
        "max_bytes": config.get("max_bytes", -1),
        "max_age": config.get("ttl", 0),
        "discard": "new",
        "allow_rollup_hdrs": True,
        "allow_direct": True,
        "compression": "s2" if config.get("compression") else "none",
    }
    if spec.kind == "KeyValue":
        bucket |= {
            "subjects": [f"$KV.{spec.name}.>"],
            "max_msgs_per_subject": config.get("history", 1),
            "max_msg_size": config.get("max_value_size", -1),
            "deny_delete": True,
        }
    else:
        bucket["subjects"] = [f"$O.{spec.name}.C.>", f"$O.{spec.name}.M.>"]
    return bucket


async def api(nc: nats.NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = json.dumps(body).encode() if body is not None else b""
    reply: dict[str, Any] = json.loads((await nc.request(subject, payload, timeout=10)).data)
    assert "error" not in reply, f"{subject}: {reply['error']}"
    return reply


async def round_trip(url: str, specs: list[Spec]) -> list[dict[str, Any]]:
    """Create every spec, then return the INFO responses of what the server holds."""
    nc = await nats.connect(url)
    try:
        infos = []
        for spec in [s for s in specs if s.kind != "Consumer"]:
            config = stream_config(spec)
            await api(nc, f"$JS.API.STREAM.CREATE.{config['name']}", config)
            infos.append(await api(nc, f"$JS.API.STREAM.INFO.{config['name']}"))
        for spec in [s for s in specs if s.kind == "Consumer"]:
            subject = f"$JS.API.CONSUMER.CREATE.{spec.stream}.{spec.name}"
            await api(nc, subject, {"stream_name": spec.stream, "config": dict(spec.config)})
            infos.append(await api(nc, f"$JS.API.CONSUMER.INFO.{spec.stream}.{spec.name}"))
        for info in infos:
            if "stream_name" not in info:
                await api(nc, f"$JS.API.STREAM.DELETE.{info['config']['name']}")
        return infos
    finally:
        await nc.close()


def as_document(info: dict[str, Any], index: int) -> Document:
    head: dict[str, Any] = {"kind": "Stream"}
    if "stream_name" in info:
        head = {"kind": "Consumer", "stream": info["stream_name"]}
    return Document(body={**head, **info["config"]}, source=Location("wire", index + 1))


def check_wire_configs(infos: list[dict[str, Any]], tmp_path: Path) -> None:
    folder = tmp_path / "wire"
    folder.mkdir()
    documents = [as_document(info, i) for i, info in enumerate(infos)]
    for document in documents:
        errors = [e.message for e in validator("document").iter_errors(document.body)]
        assert errors == [], f"{document.body}: {errors}"
    specs = validate_documents(documents)
    assert len(specs) == len(infos)
    for index, info in enumerate(infos):
        (folder / f"{index:02}.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    assert len(load_specs([folder])) == len(infos)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_installed_server_returns_valid_specs(
    example: Path, clean_server: NatsServer, run: Callable[..., Any], tmp_path: Path
) -> None:
    infos = run(round_trip(clean_server.url, load_specs([example])))
    check_wire_configs(infos, tmp_path)


@pytest.mark.parametrize("version", OLDER)
def test_older_servers_return_valid_specs(
    version: str, server_factory: Callable[..., NatsServer], run: Callable[..., Any], tmp_path: Path
) -> None:
    server = server_factory(version=version)
    specs = load_specs(EXAMPLES)
    infos = run(round_trip(server.url, specs))
    check_wire_configs(infos, tmp_path)


KITCHEN_SINK = """
kind: Stream
name: ORIGIN
subjects: [origin.>]
max_msgs_per_subject: 10
subject_transform: {src: "origin.>", dest: "moved.>"}
---
kind: Stream
name: EVERYTHING
description: uses most stream fields a 2.12 server knows
subjects: [all.*.>]
retention: interest
max_consumers: 10
max_msgs: 1000
max_bytes: 64MiB
max_age: 1d
max_msg_size: 1KiB
discard: new
discard_new_per_subject: true
max_msgs_per_subject: 5
storage: memory
num_replicas: 1
duplicate_window: 1m
compression: none
allow_direct: true
allow_rollup_hdrs: true
deny_delete: true
republish: {src: "all.>", dest: "copy.>", headers_only: true}
consumer_limits: {inactive_threshold: 1h, max_ack_pending: 500}
allow_msg_ttl: true
subject_delete_marker_ttl: 5m
sources:
  - name: ORIGIN
    subject_transforms: [{src: "moved.>", dest: "all.origin.>"}]
metadata: {owner: team-a}
---
kind: Consumer
stream: EVERYTHING
name: PULLER
filter_subjects: [all.a.>, all.b.>]
deliver_policy: by_start_sequence
opt_start_seq: 3
ack_policy: explicit
backoff: [1s, 10s]
max_deliver: 3
max_ack_pending: 100
max_waiting: 10
max_batch: 50
max_expires: 30s
max_bytes: 1MiB
inactive_threshold: 30m
headers_only: true
metadata: {purpose: test}
priority_groups: [jobs]
priority_policy: pinned_client
priority_timeout: 2m
pause_until: "2099-01-01T00:00:00Z"
---
kind: Consumer
stream: EVERYTHING
name: PUSHER
deliver_subject: out.everything
deliver_group: workers
deliver_policy: by_start_time
opt_start_time: "2024-01-01T00:00:00Z"
ack_policy: all
ack_wait: 45s
replay_policy: original
rate_limit_bps: 1000000
sample_freq: 50%
max_ack_pending: 10
idle_heartbeat: 5s
flow_control: true
mem_storage: true
"""


def test_the_installed_server_returns_valid_specs_for_most_fields(
    clean_server: NatsServer, run: Callable[..., Any], tmp_path: Path
) -> None:
    spec_file = tmp_path / "sink.yaml"
    spec_file.write_text(KITCHEN_SINK, encoding="utf-8")
    infos = run(round_trip(clean_server.url, load_specs([spec_file])))
    assert infos[2]["config"]["priority_policy"] == "pinned_client"
    check_wire_configs(infos, tmp_path)
