"""Attacks on saved plans, the Action and the many-environment agent (round 16), each
against a real nats-server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import nats
import pytest
from agent_harness import stop_all, wait_for_line
from cli_runner import cleaned_environ, reconcile
from servers import NatsServer, run
from test_agent_envs import _drift, _healed
from test_agent_seat_claims import (
    DECLARED,
    _agent,
    _claims,
    _described,
    _heals,
    _project,
    _refused_by,
)

from reconciler.execution.lineage import LINEAGE_KEY
from reconciler.identity import LOCK_BUCKET
from reconciler.planning.entries import MANAGED_HEADER
from reconciler.specs.spec import MANAGED_VALUE

pytestmark = pytest.mark.integration

SECRET = "TOPSECRET-hunter2-do-not-print"
BUCKET = "kind: KeyValue\nname: config\n---\n"
# a key no name rule hides: only the secret header hides its value
ENTRY = "kind: KeyValueEntry\nbucket: config\nkey: db.dsn\nvalue: {value}\n"


def _outputs(tmp_path: Path, server: NatsServer) -> str:
    """Everything a reviewer (or a pull request's author) sees of a plan: the plan in
    each format, a saved plan's file and the drift report."""
    url = ["--server", server.url]
    runs = [
        reconcile("plan", "specs.yaml", *url, cwd=tmp_path),
        reconcile("plan", "specs.yaml", *url, "--format", "json", cwd=tmp_path),
        reconcile("plan", "specs.yaml", *url, "--format", "markdown", cwd=tmp_path),
        reconcile("plan", "specs.yaml", *url, "--out", "plan.json", cwd=tmp_path),
        reconcile("drift", "specs.yaml", *url, "--format", "json", cwd=tmp_path),
    ]
    assert runs[0].returncode == 0, runs[0].stderr
    shown = "".join(done.stdout + done.stderr for done in runs)
    return shown + (tmp_path / "plan.json").read_text()


def test_a_change_dropping_secret_true_never_shows_the_secret_it_replaces(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A pull request that drops ``secret: true`` and sets another value got the stored
    secret printed as the update's old value: in the plan (its comment), the saved plan
    file (an artifact) and the drift report."""
    (tmp_path / ".git").mkdir()
    spec = tmp_path / "specs.yaml"
    spec.write_text(BUCKET + ENTRY.format(value=SECRET) + "secret: true\n")
    done = reconcile("apply", "specs.yaml", "--server", clean_server.url, "-y", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    spec.write_text(BUCKET + ENTRY.format(value="x"))
    shown = _outputs(tmp_path, clean_server)
    assert "(secret)" in shown
    assert SECRET not in shown


async def _legacy_secret(server: NatsServer) -> None:
    """The secret as a release before the secret header wrote it: the marker only."""
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        await js.create_key_value(bucket="config")
        headers = {MANAGED_HEADER: MANAGED_VALUE}
        await js.publish("$KV.config.db.dsn", SECRET.encode(), headers=headers)
    finally:
        await nc.close()


def test_a_secret_written_before_its_header_is_marked_then_never_shown(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    run(_legacy_secret(clean_server))  # the bucket too, not declared: only the entry planned
    (tmp_path / ".git").mkdir()
    spec = tmp_path / "specs.yaml"
    spec.write_text(ENTRY.format(value=SECRET) + "secret: true\n")
    url = ["--server", clean_server.url]
    plan = reconcile("plan", "specs.yaml", *url, "--format", "json", cwd=tmp_path)
    (change,) = json.loads(plan.stdout)["changes"]
    assert (change["action"], change["name"], change["fields"]) == ("update", "db.dsn", [])
    assert reconcile("apply", "specs.yaml", *url, "-y", cwd=tmp_path).returncode == 0
    again = reconcile("plan", "specs.yaml", *url, "--format", "json", cwd=tmp_path)
    assert json.loads(again.stdout)["changes"] == []
    spec.write_text(ENTRY.format(value="x"))
    assert SECRET not in _outputs(tmp_path, clean_server)


async def _marked_by_another_tool(server: NatsServer) -> None:
    """The secret written again by another tool, its secret header spelled its own way
    (a library writing header names in lower case, a value in upper case)."""
    nc = await nats.connect(server.url)
    try:
        headers = {MANAGED_HEADER: MANAGED_VALUE, "jetstream-gitops-secret": "TRUE"}
        await nc.jetstream().publish("$KV.config.db.dsn", SECRET.encode(), headers=headers)
    finally:
        await nc.close()


def test_a_secret_header_in_another_case_or_value_still_hides_the_value(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Only ``Jetstream-Gitops-Secret: true`` exactly hid a live value: the same header
    written by another tool as ``jetstream-gitops-secret: TRUE`` let a change dropping
    ``secret: true`` print the stored secret as the update's old value."""
    (tmp_path / ".git").mkdir()
    spec = tmp_path / "specs.yaml"
    spec.write_text(BUCKET + ENTRY.format(value=SECRET) + "secret: true\n")
    done = reconcile("apply", "specs.yaml", "--server", clean_server.url, "-y", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run(_marked_by_another_tool(clean_server))
    spec.write_text(BUCKET + ENTRY.format(value="x"))
    shown = _outputs(tmp_path, clean_server)
    assert "(secret)" in shown
    assert SECRET not in shown


async def _delete_lineage(url: str) -> None:
    """``nats kv del RECONCILE_LOCKS lineage``: how docs/saved-plans.md says every plan
    saved before is made stale (the next apply writes a new lineage)."""
    nc = await nats.connect(url)
    try:
        kv = await nc.jetstream().key_value(LOCK_BUCKET)
        await kv.delete(LINEAGE_KEY)
    finally:
        await nc.close()


def test_a_new_lineage_never_lets_a_second_shard_into_a_claimed_seat(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """Shard 0 heals ``zero`` and claims the seat; the account's lineage is deleted (to
    make the saved plans stale, as docs/saved-plans.md says) and shard 1 then starts:
    its environment ``one`` (the same server named ``localhost``) writes a new lineage
    when it seats itself. The claim was keyed by the lineage, so ``one`` found no claim
    under its new key and healed its spec while ``zero`` healed its own: each undoing
    the other's heals. The seat is the bucket's account: ``one`` is refused."""
    url = clean_server.url
    zero, one = _project(tmp_path, url)
    first, second = tmp_path / "shard0.log", tmp_path / "shard1.log"
    agents = [_agent(["--all-envs", "--shard", "0/2"], cwd=tmp_path, log=first)]
    try:
        wait_for_line(first, _healed(zero), f"shard 0 creates ORDERS in {zero}")
        run(_delete_lineage(url))
        agents.append(_agent(["--all-envs", "--shard", "1/2"], cwd=tmp_path, log=second))
        wait_for_line(second, _refused_by(zero), f"{one} refused, naming {zero}")
        run(_drift(url, description="changed by hand"))
        wait_for_line(first, lambda line: _heals(first, zero) > 1, f"{zero} heals the change")
        assert run(_described(url))[0] == DECLARED
        assert _heals(second, one) == 0
        assert [c["env"] for c in run(_claims(url))] == [zero]
    finally:
        stop_all(agents)


class _Flood:
    """A client holding up to ``count`` connections to the agent's HTTP port open,
    sending nothing; one the agent closes is opened again (a thread, until stopped)."""

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        held: list[socket.socket] = []
        while not self.done.is_set():
            for sock in list(held):
                try:
                    if sock.recv(1) == b"":  # closed by the agent
                        held.remove(sock)
                        sock.close()
                except BlockingIOError:
                    continue
                except OSError:
                    held.remove(sock)
                    sock.close()
            while len(held) < self.count and not self.done.is_set():
                sock = socket.socket()
                sock.settimeout(0.2)
                try:
                    sock.connect(("127.0.0.1", self.port))
                except OSError:
                    sock.close()
                    break
                sock.setblocking(False)  # recv above: at once, never waiting
                held.append(sock)
            time.sleep(0.05)
        for sock in held:
            sock.close()

    def __enter__(self) -> _Flood:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(10)


def _json_lines(log: Path) -> list[dict[str, Any]]:
    """The log's JSON lines (lines that are not JSON left out: the test counts them)."""
    return [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]


def _wait(log: Path, check: Any, what: str, patience: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        found = [line for line in _json_lines(log) if check(line)]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting: {what}\n{log.read_text()[-3000:]}")


#: ``reconcile`` with at most 512 file descriptors (a systemd unit's soft limit is 1,024).
FEW_DESCRIPTORS = (
    "import resource, runpy, sys; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512)); "
    "sys.argv[0] = 'reconcile'; runpy.run_module('reconciler', run_name='__main__')"
)


def _probed(port: int) -> int | None:
    """/healthz as a probe asks it (tried a few times: the flood's connections are
    opened meanwhile, and one may close it before its request is read)."""
    for _ in range(5):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
                return int(reply.status)
        except OSError:
            time.sleep(0.2)
    return None


def test_connections_held_open_to_the_http_port_never_fail_a_cycle(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A client opening connections to /metrics' port and sending nothing (each held
    5 s) took every file descriptor the process may open: the cycles failed
    (``f.yaml:1: cannot read: Too many open files``), an edited spec was applied only
    once the flood stopped, and asyncio wrote a traceback per refused accept into the
    JSON log. At most 64 are open at once, a new one closing the oldest: /healthz is
    still answered."""
    (tmp_path / ".git").mkdir()
    spec = tmp_path / "f.yaml"
    declared = "kind: Stream\nname: FLOOD\nsubjects: [flood]\nstorage: memory\ndescription: {}\n"
    spec.write_text(declared.format("one"))
    log = tmp_path / "agent.log"
    args = ["watch", "f.yaml", "--server", clean_server.url, "--mode", "heal"]
    args += ["--interval", "1s", "--listen", "127.0.0.1:0", "--log-format", "json"]
    agent = subprocess.Popen(
        [sys.executable, "-c", FEW_DESCRIPTORS, *args],
        cwd=tmp_path,
        env=cleaned_environ(None),
        stderr=log.open("w"),
    )
    try:
        listening = _wait(log, lambda line: line["event"] == "listening", "listening")
        port = int(str(listening["message"]).rsplit(":", 1)[1].split("/")[0])
        _wait(log, lambda line: line.get("state") == "healed", "FLOOD created")
        with _Flood(port, 1000):
            time.sleep(2)  # the flood at its height
            assert _probed(port) == 200  # the newest connection is served
            spec.write_text(declared.format("two"))
            _wait(
                log,
                lambda line: line.get("state") == "healed" and line.get("fields"),
                "the edited description applied while the flood goes on",
            )
        text = log.read_text()
        assert "Too many open files" not in text
        assert all(x.startswith("{") for x in text.splitlines() if x.strip()), text[-2000:]
    finally:
        stop_all([agent])
