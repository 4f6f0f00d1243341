"""The snapshot request's wait (``snapshots._while_answering``) when the command is
interrupted: the request's own failure, come as the wait was cancelled (Ctrl-C while the
server was frozen: its timeout fired), is taken, never left for the interpreter to print
('Task exception was never retrieved' and a traceback, after 'interrupted: the backup
in DIR is unfinished'). An in-memory client: the order of events is the test."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from typing import Any

from reconciler.jetstream.connection import cancelled_and_taken
from reconciler.jetstream.snapshots import _while_answering


class _Frozen:
    """A client whose server never answers a PING: ``answers()`` waits for ever."""

    timeout = 0.01

    def __init__(self) -> None:
        self.pinging = asyncio.Event()

    async def answers(self) -> bool:
        self.pinging.set()
        await asyncio.Event().wait()
        return False


def _unretrieved(run: Any) -> list[dict[str, Any]]:
    """What the loop was told nobody took, ``run`` run on a loop of its own."""
    seen: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        loop.run_until_complete(run())
        gc.collect()
    finally:
        loop.close()
    return seen


def test_a_request_failing_as_its_wait_is_cancelled_is_never_printed_at_exit() -> None:
    async def interrupted() -> None:
        client = _Frozen()

        async def asked() -> dict[str, Any]:
            await client.pinging.wait()
            raise TimeoutError("no reply to STREAM.SNAPSHOT.BIG3")

        waiting = asyncio.ensure_future(_while_answering(client, "BIG3", asked()))  # type: ignore[arg-type]
        await client.pinging.wait()
        for _ in range(3):  # the request's task ends with its failure
            await asyncio.sleep(0)
        waiting.cancel()  # Ctrl-C
        with contextlib.suppress(asyncio.CancelledError):
            await waiting

    assert _unretrieved(interrupted) == []


def test_a_request_still_asking_when_its_wait_is_cancelled_is_cancelled_too() -> None:
    ended: list[str] = []

    async def interrupted() -> None:
        client = _Frozen()

        async def asked() -> dict[str, Any]:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                ended.append("cancelled")
                raise
            return {}

        waiting = asyncio.ensure_future(_while_answering(client, "BIG3", asked()))  # type: ignore[arg-type]
        await client.pinging.wait()
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting

    assert _unretrieved(interrupted) == [] and ended == ["cancelled"]


def test_a_connect_turning_its_cancel_into_another_error_is_taken_too() -> None:
    """nats-py's connect re-raises what it met: cancelled as Ctrl-C ends the wait for a
    server's INFO, it can end with its own error, which ``_open`` left untaken (the same
    traceback at exit, seen once in CI's Ctrl-C-while-connecting test). The connection
    layer and the snapshot's wait take every such end through one helper."""

    async def interrupted() -> None:
        async def connect() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise TimeoutError("nats: timeout waiting for INFO message") from None

        attempt = asyncio.ensure_future(connect())
        await asyncio.sleep(0)
        await cancelled_and_taken(attempt)
        assert attempt.done() and isinstance(attempt.exception(), TimeoutError)

    assert _unretrieved(interrupted) == []


def test_a_connect_ending_after_the_wait_for_its_cancel_is_still_taken() -> None:
    """On a loaded machine, a connect cancelled by Ctrl-C may end later than the wait
    for it (nats-py closing its socket, say), with the error it met: its end is taken
    whenever it comes, not left for the interpreter's 'Task exception was never
    retrieved' and a traceback (test_backup_attacks.py's Ctrl-C during a backup's
    connect saw one)."""

    async def interrupted() -> None:
        async def connect() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                await asyncio.sleep(0.05)  # longer than the wait below
                raise TimeoutError("nats: timeout waiting for INFO message") from None

        attempt = asyncio.ensure_future(connect())
        await asyncio.sleep(0)
        await cancelled_and_taken(attempt, wait=0.001)
        assert not attempt.done()
        await asyncio.sleep(0.1)
        assert attempt.done()
        del attempt

    assert _unretrieved(interrupted) == []
