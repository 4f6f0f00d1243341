"""The embedded server: started when nothing is configured, state kept, shared, stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from servers import run

from reconciler.jetstream import ConnectionOptions, EmbeddedServer, open_client
from reconciler.jetstream.embedded import _pid_alive


def test_embedded_server_keeps_state_across_two_runs(tmp_path: Path) -> None:
    store = tmp_path / ".reconcile"
    notices: list[str] = []

    async def first() -> None:
        async with open_client(ConnectionOptions(store=store), on_notice=notices.append) as c:
            await c.create_stream({"name": "KEPT", "subjects": ["kept.>"]})
            await c.publish("kept.one", b"1")
            assert (await c.server_info()).embedded

    async def second() -> tuple[list[str], int]:
        async with open_client(ConnectionOptions(store=store), on_notice=notices.append) as c:
            info = await c.stream_info("KEPT")
            return await c.stream_names(), int(info["state"]["messages"])

    run(first())
    assert not (store / "embedded.json").exists()  # stopped at exit
    assert run(second()) == (["KEPT"], 1)
    assert len(notices) == 2
    assert notices[0].startswith("using embedded nats-server ")
    assert "at nats://127.0.0.1:" in notices[0] and f"(state in {store}/)" in notices[0]


def test_stopping_the_server_says_which_memory_streams_went_with_it(tmp_path: Path) -> None:
    """A memory stream lives only as long as its server, and each command stops the
    embedded one when it is the last user: the run that stops it names the memory streams
    that went with it and how to keep them (found by newuser17: a restore into the
    embedded server said 'restored and verified', and the next plan wanted to create the
    stream). A server another run still uses is not stopped: nothing is said."""
    store = tmp_path / ".reconcile"
    notices: list[str] = []

    async def create(name: str, storage: str) -> None:
        async with open_client(ConnectionOptions(store=store), on_notice=notices.append) as c:
            await c.create_stream({"name": name, "subjects": [f"{name}.>"], "storage": storage})

    async def names() -> list[str]:
        async with open_client(ConnectionOptions(store=store), on_notice=notices.append) as c:
            return await c.stream_names()

    run(create("DISK", "file"))
    assert len(notices) == 1  # a file stream stays: nothing to say
    keeper = EmbeddedServer(store)
    keeper.acquire()  # `reconcile server`, say
    try:
        run(create("CACHE", "memory"))
        assert len(notices) == 2  # the server goes on: so does CACHE
        assert sorted(run(names())) == ["CACHE", "DISK"]
    finally:
        keeper.release()
    notices.clear()
    run(create("HOT", "memory"))
    assert len(notices) == 2, notices
    assert "HOT" in notices[1] and "reconcile server" in notices[1] and "DISK" not in notices[1]
    assert run(names()) == ["DISK"]


def test_a_concurrent_run_reuses_the_running_server(tmp_path: Path) -> None:
    store = tmp_path / "shared"
    first = EmbeddedServer(store)
    second = EmbeddedServer(store)
    url = first.acquire()
    try:
        assert second.acquire() == url
        assert first.started and not second.started
        first.release()  # the second run still uses it: it keeps running
        assert second.running is not None and _pid_alive(second.running.pid)
        assert json.loads((store / "embedded.json").read_text())["pid"] == second.running.pid
    finally:
        second.release()
        first.release()
    assert second.running is not None and not _pid_alive(second.running.pid)
    assert not (store / "embedded.json").exists()


def test_a_server_left_by_a_crashed_run_is_reused_then_stopped(tmp_path: Path) -> None:
    store = tmp_path / "crash"
    script = (
        "import os, sys\n"
        "from reconciler.jetstream import EmbeddedServer\n"
        "EmbeddedServer(sys.argv[1]).acquire()\n"
        "os._exit(0)  # no release: as if killed\n"
    )
    subprocess.run([sys.executable, "-c", script, str(store)], check=True, timeout=60)
    left = json.loads((store / "embedded.json").read_text())
    assert _pid_alive(left["pid"])
    again = EmbeddedServer(store)
    try:
        assert again.acquire() == f"nats://127.0.0.1:{left['port']}"
        assert not again.started
    finally:
        again.release()
    assert not _pid_alive(left["pid"])


def test_a_dead_server_in_the_state_file_is_replaced(tmp_path: Path) -> None:
    store = tmp_path / "stale"
    store.mkdir()
    (store / "embedded.json").write_text(json.dumps({"pid": 999_999_999, "port": 1}))
    with EmbeddedServer(store) as embedded:
        assert embedded.started and embedded.running is not None
        assert embedded.running.port != 1


@pytest.mark.timeout(60)
def test_reconcile_server_runs_in_the_foreground_until_interrupted(tmp_path: Path) -> None:
    store = tmp_path / "fg"
    process = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "server", "--store", str(store), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert banner.startswith("embedded nats-server ") and "nats://127.0.0.1:" in banner
        pid = json.loads((store / "embedded.json").read_text())["pid"]
        process.send_signal(signal.SIGINT)
        # Bounded generously: once in a CI run it had not exited after 30 s (not reproduced
        # here: 0.5-0.8 s in 15 runs under load); the server's shutdown syncs its store.
        assert process.wait(timeout=90) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not _pid_alive(pid)
    assert (store / "jetstream").is_dir()


def test_sigterm_also_stops_the_foreground_server(tmp_path: Path) -> None:
    store = tmp_path / "term"
    env = {**os.environ, "RECONCILE_STORE": str(store)}
    process = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "server", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    assert "state in " + str(store) in process.stdout.readline()
    pid = json.loads((store / "embedded.json").read_text())["pid"]
    process.terminate()
    assert process.wait(timeout=90) == 0
    assert not _pid_alive(pid)
