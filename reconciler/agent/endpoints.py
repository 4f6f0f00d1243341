"""The agent's HTTP job: ``/metrics``, ``/healthz``, ``/readyz``, ``/status`` on ``--listen``.

One listener per process, whatever number of environments it serves (:mod:`.http` does the
serving). ``/readyz`` says :meth:`reconciler.agent.loop.Agent.not_ready` (503 with the
reason); ``/healthz`` answers while the process does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from reconciler.agent.http import Reply, Route, exposure, serve
from reconciler.agent.logs import Log
from reconciler.agent.metrics import Metrics
from reconciler.errors import ReconcileError
from reconciler.model.values import printable


class Encoded(Protocol):
    """A part of ``/status`` encoded once (a cycle: its resources are most of the body)."""

    @property
    def encoded(self) -> bytes: ...


class StatusBody:
    """``/status``'s body, cheap to ask for again and again (an open port may be
    hammered): ``document(mark)`` is the document with ``mark(part)`` standing for each
    large part, whose JSON is made once (:attr:`Encoded.encoded`); the rest (small: the
    connection, readiness, recent changes) is encoded at each request and the parts
    spliced in. While neither changed, the same bytes are served again. The body is the
    JSON of the whole document, as one ``json.dumps`` would write it."""

    def __init__(self, document: Callable[[Callable[[Any], str]], dict[str, Any]]) -> None:
        self.document = document
        self._token = uuid.uuid4().hex  # never in a value someone else wrote
        self._marks = re.compile(rb'"' + self._token.encode() + rb':(\d+)"')
        self._last: tuple[bytes, list[Any], bytes] | None = None
        self.built = 0  # bodies spliced (the rest were served again)

    def __call__(self) -> bytes:
        parts: list[Encoded] = []

        def mark(part: Encoded) -> str:
            parts.append(part)
            return f"{self._token}:{len(parts) - 1}"

        outline = json.dumps(self.document(mark), default=str).encode()
        last = self._last
        if (
            last is not None
            and last[0] == outline
            and len(last[1]) == len(parts)
            and all(a is b for a, b in zip(last[1], parts, strict=True))
        ):
            return last[2]
        pieces = self._marks.split(outline)  # text, index, text, index, ..., text
        body = b"".join(
            piece if i % 2 == 0 else parts[int(piece)].encoded for i, piece in enumerate(pieces)
        )
        self._last = (outline, parts, body)
        self.built += 1
        return body


class Endpoints:
    def __init__(
        self,
        metrics: Metrics,
        status: Callable[[], bytes],
        not_ready: Callable[[], str | None],
    ) -> None:
        self.server: asyncio.Server | None = None
        self.answer(metrics, status, not_ready)

    @classmethod
    def starting(cls, reason: str) -> Endpoints:
        """The endpoints before the agent is made (``watch --git --all-envs`` fetches the
        branch head first, to read which environments to serve; a large repository's
        first fetch takes minutes): ``/healthz`` 200, the process answers (a liveness
        probe must not kill it meanwhile), ``/readyz`` 503 saying ``reason``,
        ``/status`` saying it, no metric series yet. :meth:`answer` hands them over."""
        body = json.dumps({"format_version": 1, "starting": reason}).encode()
        return cls(Metrics(by_env=True), lambda: body, lambda: reason)

    def answer(
        self,
        metrics: Metrics,
        status: Callable[[], bytes],
        not_ready: Callable[[], str | None],
    ) -> None:
        """What the routes answer from now on (an open listener keeps listening)."""
        self.metrics = metrics
        self.status = status
        self.not_ready = not_ready

    def routes(self) -> dict[str, Route]:
        return {
            "/metrics": lambda: Reply(200, self.metrics.text(), "text/plain; version=0.0.4"),
            "/healthz": lambda: Reply(200, b"ok\n"),
            "/readyz": self._ready,
            "/status": lambda: Reply(200, self.status(), "application/json"),
        }

    def _ready(self) -> Reply:
        reason = self.not_ready()
        if reason is None:
            return Reply(200, b"ready\n")
        # a server's error text may hold escapes and line breaks: one line, as the log has it
        return Reply(503, (printable(reason) + "\n").encode())

    async def open(self, host: str, port: int, log: Log) -> None:
        try:
            self.server = await serve(host, port, self.routes())
        except OSError as err:
            reason = (err.strerror or str(err)).lower()
            raise ReconcileError(
                f"cannot listen on {host}:{port}: {reason} (another agent's address, say: "
                "give --listen another HOST:PORT, or --listen off for no HTTP endpoints)"
            ) from None
        bound = self.server.sockets[0].getsockname()
        log.event("listening", f"http://{bound[0]}:{bound[1]}/metrics")
        if (exposed := exposure(host)) is not None:
            log.event("notice", exposed)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)
