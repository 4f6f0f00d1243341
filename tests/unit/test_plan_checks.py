"""Every check that can refuse a plan is a value on it, raised only by the verdict: two
refusals of different kinds on one plan are both reported, and nothing changes.

Offline, through the in-memory ``$JS.API`` (``jetstream.memory``); the same refusals on
real servers: tests/integration/test_front_doors.py, test_capacity*.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_stages_offline import ORDERS, _planned, _request

from reconciler.errors import RefusalKind, SpecError
from reconciler.execution import stages
from reconciler.jetstream.memory import MemoryServer

AUDIT = "kind: Stream\nname: AUDIT\nsubjects: [audit.>]\n"


def test_a_plan_over_the_accounts_limit_that_deletes_messages_reports_both_refusals(
    tmp_path: Path,
) -> None:
    """ORDERS holds 20 messages on an account of one stream. The specs cut ORDERS to 5
    messages (data loss) and add AUDIT (a second stream: capacity). The plan carries
    the capacity check; the verdict reports it and the data loss, with their kinds; the
    first is what is raised; no request that changes the server is sent."""
    server = MemoryServer(limits={"max_streams": 1})
    first = asyncio.run(_planned(server, _request(tmp_path, ORDERS.format(max_msgs=100))))
    asyncio.run(stages.execute(first, server.client()))
    server.hold("ORDERS", 20)
    changing = len(server.requests)

    plan = asyncio.run(_planned(server, _request(tmp_path, ORDERS.format(max_msgs=5), AUDIT)))

    assert [check.kind for check in plan.checks] == [RefusalKind.CAPACITY]
    refusals = stages.verdict(plan)
    assert [r.kind for r in refusals] == [RefusalKind.CAPACITY, RefusalKind.DATA_LOSS]
    capacity, loss = refusals
    assert isinstance(capacity, SpecError)
    assert any(
        "streams.yaml:" in str(p.location) and "AUDIT" in p.message for p in capacity.problems
    )
    assert loss.details[0].startswith("update Stream ORDERS: holds 20 messages")
    allowed = stages.verdict(plan, stages.Allowances(allow_data_loss=True))
    assert [r.kind for r in allowed] == [RefusalKind.CAPACITY]  # no flag lifts a check
    with pytest.raises(SpecError) as raised:
        stages.refuse(refusals)
    assert raised.value is capacity
    with pytest.raises(SpecError):
        asyncio.run(
            stages.execute(
                plan, server.client(), allowances=stages.Allowances(allow_data_loss=True)
            )
        )
    sent = server.requests[changing:]
    assert not [s for s in sent if {"CREATE", "UPDATE", "DELETE"} & set(s.split("."))]
    info = asyncio.run(server.client().stream_info("ORDERS"))
    assert info["state"]["messages"] == 20


def test_problems_of_several_checks_are_raised_together_each_at_its_line(
    tmp_path: Path,
) -> None:
    """An entry of a bucket nobody declares (invalid) and a second stream on an account
    of one (capacity): the verdict has both kinds, and the one error raised lists both
    problems at their lines (a run shows them all, exit status 1)."""
    server = MemoryServer(limits={"max_streams": 1})
    entry = "kind: KeyValueEntry\nbucket: nope\nkey: mode\nvalue: fast\n"
    request = _request(tmp_path, ORDERS.format(max_msgs=10), AUDIT, entry)
    plan = asyncio.run(_planned(server, request))
    refusals = stages.verdict(plan)
    assert [r.kind for r in refusals] == [RefusalKind.INVALID, RefusalKind.CAPACITY]
    with pytest.raises(SpecError) as raised:
        stages.refuse(refusals)
    lines = {p.location.line for p in raised.value.problems if p.location is not None}
    assert len(lines) >= 2  # the entry's line and the streams' lines
    assert any("nope" in p.message for p in raised.value.problems)
    assert any("AUDIT" in p.message for p in raised.value.problems)
    assert int(raised.value.exit_code) == 1
    assert not [s for s in server.requests if "CREATE" in s.split(".")]
