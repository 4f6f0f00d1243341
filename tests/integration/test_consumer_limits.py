"""A consumer above its stream's ``consumer_limits`` is refused before the server is
touched (it used to create the stream, then the server refused the consumer: err 10121
for ``max_ack_pending``, 10153 for ``inactive_threshold``; measured on 2.10-2.15)."""

from __future__ import annotations

import asyncio
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


def _lowered(tmp_path: Path, server: NatsServer, old: str, new: str) -> Any:
    """Specs applied with consumer limits ``old``, then planned and applied with ``new``
    (a stream ``OTHER`` changes too, so a half-apply would show)."""
    other = "---\nkind: Stream\nname: OTHER\nsubjects: [other.>]\n"
    specs = write(
        tmp_path, STREAM.replace("  max_ack_pending: 100\n  inactive_threshold: 1m\n", old) + other
    )
    assert _cli("apply", str(specs), server=server, cwd=tmp_path).returncode == 0
    assert run(_publish_and_count(server, 10)) == 10
    changed = STREAM.replace("  max_ack_pending: 100\n  inactive_threshold: 1m\n", new)
    specs.write_text(
        changed + other.replace("[other.>]", "[other.>]\nmax_age: 1d"), encoding="utf-8"
    )
    return _cli("apply", str(specs), server=server, cwd=tmp_path)


def test_lowering_consumer_limits_below_a_live_consumer_is_refused_before_the_server(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    old, new = "  max_ack_pending: 100\n", "  max_ack_pending: 50\n"
    applied = _lowered(tmp_path, clean_server, old, new)
    assert applied.returncode == 1, applied.stdout
    assert (
        "specs.yaml:5: consumer_limits.max_ack_pending: consumer 'C' of stream S holds "
        "max_ack_pending 100, above the new consumer_limits.max_ack_pending 50" in applied.stderr
    )
    assert "Traceback" not in applied.stderr

    async def other_max_age() -> int:
        async with open_client(options(clean_server)) as client:
            return int((await client.stream_info("OTHER"))["config"]["max_age"])

    assert run(other_max_age()) == 0  # nothing half-applied
    assert run(_consumer(clean_server, "S", "C"))["max_ack_pending"] == 100
    assert run(_publish_and_count(clean_server, 5)) == 15


def test_a_new_inactive_threshold_limit_over_a_durable_without_one_is_refused_before_2_14(
    server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(version="2.12.8")
    applied = _lowered(tmp_path, server, "  max_ack_pending: 100\n", "  inactive_threshold: 1m\n")
    assert applied.returncode == 1, applied.stdout
    assert "consumer 'C' of stream S holds no inactive_threshold" in applied.stderr
    live = run(_consumer(server, "S", "C"))
    assert "inactive_threshold" not in live or live["inactive_threshold"] == 0
    assert run(_publish_and_count(server, 5)) == 15


async def _copies_of_limited_streams(server: NatsServer, suffix: str) -> dict[str, Any]:
    """Two streams with 3 messages each, one limiting its consumers' max_ack_pending, one
    their inactive_threshold, each mirrored and sourced: what each copy holds, and the
    error its info reports, once the limited one's copies have said theirs."""
    limited, idle = f"LIM{suffix}", f"IDLE{suffix}"
    async with open_client(options(server)) as client:
        await client.create_stream(
            {"name": limited, "subjects": [f"{limited}.>"],
             "consumer_limits": {"max_ack_pending": 54}}
        )  # fmt: skip
        await client.create_stream(
            {"name": idle, "subjects": [f"{idle}.>"],
             "consumer_limits": {"inactive_threshold": 3_600_000_000_000}}
        )  # fmt: skip
        for stream in (limited, idle):
            for i in range(3):
                await client.publish(f"{stream}.x", f"m{i}".encode())
            await client.create_stream({"name": f"M{stream}", "mirror": {"name": stream}})
            await client.create_stream({"name": f"S{stream}", "sources": [{"name": stream}]})
        copies = {}
        for _ in range(200):
            copies = {}
            for stream in (limited, idle):
                for copy, part in ((f"M{stream}", "mirror"), (f"S{stream}", "sources")):
                    info = await client.stream_info(copy)
                    read = info.get(part) or {}
                    error = (read[0] if isinstance(read, list) else read).get("error") or {}
                    copies[copy] = (int(info["state"]["messages"]), error.get("err_code"))
            if all(copies[c][1] for c in (f"M{limited}", f"S{limited}")) and all(
                copies[c][0] == 3 for c in (f"M{idle}", f"S{idle}")
            ):
                break
            await asyncio.sleep(0.05)
        return copies


def test_a_stream_limiting_max_ack_pending_cannot_be_mirrored_or_sourced(
    versioned_server: NatsServer,
) -> None:
    """What `specs.checks.unreadable_origins` rests on (docs/jetstream-notes.md), on every
    release of the matrix: the server refuses the consumer a mirror or a source reads
    with (err 10082), and the copy receives nothing; an inactive_threshold limit is fine."""
    suffix = (versioned_server.version or "N").replace(".", "_")
    copies = run(_copies_of_limited_streams(versioned_server, suffix))
    assert copies[f"MLIM{suffix}"] == (0, 10082) and copies[f"SLIM{suffix}"] == (0, 10082)
    assert copies[f"MIDLE{suffix}"] == (3, None) and copies[f"SIDLE{suffix}"] == (3, None)


def test_a_mirror_of_a_stream_limiting_max_ack_pending_is_refused_before_the_server(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = write(tmp_path, STREAM + "---\nkind: Stream\nname: M\nmirror:\n  name: S\n")
    applied = _cli("apply", str(specs), server=clean_server, cwd=tmp_path)
    assert applied.returncode == 1, applied.stdout
    assert "specs.yaml:15: mirror: stream S sets consumer_limits.max_ack_pending" in applied.stderr
    assert "Traceback" not in applied.stderr
    assert run(_streams(clean_server)) == []  # nothing applied


def test_a_mirror_of_a_live_stream_limiting_max_ack_pending_is_refused_by_the_plan(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The origin is on the server, no spec manages it (absent, or declared external):
    the plan judges its live limits, and nothing is created."""
    run(_unmanaged_stream(clean_server))  # S, consumer_limits max_ack_pending 100
    mirror = "kind: Stream\nname: M\nmirror:\n  name: S\n"
    for text, line in ((mirror, 3), ("kind: Stream\nname: S\nexternal: true\n---\n" + mirror, 7)):
        specs = write(tmp_path, text)
        applied = _cli("apply", str(specs), server=clean_server, cwd=tmp_path)
        assert applied.returncode == 1, applied.stdout
        said = f"specs.yaml:{line}: mirror: stream S sets consumer_limits.max_ack_pending (100)"
        assert said in applied.stderr, applied.stderr
        assert "Traceback" not in applied.stderr
        assert run(_streams(clean_server)) == ["S"]  # M never made
