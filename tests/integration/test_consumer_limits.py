"""A consumer above its stream's ``consumer_limits`` is refused before the server is
touched (it used to create the stream, then the server refused the consumer: err 10121
for ``max_ack_pending``, 10153 for ``inactive_threshold``; measured on 2.10-2.15)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, options, run, write

from reconciler.identity import INTERNAL_STREAMS
from reconciler.jetstream import open_client

STREAM = """\
kind: Stream
name: S
subjects: ["s.>"]
consumer_limits:
  max_ack_pending: 100
  inactive_threshold: 1m
---
kind: Consumer
stream: S
name: C
ack_policy: explicit
"""


async def _streams(server: NatsServer) -> list[str]:
    async with open_client(options(server)) as client:
        return sorted(n for n in await client.stream_names() if n not in INTERNAL_STREAMS)


async def _consumer(server: NatsServer, stream: str, name: str) -> dict[str, Any]:
    async with open_client(options(server)) as client:
        return dict((await client.consumer_info(stream, name))["config"])


async def _publish_and_count(server: NatsServer, count: int) -> int:
    async with open_client(options(server)) as client:
        for i in range(count):
            await client.publish("s.x", f"m{i}".encode())
        return int((await client.stream_info("S"))["state"]["messages"])


async def _unmanaged_stream(server: NatsServer) -> None:
    async with open_client(options(server)) as client:
        limits = {"max_ack_pending": 100, "inactive_threshold": 60_000_000_000}
        await client.create_stream({"name": "S", "subjects": ["s.>"], "consumer_limits": limits})


def _cli(*args: str, server: NatsServer, cwd: Path) -> Any:
    return reconcile(*args, "--server", server.url, "--yes", "--no-lock", cwd=cwd)


@pytest.mark.parametrize(
    ("line", "field"),
    [("max_ack_pending: 200", "max_ack_pending"), ("inactive_threshold: 2m", "inactive_threshold")],
)
def test_a_consumer_above_its_streams_consumer_limits_is_refused_before_the_server(
    clean_server: NatsServer, tmp_path: Path, line: str, field: str
) -> None:
    specs = write(tmp_path, STREAM + line + "\n")
    checked = reconcile("validate", str(specs), cwd=tmp_path)
    assert checked.returncode == 1, checked.stdout
    assert f"specs.yaml:12: {field}" in checked.stderr + checked.stdout
    applied = _cli("apply", str(specs), server=clean_server, cwd=tmp_path)
    assert applied.returncode == 1, applied.stdout
    assert "specs.yaml:12" in applied.stderr and "refuse the consumer" in applied.stderr
    assert "Traceback" not in applied.stderr
    assert run(_streams(clean_server)) == []  # nothing half-applied
    # Left out, the consumer gets the stream's limits (measured), and the plan converges.
    specs.write_text(STREAM, encoding="utf-8")
    assert _cli("apply", str(specs), server=clean_server, cwd=tmp_path).returncode == 0
    live = run(_consumer(clean_server, "S", "C"))
    assert (live["max_ack_pending"], live["inactive_threshold"]) == (100, 60_000_000_000)
    again = reconcile(
        "plan", str(specs), "--detailed-exitcode", "--server", clean_server.url, cwd=tmp_path
    )
    assert again.returncode == 0, again.stdout
    assert run(_publish_and_count(clean_server, 10)) == 10


def test_a_consumer_above_an_external_streams_live_limits_is_refused(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    run(_unmanaged_stream(clean_server))
    assert run(_publish_and_count(clean_server, 10)) == 10
    specs = write(
        tmp_path,
        """\
        kind: Stream
        name: S
        external: true
        ---
        kind: Consumer
        stream: S
        name: C
        ack_policy: explicit
        max_ack_pending: 500
        """,
    )
    applied = _cli("apply", str(specs), server=clean_server, cwd=tmp_path)
    assert applied.returncode == 1, applied.stdout
    assert "specs.yaml:9: max_ack_pending: 500 is above" in applied.stderr
    assert "Traceback" not in applied.stderr

    async def names() -> list[str]:
        async with open_client(options(clean_server)) as client:
            return list(await client.consumer_names("S"))

    assert run(names()) == []
    assert run(_publish_and_count(clean_server, 5)) == 15
