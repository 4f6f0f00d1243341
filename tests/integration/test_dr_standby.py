"""A stream's declared standby (docs/dr.md): two JetStream domains joined by a leafnode,
a project with one environment each; the standby environment plans a mirror."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, joined_domains, run
from test_lifecycle import _action, _info, _publish, _request

ORDERS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_age: 7d
standby:
  primary: east
  environment: west
---
kind: Consumer
stream: ORDERS
name: shipper
ack_policy: explicit
"""


def standby_stream(
    *lines: str,
    name: str = "ORDERS",
    subjects: str = "orders.>",
    primary: str = "east",
    environment: str = "west",
) -> str:
    """The spec text of stream ``name`` on ``subjects`` with a standby (writes go to
    ``primary``, the mirror is kept in ``environment``), ``lines`` between the two."""
    body = "".join(f"{line}\n" for line in lines)
    return (
        f'kind: Stream\nname: {name}\nsubjects: ["{subjects}"]\n{body}'
        f"standby:\n  primary: {primary}\n  environment: {environment}\n"
    )


#: A stream without a standby, and ORDERS's consumer, as spec texts.
AUDIT = 'kind: Stream\nname: AUDIT\nsubjects: ["audit.>"]\n'
SHIPPER = "kind: Consumer\nstream: ORDERS\nname: shipper\nack_policy: explicit\n"


def dr_project(root: Path, east: NatsServer, west: NatsServer, specs: str = ORDERS) -> Path:
    """A project with environments east and west, each its own domain, and ``specs``."""
    (root / "specs").mkdir(parents=True, exist_ok=True)
    (root / "specs" / "orders.yaml").write_text(specs, encoding="utf-8")
    (root / "reconcile.yaml").write_text(
        "owner: shop\nspecs: [specs]\nenvironments:\n"
        f"  east:\n    servers: '{east.url}'\n    domain: east\n"
        f"  west:\n    servers: '{west.url}'\n    domain: west\n",
        encoding="utf-8",
    )
    return root


@pytest.fixture
def pair(server_factory: Callable[..., NatsServer]) -> tuple[NatsServer, NatsServer]:
    return joined_domains(server_factory)


def wait_for(check: Callable[[], bool], *, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def last_seq(server: NatsServer, stream: str = "ORDERS") -> int:
    return int(_info(server.url, stream)["state"]["last_seq"])


def consumers(server: NatsServer, stream: str = "ORDERS") -> list[str]:
    reply: dict[str, Any] = run(_request(server.url, f"$JS.API.CONSUMER.NAMES.{stream}", {}))
    return list(reply.get("consumers") or [])


def link(west: NatsServer, *, up: bool, leafnodes: dict[str, Any]) -> None:
    """West restarted with (up) or without its leafnode link to east."""
    if up:
        west.settings["leafnodes"] = leafnodes
    else:
        west.settings.pop("leafnodes", None)
    west.restart()


def applied(root: Path, env: str) -> None:
    result = reconcile("apply", "--env", env, "--yes", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr


def mirrored(
    server_factory: Callable[..., NatsServer], tmp_path: Path, count: int, specs: str = ORDERS
) -> tuple[NatsServer, NatsServer, Path]:
    """Two JetStream domains joined by a leafnode, the DR project declaring ``specs``
    applied in east, ``count`` messages published there, then west applied and its
    mirror caught up: east, west and the project's root."""
    east, west = joined_domains(server_factory)
    root = dr_project(tmp_path, east, west, specs)
    applied(root, "east")
    run(_publish(east.url, "orders.new", count))
    applied(root, "west")
    wait_for(lambda: last_seq(west) == count)
    return east, west, root


def test_the_standby_environment_keeps_a_mirror_without_subjects_or_consumers(
    pair: tuple[NatsServer, NatsServer], tmp_path: Path
) -> None:
    east, west = pair
    root = dr_project(tmp_path, east, west)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 20))
    applied(root, "west")

    mirror = _info(west.url, "ORDERS")["config"]
    assert mirror["mirror"]["name"] == "ORDERS"
    assert mirror["mirror"]["external"]["api"] == "$JS.east.API"
    assert not mirror.get("subjects")
    assert mirror["metadata"]["io.jetstream-gitops/owner"] == "shop"
    wait_for(lambda: last_seq(west) == 20)
    assert consumers(west) == []  # created by a failover, from the primary's positions
    assert consumers(east) == ["shipper"]

    for env in ("east", "west"):  # both converge: nothing more to do on either side
        result = reconcile("plan", "--env", env, "--detailed-exitcode", cwd=root)
        assert result.returncode == 0, result.stdout + result.stderr


def test_a_standby_naming_an_unknown_environment_is_an_error_at_its_line(
    pair: tuple[NatsServer, NatsServer], tmp_path: Path
) -> None:
    east, west = pair
    root = dr_project(tmp_path, east, west, ORDERS.replace("environment: west", "environment: wst"))
    result = reconcile("plan", "--env", "east", cwd=root)
    assert result.returncode == 1
    assert "orders.yaml:7: standby.environment" in result.stderr + result.stdout
    assert "wst" in result.stderr + result.stdout


