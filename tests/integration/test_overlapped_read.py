"""A plan reads the live state while its spec files are validated (issue 31), and the
product's contract still holds: nothing but reads goes out before every file is valid,
and an invalid file is reported as such, whatever the read met.

The validation is held (``run.load_specs`` waits) until a watcher subscribed to
``$JS.API.>`` on the same server has seen the plan's first request: before the read
overlapped, no request went out while the files were validated.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, run

from reconciler.errors import SpecError
from reconciler.execution import pipeline
from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions

pytestmark = pytest.mark.integration

STREAM = 'kind: Stream\nname: ORDERS\nsubjects: ["orders.>"]\nstorage: {storage}\n'
#: The JetStream API requests a plan may send: reads only.
READS = re.compile(
    r"\$JS\.API\.(INFO|STREAM\.(LIST|NAMES|INFO\.\w+)|CONSUMER\.(LIST|NAMES|INFO)\.)"
)
#: How long validation waits for the read to show before going on (not a time asserted:
#: only whether the request was seen).
PATIENCE = 15.0


async def _stream_with_messages(url: str, count: int) -> None:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        body = {"name": "ORDERS", "subjects": ["orders.>"], "storage": "memory"}
        reply = await nc.request("$JS.API.STREAM.CREATE.ORDERS", json.dumps(body).encode())
        assert b'"error"' not in reply.data, reply.data
        for index in range(count):
            await nc.request("orders.new", str(index).encode(), timeout=5)
    finally:
        await nc.close()


async def _messages(url: str) -> int:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        reply = await nc.request("$JS.API.STREAM.INFO.ORDERS", b"", timeout=5)
        return int(json.loads(reply.data)["state"]["messages"])
    finally:
        await nc.close()


@pytest.fixture
def held_validation(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """``pipeline.load_specs`` (the load stage's validation) waits until ``seen`` is set
    (or PATIENCE passes); ``during`` says whether it was set while validation waited."""
    state: dict[str, Any] = {"seen": threading.Event(), "during": False}
    real: Callable[..., Any] = pipeline.load_specs

    def held(*args: Any, **kwargs: Any) -> Any:
        state["during"] = state["seen"].wait(PATIENCE)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "load_specs", held)
    yield state


async def _plan_watched(
    url: str, specs: Path, state: dict[str, Any]
) -> tuple[list[str], BaseException | None]:
    """Plan ``specs`` while a watcher records every JetStream API request's subject."""
    watcher = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    subjects: list[str] = []

    async def seen(msg: Any) -> None:
        subjects.append(msg.subject)
        state["seen"].set()

    await watcher.subscribe("$JS.API.>", cb=seen)
    await watcher.flush()
    error: BaseException | None = None
    try:
        await engine.plan([specs], ConnectionOptions(servers=url))
    except SpecError as err:
        error = err
    await watcher.flush()
    await watcher.close()
    return subjects, error


def test_the_live_state_is_read_while_the_specs_are_validated(
    clean_server: NatsServer, tmp_path: Path, held_validation: dict[str, Any]
) -> None:
    run(_stream_with_messages(clean_server.url, 20))
    (tmp_path / "orders.yaml").write_text(STREAM.format(storage="memory"), encoding="utf-8")
    subjects, error = run(_plan_watched(clean_server.url, tmp_path, held_validation))
    assert error is None
    assert held_validation["during"], "no request reached the server while validating"
    assert subjects and all(READS.match(s) for s in subjects), subjects
    assert run(_messages(clean_server.url)) == 20


def test_an_invalid_spec_cancels_the_read_and_only_reads_went_out(
    clean_server: NatsServer, tmp_path: Path, held_validation: dict[str, Any]
) -> None:
    run(_stream_with_messages(clean_server.url, 20))
    # Valid, this would replace ORDERS (storage is not updatable): an invalid field too.
    bad = STREAM.format(storage="file") + "max_msgs: lots\n"
    (tmp_path / "orders.yaml").write_text(bad, encoding="utf-8")
    subjects, error = run(_plan_watched(clean_server.url, tmp_path, held_validation))
    assert isinstance(error, SpecError)
    assert "orders.yaml:5" in str(error)
    assert held_validation["during"]
    assert subjects and all(READS.match(s) for s in subjects), subjects
    assert run(_messages(clean_server.url)) == 20


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_invalid_spec_beside_an_unreachable_server_reports_the_spec(tmp_path: Path) -> None:
    (tmp_path / "orders.yaml").write_text(STREAM.format(storage="memry"), encoding="utf-8")
    done = reconcile(
        "plan", "orders.yaml", "--server", f"nats://127.0.0.1:{_closed_port()}", cwd=tmp_path
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("orders.yaml:4:"), done.stderr
    assert "memry" in lines[0] and "connect" not in done.stderr.lower()


def test_an_unreachable_server_is_reported_when_the_specs_are_valid(tmp_path: Path) -> None:
    (tmp_path / "orders.yaml").write_text(STREAM.format(storage="memory"), encoding="utf-8")
    port = _closed_port()
    done = reconcile("plan", "orders.yaml", "--server", f"nats://127.0.0.1:{port}", cwd=tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert str(port) in done.stderr or "connect" in done.stderr.lower(), done.stderr


def test_a_plan_on_the_embedded_server_validates_before_starting_it(tmp_path: Path) -> None:
    (tmp_path / "orders.yaml").write_text(STREAM.format(storage="memry"), encoding="utf-8")
    store = tmp_path / "store"
    done = reconcile("plan", "orders.yaml", cwd=tmp_path, env={"RECONCILE_STORE": str(store)})
    assert done.returncode == 1
    assert done.stderr.startswith("orders.yaml:4:"), done.stderr
    assert not (store / "embedded.json").exists()
