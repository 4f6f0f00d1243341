"""Attacks on today's greeting checks (a listener that is no NATS server, a forged
reply on an account without JetStream) and on the agent serving many environments."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import nats
import pytest
from agent_harness import (
    PATIENCE,
    Other,
    changes,
    lines,
    orders_healed_in,
    project_of,
    project_sources,
    running_agent,
    until,
)
from cli_runner import reconcile
from servers import write
from test_greeting_attacks import ORDERS, greeting

from reconciler.agent.logs import Log
from reconciler.agent.loop import Agent, WatchSettings
from reconciler.errors import ExitStatus
from reconciler.jetstream import ConnectionOptions, JetStreamClient

pytestmark = pytest.mark.slow

#: A greeting as a NATS server sends it.
GOOD_INFO = b'{"server_id":"NX","version":"2.10.0","max_payload":1048576,"headers":true}'

#: Lines a listener sends on the open connection, after its greeting was taken: INFOs
#: no NATS server sends (a cluster's INFO updates arrive this way), an -ERR of no UTF-8.
LATER = {
    "INFO with connect_urls a number": b'INFO {"connect_urls":5,"server_id":"hunter2-SECRET"}\r\n',
    "INFO that is a list": b'INFO ["hunter2-SECRET"]\r\n',
    "INFO that is no JSON": b"INFO {hunter2-SECRET\r\n",
    "-ERR of no UTF-8": b"-ERR '\xff\xfehunter2-SECRET'\r\n",
}


@pytest.mark.parametrize("what", list(LATER))
def test_a_line_no_server_sends_on_the_open_connection_prints_no_traceback(
    what: str, tmp_path: Path
) -> None:
    """nats-py's read loop printed a traceback of it (logging's last resort, on stderr,
    with the forged JSON's error) and stopped reading, leaving the connection open and
    dead: the plan waited for its timeout. Now it ends the connection, said without a
    traceback or what was sent."""
    specs = write(tmp_path, ORDERS, "orders.yaml")
    with greeting(GOOD_INFO, then=LATER[what]) as url:
        done = reconcile("plan", str(specs), "--server", url, "--timeout", "3", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "SECRET" not in done.stderr + done.stdout


def test_an_info_no_server_sends_ends_the_connection_for_a_long_lived_client(
    run: Any,
) -> None:
    """The agent's client: an INFO update whose fields are not a NATS server's ends the
    connection (``lost``: the agent connects again with its backoff), where the
    connection stayed open with nobody reading it (requests timed out until nats-py's
    PING two minutes later)."""

    async def scenario(url: str) -> None:
        options = ConnectionOptions(servers=url, timeout=2, connect_timeout=2)
        client = await JetStreamClient.connect(options)
        try:
            await until(client.lost.is_set, what="the connection ended")
        finally:
            await client.close()

    with greeting(GOOD_INFO, then=LATER["INFO with connect_urls a number"]) as url:
        run(scenario(url))


@contextlib.asynccontextmanager
async def forwarded(
    account: str, jetstream: str, forged: Mapping[str, bytes | Callable[[Any], bytes]]
) -> AsyncIterator[None]:
    """On ``account`` (a server without JetStream) mallory answers every JetStream
    request (``$JS.API.>``, and the KeyValue writes of the apply lock) with what the
    server at ``jetstream`` answers, but the requests on a subject of ``forged`` with its
    forged reply (or what it makes of the request's JSON body): a client of the account
    sees a JetStream account of which some replies are no server's."""
    mallory = await nats.connect(account, name="mallory")
    real = await nats.connect(jetstream, name="real")

    async def forward(msg: Any) -> None:
        if msg.subject in forged:
            forge = forged[msg.subject]
            body = forge if isinstance(forge, bytes) else forge(json.loads(msg.data or b"{}"))
            await mallory.publish(msg.reply, body)
            return
        answer = await real.request(msg.subject, msg.data, timeout=10, headers=msg.headers)
        await mallory.publish(msg.reply, answer.data, headers=answer.headers)

    for subject in ("$JS.API.>", "$KV.>"):
        await mallory.subscribe(subject, cb=forward)
    try:
        yield
    finally:
        await mallory.close()
        await real.close()


def _streams(*names: str) -> str:
    return "".join(
        f"---\nkind: Stream\nname: {n}\nsubjects: [{n.lower()}.>]\nstorage: memory\n" for n in names
    )


def test_a_forged_reply_to_one_step_fails_that_step_and_every_step_is_reported(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """A prune deleting four empty streams, two at a time; the check before X's delete
    (is it still empty?) is answered ``{"state": 5}``. The error of that shape left the
    wave: the apply ended with no line for X nor a result, its lock released while the
    wave's other worker went on deleting. Now X's step fails (said by type and place),
    the wave finishes, and every step and the result are reported as they happened."""
    real, account = server_factory(), server_factory(jetstream=False)
    gone = ("X", "Y", "Z", "W")
    write(tmp_path, _streams(*gone), "before.yaml")
    made = reconcile("apply", "before.yaml", "--yes", "--server", real.url, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    write(tmp_path, _streams("A"), "after.yaml")
    args = ("apply", "after.yaml", "--yes", "--prune", "--allow-data-loss", "--format", "json")
    forged = {"$JS.API.STREAM.INFO.X": b'{"state": 5, "hunter2": "SECRET"}'}

    async def scenario() -> tuple[Any, list[str]]:
        async with forwarded(account.url, real.url, forged):
            done = await asyncio.to_thread(
                reconcile, *args, "--concurrency", "2", "--server", account.url, cwd=tmp_path
            )
        async with Other.connect(real.url) as other:
            names = (await other.api("STREAM.NAMES"))["streams"]
        return done, names

    done, left = run(scenario())
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "SECRET" not in done.stdout + done.stderr
    said = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    steps = {line["name"]: line["outcome"] for line in said if line["type"] == "step"}
    assert set(steps) == {"A", *gone}, steps
    assert steps["X"] == "failed"
    assert [line["failed"] for line in said if line["type"] == "result"] == [1]
    assert "X" in left  # its delete was never sent
    for name in gone:  # the server holds what the lines say
        assert (name in left) == (steps[name] != "applied"), (name, steps, left)


def test_a_stop_never_waits_for_an_environment_still_connecting(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """SIGTERM while one environment heals and another's server (a listener that never
    says anything) is being connected to: the agent stopped only when that connection
    gave up, ``connect_timeout`` later (past a pod's grace period, it is killed). Now
    the connect in flight is dropped at once; the other environment's heal is done
    and its lock released."""
    good = server_factory()
    with greeting(None) as mute:
        sources = _good_and_mute(tmp_path, good.url, mute)

        async def scenario() -> None:
            async with running_agent(sources, mode="heal", interval=0.5) as (agent, log):
                await orders_healed_in(log, ["good"])
                assert not agent.watches["mute"].tried  # still connecting
                agent.stop.set()
                await until(
                    lambda: any(line["event"] == "stopped" for line in lines(log)),
                    what="the agent stopped while mute was still connecting",
                )

        run(scenario())
    free = reconcile("lock", "status", "--server", good.url, cwd=tmp_path)
    assert free.returncode == 0, free.stdout + free.stderr


def _stream_page(name: str, total: int) -> bytes:
    """A STREAM.LIST page of one stream ``name`` that says the list holds ``total``."""
    info = {"config": {"name": name, "subjects": [f"{name}.>"], "storage": "memory"}}
    return json.dumps({"total": total, "limit": 256, "streams": [info]}).encode()


PAGES: dict[str, Callable[[Any], bytes]] = {
    # a new stream on every page of a list that says it holds 10^12
    "a total no account holds": lambda asked: _stream_page(f"S{asked.get('offset', 0)}", 10**12),
    # the same page at every offset, of a list that says it holds 500,000
    "one page again and again": lambda asked: _stream_page("S", 500_000),
}


@pytest.mark.parametrize("what", list(PAGES))
def test_a_list_whose_pages_never_end_fails_the_plan(
    what: str, server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """Paged lists were read until the offset reached the total the reply says, each
    request answered at once: ``reconcile plan --timeout 2`` made 51,717 requests in
    20 s and never ended (the agent's environment never finished its cycle, its memory
    growing). Now a total over any account's is refused, and a page that brings
    nothing new ends the read: the plan ends."""
    real, account = server_factory(), server_factory(jetstream=False)
    specs = write(tmp_path, ORDERS, "orders.yaml")

    async def scenario() -> Any:
        async with forwarded(account.url, real.url, {"$JS.API.STREAM.LIST": PAGES[what]}):
            return await asyncio.to_thread(
                reconcile, "plan", str(specs), "--server", account.url, "--timeout", "2",
                cwd=tmp_path,
            )  # fmt: skip

    done = run(scenario())  # before: cli_runner's bound of 120 s ran out
    assert "Traceback" not in done.stderr
    assert done.returncode in (0, 1), done.stderr


def test_a_list_whose_total_grows_page_after_page_fails_the_plan(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """A forged STREAM.LIST whose first page says 200 streams and every later page 100
    fresh ones and a total 200 past them: the read went on up to the total's ceiling of
    a million items (here mallory stops raising it at 5,000: the plan read 5,100
    streams). Now a total grown past the first page's by more than a real account grows
    while it is read is an unexpected reply: the plan fails after a dozen pages."""
    real, account = server_factory(), server_factory(jetstream=False)
    specs = write(tmp_path, ORDERS, "orders.yaml")
    asked: list[int] = []

    def page(body: Any) -> bytes:
        offset = int(body.get("offset", 0))
        asked.append(offset)
        total = offset + (200 if offset < 5000 else 100)
        infos = [
            {"config": {"name": f"S{n}", "subjects": [f"s{n}.>"], "storage": "memory"}}
            for n in range(offset, offset + 100)
        ]
        return json.dumps({"total": total, "limit": 256, "streams": infos}).encode()

    async def scenario() -> Any:
        async with forwarded(account.url, real.url, {"$JS.API.STREAM.LIST": page}):
            return await asyncio.to_thread(
                reconcile, "plan", str(specs), "--server", account.url, "--timeout", "2",
                cwd=tmp_path,
            )  # fmt: skip

    done = run(scenario())
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "unexpected reply on $JS.API.STREAM.LIST" in done.stderr
    assert max(asked) <= 1200  # the first page's 200, and 1,000 more at most


async def _create_streams(url: str, numbers: range) -> None:
    async with Other.connect(url, name="creator") as alice:
        for n in numbers:
            config = {"name": f"E{n}", "subjects": [f"e{n}.>"], "storage": "memory"}
            await alice.api(f"STREAM.CREATE.E{n}", config)


def test_a_list_that_grows_by_real_creates_while_it_is_read_is_read_whole(
    server_factory: Any, run: Any
) -> None:
    """The bound on a list's growth leaves a real account's alone: 300 streams, and
    another client creates 400 more after the stream list's first page came (before
    its second was asked for). The read sees the total change, reads again, and
    returns all 700."""
    server = server_factory()
    found, pages = read_while_created(server.url, 300, 700)
    assert found == {f"E{n}" for n in range(700)}
    assert pages > 2  # read again after the total changed


def read_while_created(url: str, first: int, then: int) -> tuple[set[str], int]:
    """Streams E0.. E{first-1} made, then the stream list read while another client
    makes E{first}.. E{then-1} after its first page came (before the second was asked
    for): the names the read returned, and the pages it read."""
    asyncio.run(_create_streams(url, range(first)))
    pages: list[int] = []

    def on_page(page: list[Any]) -> None:
        pages.append(len(page))
        if len(pages) == 1:  # the reader waits: the creates land between two pages
            meanwhile = threading.Thread(
                target=asyncio.run, args=(_create_streams(url, range(first, then)),)
            )
            meanwhile.start()
            meanwhile.join()

    async def read() -> list[dict[str, Any]]:
        client = await JetStreamClient.connect(ConnectionOptions(servers=url))
        try:
            return await client.list_streams(on_page=on_page)
        finally:
            await client.close()

    return {str(info["config"]["name"]) for info in asyncio.run(read())}, len(pages)


def _good_and_mute(folder: Path, good: str, mute: str) -> dict[str, Any]:
    """The sources of a project of two environments: ``good`` at a server, ``mute`` at
    a listener that never answers, whose connection gives up long after any test's
    patience (``connect_timeout`` 600 s)."""
    project = project_of(folder, {"good": good, "mute": mute})
    return project_sources(project, ConnectionOptions(timeout=2, connect_timeout=600))


def test_ctrl_c_during_once_ends_it_as_interrupted(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """``reconcile watch --all-envs --once`` and Ctrl-C (SIGINT sets the agent's stop)
    while one environment is still connecting: the stop was ignored until every cycle
    ended (measured: 27 s with --connect-timeout 25, then exit 1). Now the run ends at
    once with 130, as every other command interrupted does."""
    good = server_factory()
    with greeting(None) as mute:
        sources = _good_and_mute(tmp_path, good.url, mute)

        async def scenario() -> int:
            settings = WatchSettings(once=True, mode="heal", listen=None)
            log = io.StringIO()
            agent = Agent.serving(sources, settings, Log("json", log))
            task = asyncio.ensure_future(agent.run())
            await until(lambda: changes(log, "Stream ORDERS", "healed", "good"), what="good healed")
            agent.stop.set()
            return await asyncio.wait_for(task, PATIENCE)

        assert run(scenario()) == ExitStatus.INTERRUPTED


def test_subject_counts_given_one_page_again_and_again_end_unknown(
    server_factory: Any, run: Any
) -> None:
    """The messages per subject a plan counts (a consumer's interest, before its delete)
    are read page by page up to the total the reply says; the same page answered at
    every offset kept that read going for ever (here mallory gives up after 2,000 pages
    and answers an error). Now it ends at the second page, the count unknown (None: the
    plan says the loss cannot be counted)."""
    real, account = server_factory(), server_factory(jetstream=False)
    answered: list[int] = []

    def page(asked: Any) -> bytes:
        answered.append(asked.get("offset", 0))
        if len(answered) > 2000:
            return b'{"error": {"code": 500, "err_code": 1, "description": "mallory gave up"}}'
        return b'{"total": 50, "state": {"subjects": {"orders.a": 1}}}'

    async def scenario() -> Any:
        async with forwarded(account.url, real.url, {"$JS.API.STREAM.INFO.ORDERS": page}):
            client = await JetStreamClient.connect(ConnectionOptions(servers=account.url))
            try:
                return await client.subject_counts("ORDERS", "orders.>", 1000)
            finally:
                await client.close()

    assert run(scenario()) is None
    assert len(answered) == 2


ERRORS = {
    "an error that is text": b'{"error": "hunter2-SECRET"}',
    "an error code that is text": b'{"error": {"code": "500", "description": "hunter2-SECRET"}}',
    "an err_code that is a list": b'{"error": {"code": 500, "err_code": [], "description": "x"}}',
}


@pytest.mark.parametrize("what", list(ERRORS))
def test_a_forged_error_of_no_server_shape_names_the_request(
    what: str, server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """A JetStream error reply whose ``error`` is not the object every server sends was
    read as one (``error.get``, ``int(code)``): the plan said only ``unexpected
    AttributeError at transport.py:...``. Now it is an unexpected reply on the request
    it answered, said without its text."""
    real, account = server_factory(), server_factory(jetstream=False)
    specs = write(tmp_path, ORDERS, "orders.yaml")

    async def scenario() -> Any:
        async with forwarded(account.url, real.url, {"$JS.API.STREAM.LIST": ERRORS[what]}):
            return await asyncio.to_thread(
                reconcile, "plan", str(specs), "--server", account.url, cwd=tmp_path
            )

    done = run(scenario())
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "$JS.API.STREAM.LIST" in done.stderr  # the request it answered
    assert "SECRET" not in done.stdout + done.stderr


def _said_back(line: bytes) -> bytes:
    """A listener's answer to the CONNECT it was sent: an -ERR saying its credentials."""
    if not line.startswith(b"CONNECT "):
        return b""
    sent = json.loads(line[len(b"CONNECT ") :])
    return f"-ERR 'you sent {sent.get('pass')} {sent.get('auth_token')}'\r\n".encode()


#: Credentials given three ways, each a secret the CONNECT carries.
SENT = {
    "--password": (["--user", "alice", "--password", "Pw-hunter2"], {}, "{url}"),
    "NATS_TOKEN": ([], {"NATS_TOKEN": "Tok-hunter2"}, "{url}"),
    "a password in the URL": ([], {}, "nats://alice:Url%2Dhunter2@{url_rest}"),
}


@pytest.mark.parametrize("how", list(SENT))
def test_a_listener_saying_the_credentials_back_never_gets_them_printed(
    how: str, tmp_path: Path
) -> None:
    """Whatever listens at the address receives the CONNECT with the password or token;
    its -ERR said them back, and the connection error printed them (a CI log keeps
    them). Now every secret the options send is masked in that error, as written and
    decoded."""
    flags, environ, server = SENT[how]
    specs = write(tmp_path, ORDERS, "orders.yaml")
    auth = b'{"server_id":"NX","max_payload":1048576,"auth_required":true}'
    with greeting(auth, answer=_said_back) as url:
        where = server.format(url=url, url_rest=url.removeprefix("nats://"))
        args = ("plan", str(specs), "--server", where, "--timeout", "2", *flags)
        done = reconcile(*args, cwd=tmp_path, env=environ)
    assert done.returncode == 1, done.stderr
    assert "you sent" in done.stderr  # the listener's answer is said ...
    assert "hunter2" not in done.stdout + done.stderr  # ... without the secret