def test_a_standby_whose_primary_has_no_domain_needs_its_api(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "orders.yaml").write_text(ORDERS, encoding="utf-8")
    (tmp_path / "reconcile.yaml").write_text(
        "owner: shop\nspecs: [specs]\nenvironments:\n"
        "  east:\n    servers: nats://127.0.0.1:1\n"
        "  west:\n    servers: nats://127.0.0.1:1\n",
        encoding="utf-8",
    )
    result = reconcile("plan", "--env", "west", cwd=tmp_path)
    assert result.returncode == 1
    output = result.stderr + result.stdout
    assert "orders.yaml:5: standby.api" in output


def test_plan_and_drift_show_each_pairs_health_read_on_both_sides(
    pair: tuple[NatsServer, NatsServer], tmp_path: Path
) -> None:
    east, west = pair
    critical = ORDERS.replace(
        "max_age: 7d\n", "max_age: 7d\nmetadata:\n  io.nats.monitor.lag-critical: '3'\n"
    )
    root = dr_project(tmp_path, east, west, critical)
    applied(root, "east")
    run(_publish(east.url, "orders.new", 20))
    applied(root, "west")
    wait_for(lambda: last_seq(west) == 20)
    healthy = reconcile("plan", "--env", "west", cwd=root)
    assert "standby ORDERS (east -> west): last seq origin 20, mirror 20, lag 0" in healthy.stderr
    assert "healthy" in healthy.stderr and "NOT healthy" not in healthy.stderr

    leafnodes = dict(west.settings["leafnodes"])
    link(west, up=False, leafnodes=leafnodes)
    run(_publish(east.url, "orders.new", 5))
    assert _info(west.url, "ORDERS")["mirror"]["lag"] == 0  # what the mirror itself says
    for command in ("plan", "drift"):
        stale = reconcile(command, "--env", "east", cwd=root)
        assert "last seq origin 25, mirror 20, lag 5" in stale.stderr, stale.stderr
        assert "NOT healthy" in stale.stderr
        assert "no contact with the origin" in stale.stderr
        assert "io.nats.monitor.lag-critical 3" in stale.stderr

    east.stop()
    unread = reconcile("plan", "--env", "west", cwd=root)
    assert "east could not be read" in unread.stderr, unread.stderr


def test_a_saved_plan_of_the_standby_environment_creates_exactly_the_mirror(
    pair: tuple[NatsServer, NatsServer], tmp_path: Path
) -> None:
    east, west = pair
    root = dr_project(tmp_path / "repo", east, west)
    applied(root, "east")
    saved = tmp_path / "west-plan.json"
    made = reconcile("plan", "--env", "west", "--out", str(saved), cwd=root)
    assert made.returncode == 0, made.stdout + made.stderr
    done = reconcile("apply", str(saved), "--env", "west", "--yes", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _info(west.url, "ORDERS")["config"]["mirror"]["external"]["api"] == "$JS.east.API"


def test_the_action_applies_the_standby_environment_as_the_cli_does(
    pair: tuple[NatsServer, NatsServer], tmp_path: Path
) -> None:
    east, west = pair
    root = dr_project(tmp_path, east, west)
    applied(root, "east")
    code, said = _action("", root, root / "specs", "apply", environment="west", path="")
    assert code == 0, said
    assert _info(west.url, "ORDERS")["config"]["mirror"]["external"]["api"] == "$JS.east.API"
    code, said = _action("", root, root / "specs", "plan", environment="west", path="")
    assert code == 0 and "standby ORDERS (east -> west)" in said  # the pair's health


def test_policy_and_lifecycle_cover_the_mirror(
    pair: tuple[NatsServer, NatsServer], tmp_path: Path
) -> None:
    east, west = pair
    protected = ORDERS.replace("max_age: 7d\n", "max_age: 7d\nlifecycle: {prevent_destroy: true}\n")
    root = dr_project(tmp_path, east, west, protected)
    (root / "policy.yaml").write_text(
        "rules:\n  - id: west-mirrors-only\n    level: deny\n    message: west keeps mirrors\n"
        "    kinds: [Stream]\n    when: resource.environment == 'west'\n"
        "    expr: has(resource.desired.mirror)\n",
        encoding="utf-8",
    )
    applied(root, "east")
    code = reconcile("plan", "--env", "west", "--policy", "policy.yaml", cwd=root).returncode
    assert code == 0  # the rule sees the mirror west plans
    east_rule = (root / "policy.yaml").read_text(encoding="utf-8").replace("'west'", "'east'")
    (root / "east-policy.yaml").write_text(east_rule, encoding="utf-8")
    code = reconcile("plan", "--env", "east", "--policy", "east-policy.yaml", cwd=root).returncode
    assert code == 3  # and east's stream is no mirror: the same rule denies it there
    applied(root, "west")
    metadata = _info(west.url, "ORDERS")["config"]["metadata"]
    assert "io.jetstream-gitops/prevent-destroy" in metadata  # the spec's lifecycle, recorded
