"""Server faults mid-apply: kill -9 and restart from the store, and a frozen server.

Each test runs its own server (``server_factory``): the faults would hurt the shared one.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from harness import (
    cli_env,
    pending,
    plan_json,
    reconcile,
    run_client,
    start_reconcile,
    stream_doc,
    stream_infos,
    write_specs,
)

from reconciler.errors import ReconcileError

pytestmark = pytest.mark.integration

KEPT = "KEPT"
KEPT_MESSAGES = 200


def _specs(tmp_path: Path, count: int, **fields) -> Path:
    documents = [stream_doc(KEPT, max_msgs=10_000)]
    documents += [stream_doc(f"FAULT{i:03d}", **fields) for i in range(count)]
    return write_specs(tmp_path / "specs", documents)


def _publish(url: str, count: int) -> None:
    async def work(client) -> None:
        await asyncio.gather(
            *(client.publish(f"{KEPT.lower()}.m", str(i).encode()) for i in range(count))
        )

    run_client(url, work)


def _wait_for_streams(url: str, count: int, process) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if len(stream_infos(url)) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"apply did not create {count} streams")


def _wait_for_jetstream(server) -> None:
    server.wait_ready(jetstream=False)
    deadline = time.monotonic() + 60
    while True:
        try:
            run_client(server.url, lambda client: client.server_info())
            return
        except ReconcileError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_kill_9_of_the_server_mid_apply_then_restart_and_apply_converges(
    server_factory, tmp_path: Path, figures
) -> None:
    server = server_factory()
    specs = _specs(tmp_path, 120)
    assert reconcile("apply", "-y", str(specs), "--server", server.url).returncode == 0
    _publish(server.url, KEPT_MESSAGES)
    changed = _specs(tmp_path, 240, max_msgs=5000)  # updates 120 streams, creates 120 more
    env = cli_env(RECONCILE_LOCK_LEASE="3")
    apply = start_reconcile(
        "apply", "-y", str(changed), "--server", server.url, "--concurrency", "1", env=env
    )
    _wait_for_streams(server.url, 121 + 10, apply)

    server.kill()
    out, err = apply.communicate(timeout=60)

    assert apply.returncode == 1, (out, err)
    assert "Traceback" not in err
    assert "applied:" in err and "re-run apply to converge" in err, "never half-applies silently"
    # Same port, same store. A stream whose creation the kill cut short leaves a folder
    # without meta.inf: the server then reports unhealthy until that stream is created
    # again, so wait for JetStream to answer rather than for /healthz.
    server.start(wait=False)
    _wait_for_jetstream(server)
    again = reconcile("apply", "-y", str(changed), "--server", server.url, "--lock-timeout", "60")
    assert again.returncode == 0, again.stderr
    assert pending(plan_json([changed], server.url)) == []
    infos = stream_infos(server.url)
    assert infos[KEPT]["state"]["messages"] == KEPT_MESSAGES
    assert len([n for n in infos if n.startswith("FAULT")]) == 240
    server.wait_ready()  # healthy again once every interrupted creation is redone
    figures.add("faults_survived")
    figures.add("server_kills")
    figures.add("messages_checked", KEPT_MESSAGES)


def test_frozen_server_mid_apply_gives_a_timeout_error_not_a_hang(
    server_factory, tmp_path: Path, figures
) -> None:
    server = server_factory()
    specs = _specs(tmp_path, 150)
    env = cli_env(RECONCILE_LOCK_LEASE="3")
    apply = start_reconcile(
        "apply",
        "-y",
        str(specs),
        "--server",
        server.url,
        "--concurrency",
        "1",
        "--timeout",
        "1",
        env=env,
    )
    _wait_for_streams(server.url, 10, apply)

    server.pause()
    try:
        out, err = apply.communicate(timeout=60)  # a hang guard, not a timing assertion
    finally:
        server.resume()

    assert apply.returncode == 1, (out, err)
    assert "no answer" in err and "within 1s" in err
    assert "Traceback" not in err
    assert "re-run apply to converge" in err
    again = reconcile("apply", "-y", str(specs), "--server", server.url, "--lock-timeout", "60")
    assert again.returncode == 0, again.stderr
    assert pending(plan_json([specs], server.url)) == []
    figures.add("faults_survived")
    figures.add("server_freezes")


def test_frozen_server_before_the_first_request_fails_within_the_timeouts(
    server_factory, tmp_path: Path, figures
) -> None:
    server = server_factory()
    specs = _specs(tmp_path, 1)
    server.pause()
    try:
        done = reconcile(
            "plan",
            str(specs),
            "--server",
            server.url,
            "--timeout",
            "1",
            "--connect-timeout",
            "1",
            timeout=60,
        )
    finally:
        server.resume()

    assert done.returncode == 1
    assert "no answer within 1s" in done.stderr or "within 1s" in done.stderr
    assert "Traceback" not in done.stderr
    figures.add("faults_survived")
    figures.add("server_freezes")
