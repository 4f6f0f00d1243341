"""A standby in another account of the same server (docs/dr.md#two-accounts): the
standby's account imports the primary's JetStream API under a prefix and its deliver
subject; the spec names both (``standby.api``, ``standby.deliver``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cli_runner import reconcile
from servers import Cluster, NatsServer, run
from test_dr_failover import Publishers, _sent, fetch, stored
from test_dr_standby import wait_for
from test_lifecycle import _publish, _request

ACCOUNTS: dict[str, Any] = {
    "EAST": {
        "jetstream": "enabled",
        "users": [{"user": "east", "password": "east-pw"}],
        "exports": [{"service": "$JS.API.>"}, {"stream": "dr.deliver.>"}],
    },
    "WEST": {
        "jetstream": "enabled",
        "users": [{"user": "west", "password": "west-pw"}],
        "imports": [
            {"service": {"account": "EAST", "subject": "$JS.API.>"}, "to": "JS.east.API.>"},
            {"stream": {"account": "EAST", "subject": "dr.deliver.>"}},
        ],
    },
}
ORDERS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
standby:
  primary: east
  environment: west
  api: JS.east.API
  deliver: dr.deliver.ORDERS
---
kind: Consumer
stream: ORDERS
name: shipper
ack_policy: explicit
"""


def _url(server: NatsServer, user: str) -> str:
    return server.url.replace("nats://", f"nats://{user}:{user}-pw@")


def _project(root: Path, server: NatsServer, specs: str) -> dict[str, str]:
    """A project with environments east and west, each an account of ``server``, and
    ``specs``; the variables holding their passwords."""
    (root / "specs").mkdir()
    (root / "specs" / "orders.yaml").write_text(specs, encoding="utf-8")
    (root / "reconcile.yaml").write_text(
        "owner: shop\nspecs: [specs]\nenvironments:\n"
        f"  east:\n    servers: '{server.url}'\n    user: east\n"
        "    password: {env: EAST_PW}\n"
        f"  west:\n    servers: '{server.url}'\n    user: west\n"
        "    password: {env: WEST_PW}\n",
        encoding="utf-8",
    )
    return {"EAST_PW": "east-pw", "WEST_PW": "west-pw"}


def _info(server: NatsServer, user: str) -> dict[str, Any]:
    info: dict[str, Any] = run(_request(_url(server, user), "$JS.API.STREAM.INFO.ORDERS"))
    return info


