"""``reconcile failover`` attacked again (a careless user, another client on either
server), on two real JetStream domains joined by a leafnode: both sides are counted with
a raw client before and after. Each test names the hole it closes."""

# ruff: noqa: F811 (the ``ready`` fixture, imported, is each test's argument)
from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_dr_attacks import counted, said
from test_dr_failover import fetch, is_fenced, ready  # noqa: F401 (ready: a fixture)
from test_dr_rules import FAILOVER
from test_dr_standby import consumers
from test_lifecycle import _info, _request

pytestmark = pytest.mark.integration

Ready = tuple[NatsServer, NatsServer, Path]


def test_a_consumer_someone_made_again_on_the_origin_never_decides_where_the_standbys_starts(
    ready: Ready,
) -> None:
    """Hole: east's ``shipper`` (ack floor 20) deleted and made again by another client
    (no owner marker, delivering only new messages: its ack floor 50). The failover read
    that ack floor as the project's consumer's and created west's ``shipper`` at 51:
    messages 21..50, never processed, skipped for good. A declared consumer on the origin
    must carry this project's owner marker before its ack floor decides anything."""
    east, west, root = ready
    assert "error" not in run(_request(east.url, "$JS.API.CONSUMER.DELETE.ORDERS.shipper"))
    made = {"durable_name": "shipper", "ack_policy": "explicit", "deliver_policy": "new"}
    body = {"stream_name": "ORDERS", "config": made, "action": "create"}
    assert "error" not in run(_request(east.url, "$JS.API.CONSUMER.CREATE.ORDERS.shipper", body))
    east_before, west_before = counted(east), counted(west)

    result = reconcile(*FAILOVER, cwd=root)
    assert result.returncode == 1, said(result)
    assert "shipper" in result.stderr and "nothing was changed" in result.stderr
    assert counted(east) == east_before and counted(west) == west_before
    assert not is_fenced(east) and consumers(west) == []
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
