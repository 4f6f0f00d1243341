"""Whatever listens at a server's address (a hostile process, a port pointing at another
service, a broken proxy) may send a greeting no NATS server sends. nats-py takes it as
it comes: an INFO that is a JSON list raised ``AttributeError`` while connecting, a
``max_payload`` that is text a ``TypeError`` at the first request. The CLI printed a
traceback, and one such environment stopped a ``reconcile watch`` serving many."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from agent_harness import (
    Other,
    changes,
    get,
    lines,
    orders_healed_in,
    project_of,
    project_sources,
    running_agent,
    until,
)
from cli_runner import reconcile
from credentials import make_tls
from prometheus_client.parser import text_string_to_metric_families
from servers import write
from test_agent_envs import _declared, _drift

from reconciler.agent.source import FixedSource
from reconciler.execution.stages import PlanRequest
from reconciler.jetstream import ConnectionOptions

ORDERS = """\
kind: Stream
name: ORDERS
subjects: [orders.>]
storage: memory
description: orders as declared
max_msgs: 1000
"""

#: Greetings no NATS server sends, each breaking nats-py somewhere else.
GREETINGS = {
    "a list": b"[]",
    "max_payload as text": b'{"server_id":"X","max_payload":"1MB","headers":true}',
    "connect_urls not a list": b'{"server_id":"X","max_payload":1048576,"connect_urls":5}',
    "a secret in the text": b'{"server_id":"hunter2-SECRET","max_payload":-1}',
}


@contextlib.contextmanager
def greeting(
    info: bytes | None, *, then: bytes = b"", answer: Callable[[bytes], bytes] | None = None
) -> Iterator[str]:
    """A listener on 127.0.0.1 that sends ``INFO <info>`` to whoever connects (None:
    nothing, ever) and answers PING, the first PONG followed by ``then`` (lines sent on
    the open connection); ``answer``: what it sends back to every line instead. Its URL."""
    loop = asyncio.new_event_loop()
    ready: list[str] = []
    started = threading.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if info is not None:
            writer.write(b"INFO " + info + b"\r\n")
        after = then
        with contextlib.suppress(Exception):
            await writer.drain()
            while line := await reader.readline():
                if answer is not None:
                    writer.write(answer(line))
                    await writer.drain()
                elif line.startswith(b"PING") and info is not None:
                    writer.write(b"PONG\r\n" + after)
                    after = b""
                    await writer.drain()
        writer.close()

    async def serve() -> asyncio.Server:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ready.append(f"nats://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        started.set()
        return server

    server = loop.run_until_complete(serve())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield ready[0]
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


@pytest.mark.parametrize("what", list(GREETINGS))
def test_plan_against_a_listener_that_is_no_nats_server_says_so_without_a_traceback(
    what: str, tmp_path: Path
) -> None:
    specs = write(tmp_path, ORDERS, "orders.yaml")
    with greeting(GREETINGS[what]) as url:
        done = reconcile("plan", str(specs), "--server", url, "--timeout", "2", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert url in done.stderr  # the error names where it connected
    assert "SECRET" not in done.stderr + done.stdout  # what was sent is never quoted


def test_the_next_url_is_tried_after_a_listener_that_is_no_nats_server(
    server_factory: Any, tmp_path: Path
) -> None:
    """A URL list whose first entry is the broken listener: the real server second in
    the list is planned, as after a refused connection."""
    server = server_factory()
    specs = write(tmp_path, ORDERS, "orders.yaml")
    with greeting(GREETINGS["a list"]) as url:
        done = reconcile("plan", str(specs), "--server", f"{url},{server.url}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ORDERS" in done.stdout


def test_one_environment_behind_a_broken_greeting_stops_no_other(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """``reconcile watch`` serving two environments, one of them a listener whose INFO
    is a JSON list: that environment fails (refused, in /status and its log lines,
    without what it sent), and the other heals a change by hand, every message kept.
    Before, the AttributeError ended the whole agent."""
    good = server_factory()
    with greeting(GREETINGS["a list"]) as broken:
        project = project_of(tmp_path, {"good": good.url, "broken": broken})
        sources = project_sources(project, ConnectionOptions(timeout=1.0, connect_timeout=1.0))

        async def scenario() -> None:
            async with running_agent(sources, mode="heal", interval=0.5) as (agent, log):
                await orders_healed_in(log, ["good"])
                async with Other.connect(good.url) as alice:
                    await alice.publish("orders.new", 6)
                bad = agent.watches["broken"]
                await until(lambda: bad.link.refused, what="broken failed")
                healed = len(changes(log, "Stream ORDERS", "healed", "good"))
                await _drift(good.url, description="changed by hand", max_msgs=7000)
                await until(
                    lambda: len(changes(log, "Stream ORDERS", "healed", "good")) > healed,
                    what="good healed beside the broken environment",
                )
                assert await _declared(good.url)
                async with Other.connect(good.url) as alice:
                    assert await alice.messages("ORDERS") == 6
                assert not agent.stop.is_set()  # still serving both
                status = json.loads((await get(agent, "/status"))[1])["environments"]
                assert status["broken"]["refused"] is True  # it answered, and no NATS
                assert broken in status["broken"]["error"]
                assert status["good"]["ready"] is True
                errors = [
                    line
                    for line in lines(log)
                    if line["event"] == "error" and line.get("env") == "broken"
                ]
                assert errors, "the broken environment's failure is in its log lines"

        run(scenario())


def test_a_failure_no_check_foresaw_in_one_environment_stops_no_other(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """An error of no known kind before an environment's connection (here its request,
    made to raise ``KeyError``: any bug of that path) fails that environment alone, said
    by type and place, and it is tried again; the other environment heals meanwhile."""
    servers = {"good": server_factory(), "odd": server_factory()}
    project = project_of(tmp_path, {name: server.url for name, server in servers.items()})
    sources: dict[str, Any] = project_sources(project)
    odd = sources["odd"] = _Failing(sources["odd"], times=2)

    async def scenario() -> None:
        async with running_agent(sources, mode="heal", interval=0.5, first_backoff=0.1) as (
            agent,
            log,
        ):
            await orders_healed_in(log, ["good"])
            await until(lambda: odd.tries > 2, what="odd tried again after its failures")
            await orders_healed_in(log, ["odd"])
            assert not agent.stop.is_set()
            said = [
                line["message"]
                for line in lines(log)
                if line["event"] == "error" and line.get("env") == "odd"
            ]
            assert said and all("KeyError" in message for message in said)
            assert "hunter2" not in log.getvalue()  # the error's text is never said

    run(scenario())


class _Failing:
    """A source whose first ``times`` requests raise ``KeyError`` (a bug on the path
    before connecting), then give the real source's."""

    commit: str | None = None
    committed_at: float | None = None
    project_error: tuple[str, float] | None = None
    project_reads = 0
    edited: Path | None = None

    def __init__(self, real: FixedSource, *, times: int) -> None:
        self.real, self.times, self.tries = real, times, 0

    async def refresh(self) -> bool:
        return False

    def holding(self) -> Any:
        return self.real.holding()

    def shown(self, text: str) -> str:
        return self.real.shown(text)

    def request(self) -> PlanRequest:
        self.tries += 1
        if self.tries <= self.times:
            raise KeyError("hunter2")
        return self.real.request()


