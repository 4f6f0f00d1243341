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
from servers import CACHE, NatsServer

from reconciler.errors import Location
from reconciler.loader import Document
from reconciler.schema import validator
from reconciler.spec import Spec
from reconciler.validate import load_specs, validate_documents

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [ROOT / "examples" / name for name in ("shop", "workqueue", "buckets")]
OLDER = sorted(p.name.removeprefix("nats-server-") for p in CACHE.glob("nats-server-2.1[0-2]*"))


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
