"""Plans stay right while another client creates and deletes streams: paged lists shift
under concurrent change, and the plan must neither crash nor plan a create for a stream
that exists. Real nats-server; the churn is bounded in count and time."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from harness import stream_doc, write_specs
from servers import NatsServer, run

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions, open_client

pytestmark = pytest.mark.integration

DECLARED = 300  # more than one STREAM.LIST page (256)
ROUNDS = 25


class Churn:
    """Creates and deletes streams that sort before the declared ones, shifting pages."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.done = threading.Event()
        self.changes = 0
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        deadline = time.monotonic() + 120
        async with open_client(ConnectionOptions(servers=self.url)) as client:
            i = 0
            while not self.done.is_set() and time.monotonic() < deadline and i < 20_000:
                name = f"AAA_CHURN_{i % 40:02d}"
                try:
                    if i % 80 < 40:
                        await client.create_stream({"name": name, "subjects": [f"churn.{i % 40}"]})
                    else:
                        await client.delete_stream(name)
                    self.changes += 1
                except Exception:  # a race with ourselves is fine; keep churning
                    pass
                i += 1

    def __enter__(self) -> Churn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=30)


def test_plans_under_concurrent_create_and_delete_never_crash_or_plan_a_create(
    clean_server: NatsServer, tmp_path: Path, figures
) -> None:
    specs = write_specs(tmp_path / "s", [stream_doc(f"S{i:04d}") for i in range(DECLARED)])
    options = ConnectionOptions(servers=clean_server.url)
    run(engine.apply([specs], options, lock_timeout=None))
    errors: list[str] = []
    creates = 0
    with Churn(clean_server.url) as churn:
        for _ in range(ROUNDS):
            try:
                plan = run(engine.plan([specs], options))
            except Exception as err:  # the bug this guards against: ValueError in a zip
                errors.append(repr(err))
                continue
            creates += sum(1 for step in plan.changes if step.action == "create")
            assert not plan.changes, [s.label for s in plan.changes][:5]
    assert errors == []
    assert creates == 0
    assert churn.changes > ROUNDS, "the server changed while the plans read it"
    figures.add("race_rounds", ROUNDS)