def test_a_forged_reply_no_check_foresaw_is_said_by_type_and_place_without_a_traceback(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """On an account without JetStream any client may answer ``$JS.API.>``: mallory
    answers the server facts' request with ``{"api": 5}`` and a secret beside it. No
    check foresaw that shape: ``reconcile plan`` says the error's type and place, not
    its text nor the reply, exits 1, and prints no traceback (``--debug`` does)."""
    server = server_factory(jetstream=False)
    specs = write(tmp_path, ORDERS, "orders.yaml")

    async def scenario() -> tuple[Any, Any]:
        mallory = await nats.connect(server.url, name="mallory")

        async def forge(msg: Any) -> None:
            await msg.respond(json.dumps({"api": 5, "domain": "hunter2-SECRET"}).encode())

        await mallory.subscribe("$JS.API.>", cb=forge)
        try:
            args = ("plan", str(specs), "--server", server.url)
            plain = await asyncio.to_thread(reconcile, *args, cwd=tmp_path)
            debug = await asyncio.to_thread(reconcile, "--debug", *args, cwd=tmp_path)
        finally:
            await mallory.close()
        return plain, debug

    plain, debug = run(scenario())
    assert plain.returncode == 1, plain.stderr
    assert "Traceback" not in plain.stderr
    assert "unexpected AttributeError at " in plain.stderr
    assert "SECRET" not in plain.stderr + plain.stdout
    assert "Traceback" in debug.stderr


def _metric(body: bytes, name: str) -> dict[str, float]:
    """Each environment's value of the gauge ``name`` in a ``/metrics`` body."""
    found = {f.name: f for f in text_string_to_metric_families(body.decode())}
    return {s.labels["env"]: s.value for s in found[name].samples}


def test_environments_whose_servers_refuse_the_agent_make_it_not_ready_unlike_those_down(
    server_factory: Any, tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that answers and refuses the agent (a wrong password, TLS it requires,
    a listener whose greeting is no NATS server's) is the configuration's fault, which a
    rollout brings: ``/readyz`` is 503 and names them, unlike a server that is down (the
    world's fault: 200 when every server is down). ``/status`` says which is which
    (``refused``; ``reachable`` true: it answered) and so does
    ``reconcile_connection_refused``; the password is said nowhere. A refused
    environment beside one that heals still is 503. Before, a refusal counted as
    "unreachable" and every environment refused was 200."""
    monkeypatch.setenv("SHOP_PASSWORD", "hunter2-wrong")
    locked = server_factory(users=[{"user": "shop", "password": "right"}])
    tls = server_factory(tls=make_tls(tmp_path / "tls"))
    down = server_factory()
    down.kill()
    good = server_factory()
    options = ConnectionOptions(timeout=1.0, connect_timeout=1.0)

    def project(root: Path, listener: str, *, with_good: bool) -> dict[str, Any]:
        root.mkdir()
        write(root, ORDERS, "orders.yaml")
        envs = {
            "badpass": f"{locked.url}\n    user: shop\n    password: {{env: SHOP_PASSWORD}}",
            "notnats": listener,
            "tlsplain": tls.url,  # plain nats:// to a server requiring TLS
            "down": down.url,
        }
        if with_good:
            envs = {"good": good.url, "badpass": envs["badpass"]}
        listed = "".join(f"  {name}:\n    servers: {url}\n" for name, url in envs.items())
        text = f"owner: shop\nspecs: [orders.yaml]\nenvironments:\n{listed}"
        return project_sources(write(root, text, "reconcile.yaml"), options)

    async def refused_only(listener: str) -> None:
        sources = project(tmp_path / "refused", listener, with_good=False)
        async with running_agent(sources, mode="heal", interval=0.5) as (agent, log):
            await until(
                lambda: all(w.tried for w in agent.watches.values()), what="every one tried"
            )
            code, body = await get(agent, "/readyz")
            assert code == 503, body
            for env in ("badpass", "notnats", "tlsplain"):
                assert env.encode() in body
            status = json.loads((await get(agent, "/status"))[1])
            assert status["ready"] is False
            envs = status["environments"]
            for env in ("badpass", "notnats", "tlsplain"):
                assert envs[env]["refused"] is True, envs[env]
                assert envs[env]["reachable"] is True  # it answered
                assert envs[env]["connected"] is False and envs[env]["error"]
                assert envs[env]["unreachable_since"] is None
            assert "authorization" in envs["badpass"]["error"]
            assert envs["down"]["refused"] is False and envs["down"]["reachable"] is False
            metrics = (await get(agent, "/metrics"))[1]
            refused = _metric(metrics, "reconcile_connection_refused")
            assert refused == {"badpass": 1, "notnats": 1, "tlsplain": 1, "down": 0}
            assert set(_metric(metrics, "reconcile_connected").values()) == {0}
            said = log.getvalue() + json.dumps(status) + body.decode() + metrics.decode()
            assert "hunter2" not in said

    async def beside_a_good_one() -> None:
        sources = project(tmp_path / "mixed", "unused", with_good=True)
        async with running_agent(sources, mode="heal", interval=0.5) as (agent, log):
            await orders_healed_in(log, ["good"])
            await until(lambda: agent.watches["badpass"].tried, what="badpass tried")
            code, body = await get(agent, "/readyz")
            assert code == 503, body
            assert b"badpass" in body and b"good" not in body

    with greeting(GREETINGS["a list"]) as listener:
        run(refused_only(listener))
    run(beside_a_good_one())
