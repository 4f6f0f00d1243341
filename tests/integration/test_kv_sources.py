"""KeyValue buckets that mirror or source other buckets (also across domains): the streams
the nats clients would create, keys copied with their subjects moved into the bucket,
an empty re-plan, and a round trip through export."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nats
import pytest
from servers import NatsServer, options, run

from reconciler.execution import run as engine
from reconciler.jetstream import open_client

pytestmark = pytest.mark.integration

SPECS = """
kind: KeyValue
name: origin
history: 3
---
kind: KeyValue
name: other
---
kind: KeyValue
name: replica
history: 3
mirror: {name: origin}
---
kind: KeyValue
name: merged
sources:
  - name: origin
  - name: other
---
kind: KeyValue
name: remote
sources:
  - name: origin
    domain: hub
"""


async def stream(server: NatsServer, name: str) -> dict[str, Any]:
    async with open_client(options(server)) as client:
        return await client.stream_info(name)


def test_mirrors_and_sources_get_the_clients_streams_and_copy_keys(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    spec = tmp_path / "kv.yaml"
    spec.write_text(textwrap.dedent(SPECS))
    assert run(engine.apply([spec], options(clean_server))).ok

    replica = run(stream(clean_server, "KV_replica"))["config"]
    assert replica["mirror"]["name"] == "KV_origin" and replica["mirror_direct"] is True
    assert not replica.get("subjects")
    merged = run(stream(clean_server, "KV_merged"))["config"]
    assert merged["subjects"] == ["$KV.merged.>"]
    assert [s["subject_transforms"] for s in merged["sources"]] == [
        [{"src": "$KV.origin.>", "dest": "$KV.merged.>"}],
        [{"src": "$KV.other.>", "dest": "$KV.merged.>"}],
    ]
    remote = run(stream(clean_server, "KV_remote"))["config"]
    assert remote["sources"][0]["external"]["api"] == "$JS.hub.API"

    async def put() -> None:
        nc = await nats.connect(clean_server.url)
        kv = await nc.jetstream().key_value("origin")
        await kv.put("colour", b"blue")
        other = await nc.jetstream().key_value("other")
        await other.put("size", b"L")
        await nc.close()

    run(put())

    async def copied() -> tuple[int, int, list[str]]:
        for _ in range(100):
            replica_state = (await stream(clean_server, "KV_replica"))["state"]
            merged_info = await stream(clean_server, "KV_merged")
            if replica_state["messages"] == 1 and merged_info["state"]["messages"] == 2:
                break
            await asyncio.sleep(0.05)
        async with open_client(options(clean_server)) as client:
            subjects = []
            for seq in (1, 2):
                message = await client.stored_message("KV_merged", {"seq": seq})
                subjects.append(message["subject"] if message else "")
        return replica_state["messages"], merged_info["state"]["messages"], sorted(subjects)

    assert run(copied()) == (1, 2, ["$KV.merged.colour", "$KV.merged.size"])
    assert not run(engine.plan([spec], options(clean_server))).has_changes

    exported = subprocess.run(
        [
            sys.executable,
            "-m",
            "reconciler",
            "export",
            "--server",
            clean_server.url,
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert exported.returncode == 0, exported.stderr
    text = (tmp_path / "out" / "kv-merged.yaml").read_text()
    assert "subject_transforms" not in text  # what the client adds is not written back
    assert "domain: hub" in (tmp_path / "out" / "kv-remote.yaml").read_text()
    assert "mirror:" in (tmp_path / "out" / "kv-replica.yaml").read_text()
    replanned = run(engine.plan([tmp_path / "out"], options(clean_server), prune=True))
    assert not replanned.has_changes, [s.label for s in replanned.steps]
    assert json.dumps(replanned.to_json()["orphans"]) == "[]"
