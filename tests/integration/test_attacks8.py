"""Attacks on today's greeting checks (a listener that is no NATS server, a forged
reply on an account without JetStream) and on the agent serving many environments."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import nats
import pytest
from agent_harness import Other, until
from cli_runner import reconcile
from servers import write
from test_greeting_attacks import ORDERS, greeting

from reconciler.jetstream import ConnectionOptions, JetStreamClient

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
    account: str, jetstream: str, forged: Mapping[str, bytes]
) -> AsyncIterator[None]:
    """On ``account`` (a server without JetStream) mallory answers every JetStream
    request (``$JS.API.>``, and the KeyValue writes of the apply lock) with what the
    server at ``jetstream`` answers, but the requests on a subject of ``forged`` with its
    forged reply: a client of the account sees a JetStream account of which one reply
    is no server's."""
    mallory = await nats.connect(account, name="mallory")
    real = await nats.connect(jetstream, name="real")

    async def forward(msg: Any) -> None:
        if msg.subject in forged:
            await mallory.publish(msg.reply, forged[msg.subject])
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
