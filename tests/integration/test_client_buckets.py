"""Buckets made by the client libraries (nats-py's ``create_key_value`` /
``create_object_store``) export as KeyValue / ObjectStore documents that keep what the
client set differently from this tool's defaults, and round-trip: the plan of the export
only adopts them, the apply changes no setting, every message and key is still there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import nats
import pytest
from servers import SERVER_MATRIX, NatsServer, run
from test_roundtrip_attacks import _streams

from reconciler.cli.export_cmd import _dump
from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions
from reconciler.planning.export import export_state

ADOPT = ("adopt: add the managed-by marker",)


async def _made_by_nats_py(url: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        plain = await js.create_key_value(bucket="py")
        for n in range(3):
            await plain.put(f"k{n}", f"v{n}".encode())
        sized = await js.create_key_value(
            bucket="py_sized", history=5, ttl=60, max_bytes=1 << 20, description="d", direct=True
        )
        for n in range(4):
            await sized.put("same", f"v{n}".encode())
        store = await js.create_object_store("py_objects", ttl=3600, description="o")
        await store.put("blob", b"x" * 300_000)  # three chunks and a meta message
    finally:
        await nc.close()


async def _contents(url: str) -> dict[str, Any]:
    """Every stream's config and message count, and the py bucket's values."""
    nc = await nats.connect(url)
    try:
        names = json.loads((await nc.request("$JS.API.STREAM.NAMES", b"{}")).data)["streams"]
        found: dict[str, Any] = {}
        for name in sorted(names):
            info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"")).data)
            config = {k: v for k, v in info["config"].items() if k != "metadata"}
            found[name] = (config, info["state"]["messages"])
        kv = await nc.jetstream().key_value("py")
        found["values"] = [(await kv.get(f"k{n}")).value for n in range(3)]
        return found
    finally:
        await nc.close()


@pytest.mark.parametrize("version", [*SERVER_MATRIX, None], ids=lambda v: v or "newest")
def test_buckets_made_by_nats_py_export_as_buckets_and_apply_changes_nothing(
    server_factory: Any, version: str | None, tmp_path: Path
) -> None:
    server: NatsServer = server_factory(version=version)
    options = ConnectionOptions(servers=server.url)
    run(_made_by_nats_py(server.url))
    before = run(_contents(server.url))
    files = {f.name: f.documents for f in export_state(run(engine.fetch_live(options)))}
    assert sorted(files) == ["kv-py.yaml", "kv-py_sized.yaml", "objectstore-py_objects.yaml"]
    plain = files["kv-py.yaml"][0]
    assert plain["kind"] == "KeyValue" and plain["allow_direct"] is False
    assert plain.get("allow_msg_ttl") is (None if version == "2.10.26" else True)
    assert "allow_direct" not in files["kv-py_sized.yaml"][0]
    assert files["objectstore-py_objects.yaml"][0]["kind"] == "ObjectStore"
    folder = tmp_path / "export"
    folder.mkdir()
    for name, documents in files.items():
        (folder / name).write_text(_dump(documents))
    plan = run(engine.plan([folder], options))
    assert [(c.action, c.reasons) for c in plan.changes] == [("update", ADOPT)] * 3
    assert all(f.path.startswith("metadata.") for c in plan.changes for f in c.fields)
    run(engine.apply([folder], options, lock_timeout=None))
    assert not run(engine.plan([folder], options)).has_changes
    assert run(_contents(server.url)) == before  # every setting, message and value kept


CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus" / "client_buckets.json"


def test_the_corpus_client_buckets_export_as_buckets(clean_server: NatsServer) -> None:
    """The configs nats-py, nats.go and the nats CLI make (tests/data/corpus) are
    buckets once applied: each exports as a KeyValue or ObjectStore document."""
    options = ConnectionOptions(servers=clean_server.url)
    run(engine.apply([CORPUS], options, lock_timeout=None))
    kinds = {f.name: f.documents[0]["kind"] for f in export_state(run(engine.fetch_live(options)))}
    assert kinds == {
        "kv-py.yaml": "KeyValue",
        "kv-py_sized.yaml": "KeyValue",
        "objectstore-py_objects.yaml": "ObjectStore",
        "kv-go_config.yaml": "KeyValue",
        "kv-cli_sessions.yaml": "KeyValue",
        "kv-go_legacy.yaml": "KeyValue",
        "objectstore-go_assets.yaml": "ObjectStore",
        "kv-js_config.yaml": "KeyValue",
        "objectstore-js_assets.yaml": "ObjectStore",
    }


#: nats.js 3.x, from npm (``.ci/run`` installs it into .ci/node when npm is there).
NODE_MODULES = Path(__file__).resolve().parents[2] / ".ci" / "node" / "node_modules"
MAKE_WITH_NATS_JS = """
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
const nc = await connect({ servers: process.argv[2] });
const kv = await new Kvm(nc).create("js", { history: 5 });
for (let n = 0; n < 3; n++) await kv.put("k" + n, "v" + n);
const os = await new Objm(nc).create("js_objects");
await os.putBlob({ name: "blob" }, new Uint8Array(300000));
await nc.close();
"""


def test_buckets_made_by_nats_js_export_as_buckets_and_apply_changes_nothing(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The official JavaScript client sets deny_delete false on a KeyValue bucket's stream
    (the Go client true): still a bucket, exported with that field, planned as adoption
    only, every setting and message kept by the apply."""
    node = shutil.which("node")
    if node is None or not (NODE_MODULES / "@nats-io" / "kv").is_dir():
        pytest.skip("nats.js not installed (.ci/run installs it with npm into .ci/node)")
    script = tmp_path / "make.mjs"
    script.write_text(MAKE_WITH_NATS_JS)
    env = {**os.environ, "NODE_PATH": str(NODE_MODULES)}
    (tmp_path / "node_modules").symlink_to(NODE_MODULES)  # ESM imports resolve from here
    done = subprocess.run(
        [node, str(script), clean_server.url], capture_output=True, text=True, env=env,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    options = ConnectionOptions(servers=clean_server.url)
    before = run(_stream_contents(clean_server.url))
    files = {f.name: f.documents for f in export_state(run(engine.fetch_live(options)))}
    assert sorted(files) == ["kv-js.yaml", "objectstore-js_objects.yaml"]
    assert files["kv-js.yaml"][0]["deny_delete"] is False
    folder = tmp_path / "export"
    folder.mkdir()
    for name, documents in files.items():
        (folder / name).write_text(_dump(documents))
    plan = run(engine.plan([folder], options))
    assert [(c.action, c.reasons) for c in plan.changes] == [("update", ADOPT)] * 2
    run(engine.apply([folder], options, lock_timeout=None))
    assert not run(engine.plan([folder], options)).has_changes
    assert run(_stream_contents(clean_server.url)) == before


async def _stream_contents(url: str) -> dict[str, Any]:
    """Every stream's config (less metadata) and message count, the lock bucket aside."""
    found = await _streams(url)
    found.pop("KV_RECONCILE_LOCKS", None)
    return found
