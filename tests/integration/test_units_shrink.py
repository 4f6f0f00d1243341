"""Sizes written as the nats CLI writes them, against a real nats-server: ``1MB`` is
1 MiB (natscli's meaning); shrinking it to ``512KB`` on a stream holding more is a lossy
update, refused without ``--allow-data-loss`` (nothing deleted: the messages counted), and
with it the server keeps only what fits in 512 KiB."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats
from cli_runner import reconcile
from servers import NatsServer, run

SPEC = "kind: Stream\nname: SIZED\nsubjects: [sized.>]\nmax_bytes: {size}\n"


async def _publish(url: str, count: int) -> dict[str, Any]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for _ in range(count):
            await js.publish("sized.x", b"x" * 1_000)
        info = await nc.request("$JS.API.STREAM.INFO.SIZED", b"", timeout=5)
        return dict(json.loads(info.data))
    finally:
        await nc.close()


def test_a_smaller_natscli_size_is_a_lossy_update_refused_without_the_flag(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    spec = tmp_path / "specs" / "sized.yaml"
    spec.parent.mkdir()
    spec.write_text(SPEC.format(size="1MB"), encoding="utf-8")
    server = ("--server", clean_server.url)
    assert reconcile("apply", str(spec.parent), *server, "-y", cwd=tmp_path).returncode == 0
    info = run(_publish(clean_server.url, 900))
    assert info["config"]["max_bytes"] == 1_048_576  # 1MB = 1MiB, as the nats CLI reads it
    assert info["state"]["messages"] == 900

    spec.write_text(SPEC.format(size="512KB"), encoding="utf-8")
    planned = reconcile("plan", str(spec.parent), *server, "--format", "json", cwd=tmp_path)
    [change] = json.loads(planned.stdout)["changes"]
    assert change["action"] == "update" and change["destructive"] is True
    assert change["fields"] == [{"path": "max_bytes", "before": 1_048_576, "after": 524_288}]
    refused = reconcile("apply", str(spec.parent), *server, "-y", cwd=tmp_path)
    assert refused.returncode == 1 and "--allow-data-loss" in refused.stderr
    assert run(_publish(clean_server.url, 0))["state"]["messages"] == 900  # nothing deleted

    allowed = ("-y", "--allow-data-loss")
    assert reconcile("apply", str(spec.parent), *server, *allowed, cwd=tmp_path).returncode == 0
    state = run(_publish(clean_server.url, 0))["state"]
    assert state["bytes"] <= 524_288 and 0 < state["messages"] < 900