def test_a_standby_in_another_account_fails_over(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    server = server_factory(config={"accounts": ACCOUNTS})
    secrets = _project(tmp_path, server, ORDERS)
    for env in ("east", "west"):
        done = reconcile("apply", "--env", env, "--yes", cwd=tmp_path, env=secrets)
        assert done.returncode == 0, done.stdout + done.stderr
        if env == "east":
            run(_publish(_url(server, "east"), "orders.new", 30))
    mirror = _info(server, "west")["config"]["mirror"]
    assert mirror["external"] == {"api": "JS.east.API", "deliver": "dr.deliver.ORDERS"}
    wait_for(lambda: _info(server, "west")["state"]["last_seq"] == 30)

    with Publishers([_url(server, "west")]) as publishers:  # the standby account's apps
        time.sleep(0.3)
        result = reconcile(
            "failover", "--from", "east", "--to", "west", "--yes", cwd=tmp_path, env=secrets
        )
        assert result.returncode == 0, result.stdout + result.stderr
        time.sleep(0.5)
    assert publishers.acked  # acknowledged once the west account's stream took the subjects
    payloads = stored(_url(server, "west"))
    assert not (set(publishers.acked) - set(payloads))
    ours = [p for p in payloads if p.startswith("p")]
    assert len(ours) == len(set(ours))
    assert fetch(_url(server, "west"), "shipper", 1, ack=False) == [1]  # floor 0: from 1
    assert _info(server, "east")["config"]["subjects"] == ["_reconcile.fenced.ORDERS"]
    assert _info(server, "west")["state"]["last_seq"] >= 30


def test_a_failover_the_standby_account_has_no_room_for_is_refused(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The standby account allows one consumer per stream (``max_consumers``); the pair
    declares two: the failover is refused before anything changes, as apply refuses a
    plan the account cannot hold (docs/capacity.md). Both accounts counted after."""
    limited = {**ACCOUNTS["WEST"], "jetstream": {"max_consumers": 1}}
    server = server_factory(config={"accounts": {**ACCOUNTS, "WEST": limited}})
    two = ORDERS + "---\nkind: Consumer\nstream: ORDERS\nname: billing\nack_policy: explicit\n"
    secrets = _project(tmp_path, server, two)
    for env in ("east", "west"):
        done = reconcile("apply", "--env", env, "--yes", cwd=tmp_path, env=secrets)
        assert done.returncode == 0, done.stdout + done.stderr
        if env == "east":
            run(_publish(_url(server, "east"), "orders.new", 30))
    wait_for(lambda: _info(server, "west")["state"]["last_seq"] == 30)

    result = reconcile(
        "failover", "--from", "east", "--to", "west", "--yes", cwd=tmp_path, env=secrets
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "orders.yaml:17" in result.stderr and "billing" in result.stderr, result.stderr
    east, west = _info(server, "east"), _info(server, "west")
    assert east["config"]["subjects"] == ["orders.>"]  # not fenced
    assert west["config"]["mirror"]["name"] == "ORDERS"  # not promoted
    assert east["state"]["last_seq"] == 30 and west["state"]["last_seq"] == 30
    names = run(_request(_url(server, "west"), "$JS.API.CONSUMER.NAMES.ORDERS", {}))
    assert not names.get("consumers")
    run(_publish(_url(server, "east"), "orders.new", 1))  # east still acknowledges
    assert _info(server, "east")["state"]["last_seq"] == 31


def test_a_clustered_standby_keeps_no_window_and_its_failover_waits_for_none(
    tmp_path: Path,
) -> None:
    """A clustered JetStream keeps no ``duplicate_window`` on a mirror (dropped at its
    create and at each update: docs/jetstream-notes.md), so the failover's update giving
    it back is dropped too: the failover says the mirror knows no id and fences without
    waiting for a window it does not have (before, it waited up to the whole window, 2 m,
    for nothing). The promoted stream, no mirror any more, gets the window."""
    cluster = Cluster(tmp_path / "cluster")
    for node in cluster.nodes:  # the cluster's own readiness check connects as east
        node.settings.update(accounts=ACCOUNTS, no_auth_user="east")
    cluster.start()
    try:
        server = cluster.nodes[0]
        (tmp_path / "project").mkdir()
        secrets = _project(tmp_path / "project", server, ORDERS)
        for env in ("east", "west"):
            done = reconcile("apply", "--env", env, "--yes", cwd=tmp_path / "project", env=secrets)
            assert done.returncode == 0, done.stdout + done.stderr
            if env == "east":
                run(_publish(_url(server, "east"), "orders.new", 30))
        wait_for(lambda: _info(server, "west")["state"]["last_seq"] == 30)
        assert not _info(server, "west")["config"].get("duplicate_window")  # not kept
        # so the standby's plan does not ask for it: it showed `duplicate_window: 0s ->
        # 2m` at every plan (the agent healing it at every cycle), which apply made and
        # the server dropped
        again = reconcile("plan", "--env", "west", cwd=tmp_path / "project", env=secrets)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "No changes" in again.stdout and "duplicate_window" not in again.stdout

        result = reconcile(
            "failover",
            "--from",
            "east",
            "--to",
            "west",
            "--yes",
            cwd=tmp_path / "project",
            env=secrets,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "did not keep the mirror's duplicate_window" in result.stderr, result.stderr
        west = _info(server, "west")["config"]
        assert west.get("mirror") is None and west["duplicate_window"] == 120_000_000_000
        assert _sent(_url(server, "west"), "on-west")["seq"] == 31
        assert _sent(_url(server, "west"), "on-west").get("duplicate") is True
    finally:
        cluster.stop()
