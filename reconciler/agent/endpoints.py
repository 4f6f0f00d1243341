"""The agent's HTTP job: ``/metrics``, ``/healthz``, ``/readyz``, ``/status`` on ``--listen``.

One listener per process, whatever number of environments it serves (:mod:`.http` does the
serving). ``/readyz`` says :meth:`reconciler.agent.loop.Agent.not_ready` (503 with the
reason); ``/healthz`` answers while the process does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from reconciler.agent.http import Reply, Route, exposure, serve
from reconciler.agent.logs import Log
from reconciler.agent.metrics import Metrics
from reconciler.errors import ReconcileError
from reconciler.model.values import printable


class Endpoints:
    def __init__(
        self,
        metrics: Metrics,
        status: Callable[[], dict[str, Any]],
        not_ready: Callable[[], str | None],
    ) -> None:
        self.metrics = metrics
        self.status = status
        self.not_ready = not_ready
        self.server: asyncio.Server | None = None

    def routes(self) -> dict[str, Route]:
        return {
            "/metrics": lambda: Reply(200, self.metrics.text(), "text/plain; version=0.0.4"),
            "/healthz": lambda: Reply(200, b"ok\n"),
            "/readyz": self._ready,
            "/status": lambda: Reply(
                200, json.dumps(self.status(), default=str).encode(), "application/json"
            ),
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
            raise ReconcileError(f"cannot listen on {host}:{port}: {reason}") from None
        bound = self.server.sockets[0].getsockname()
        log.event("listening", f"http://{bound[0]}:{bound[1]}/metrics")
        if (exposed := exposure(host)) is not None:
            log.event("notice", exposed)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)
