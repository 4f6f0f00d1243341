"""``plan_for`` when the spec files turn out invalid while the connection is still being
made: the ``SpecError`` is raised and nothing waits on, whatever became of the planning
task's cancel. Python 3.11's ``asyncio.wait_for`` returns a result that is ready as it is
cancelled; our connect then carried on, the planning task went on to wait for specs that
never came, and ``reconcile plan`` of an invalid spec hung for good (once in 113 runs
under load; the CI's README command timed out on it)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from reconciler.errors import Problem, SpecError
from reconciler.execution import pipeline, run
from reconciler.execution.requests import PlanRequest
from reconciler.jetstream import ConnectionOptions


def test_invalid_specs_end_the_plan_though_the_connect_lost_its_cancel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps: list[str] = []

    async def planned_in_session(request: Any, specs: Any, observer: Any) -> Any:
        try:
            await asyncio.sleep(30)  # the connect, under way when the specs fail
        except asyncio.CancelledError:
            steps.append("cancel lost")  # as 3.11's wait_for loses it
        steps.append("waits for the specs")
        return await specs

    def invalid(request: Any) -> Any:
        raise SpecError([Problem(None, "", "invalid")])

    monkeypatch.setattr(run, "_planned_in_session", planned_in_session)
    monkeypatch.setattr(pipeline, "validated", invalid)
    options = ConnectionOptions(servers="nats://127.0.0.1:9")
    request = PlanRequest(paths=(Path("specs"),), options=options)

    async def planned() -> None:
        # a bound on a hang, not a time asserted: the plan ends at once or never
        await asyncio.wait_for(run.plan_for(request), 30)

    with pytest.raises(SpecError):
        asyncio.run(planned())
    assert steps == ["cancel lost", "waits for the specs"]
