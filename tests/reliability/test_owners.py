"""Owners: --prune deletes only this project's resources, others' are never touched, taking
one over needs --take-over; export and drift respect owners. The CLI as a user runs it,
on a real nats-server; messages are counted after every run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness import cli_env, reconcile, stream_doc, write_specs
from servers import NatsServer, run

from reconciler.jetstream import ConnectionOptions, open_client

pytestmark = pytest.mark.integration


async def _streams(url: str) -> dict[str, dict[str, Any]]:
    async with open_client(ConnectionOptions(servers=url)) as client:
        return {i["config"]["name"]: i for i in await client.list_streams()}


def streams(server: NatsServer) -> dict[str, dict[str, Any]]:
    return {n: i for n, i in run(_streams(server.url)).items() if not n.startswith("KV_")}


async def _publish(url: str, subject: str, count: int) -> None:
    async with open_client(ConnectionOptions(servers=url)) as client:
        for i in range(count):
            await client.publish(subject, str(i).encode())


def cli(server: NatsServer, *args: str) -> Any:
    return reconcile(*args, "--server", server.url, "--lock-timeout", "10")


def plan_json(server: NatsServer, *args: str) -> dict[str, Any]:
    done = reconcile("plan", *args, "--server", server.url, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def two_teams(clean_server: NatsServer, tmp_path: Path) -> tuple[Path, Path]:
    team_a = write_specs(tmp_path / "a", [stream_doc("A_ORDERS")])
    team_b = write_specs(tmp_path / "b", [stream_doc("B_EVENTS")])
    assert cli(clean_server, "apply", "-y", str(team_a), "--owner", "team-a").returncode == 0
    as_b = cli_env(RECONCILE_OWNER="team-b")  # the owner from the environment
    done = reconcile("apply", "-y", str(team_b), "--server", clean_server.url, env=as_b)
    assert done.returncode == 0, done.stderr
    run(_publish(clean_server.url, "b_events.x", 25))
    return team_a, team_b


def test_prune_deletes_only_the_owners_resources(
    clean_server: NatsServer, two_teams: tuple[Path, Path], figures
) -> None:
    team_a, _ = two_teams
    plan = plan_json(clean_server, str(team_a), "--owner", "team-a", "--prune")
    assert plan["changes"] == [] and plan["orphans"] == []
    assert plan["foreign"] == [
        {"kind": "Stream", "name": "B_EVENTS", "stream": None, "owner": "team-b"}
    ]
    done = cli(clean_server, "apply", "-y", str(team_a), "--owner", "team-a", "--prune",
               "--allow-data-loss")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert streams(clean_server)["B_EVENTS"]["state"]["messages"] == 25
    # Without any owner the default owner's plan lists both teams' streams as foreign.
    empty = write_specs(team_a.parent / "none", [])
    default = plan_json(clean_server, str(empty), "--prune")
    assert {f["owner"] for f in default["foreign"]} == {"team-a", "team-b"}
    assert default["changes"] == []
    figures.add("foreign_kept")
    figures.add("messages_checked", 25)


def test_declaring_another_owners_resource_needs_take_over(
    clean_server: NatsServer, two_teams: tuple[Path, Path], tmp_path: Path
) -> None:
    grab = write_specs(tmp_path / "grab", [stream_doc("B_EVENTS", description="mine now")])
    refused = cli(clean_server, "apply", "-y", str(grab), "--owner", "team-a")
    assert refused.returncode == 1
    assert "managed by owner 'team-b'" in refused.stderr and "--take-over" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert streams(clean_server)["B_EVENTS"]["config"].get("description") is None
    taken = cli(clean_server, "apply", "-y", str(grab), "--owner", "team-a", "--take-over")
    assert taken.returncode == 0, taken.stderr
    info = streams(clean_server)["B_EVENTS"]
    assert info["config"]["metadata"]["io.jetstream-gitops/owner"] == "team-a"
    assert info["state"]["messages"] == 25


def test_resources_with_the_old_marker_belong_to_the_default_owner(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    legacy = {"io.jetstream-gitops/managed-by": "reconcile"}  # written before owners

    async def create() -> None:
        async with open_client(ConnectionOptions(servers=clean_server.url)) as client:
            await client.create_stream({"name": "OLD", "subjects": ["old.>"], "metadata": legacy})

    run(create())
    specs = write_specs(tmp_path / "s", [stream_doc("OLD")])
    assert plan_json(clean_server, str(specs))["changes"] == []  # default owner: unchanged
    other = plan_json(clean_server, str(write_specs(tmp_path / "t", [])), "--owner", "x", "--prune")
    assert other["foreign"][0]["owner"] == "default" and other["changes"] == []


def test_drift_reports_other_owners_as_foreign_not_as_drift(
    clean_server: NatsServer, two_teams: tuple[Path, Path]
) -> None:
    team_a, _ = two_teams
    done = reconcile("drift", str(team_a), "--owner", "team-a", "--format", "json",
                     "--server", clean_server.url)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    foreign = [r for r in report["resources"] if r["status"] == "foreign"]
    assert [(r["name"], r["owner"]) for r in foreign] == [("B_EVENTS", "team-b")]
    assert report["summary"]["drift"] == 0


def test_an_owner_name_is_checked_before_anything_runs(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = write_specs(tmp_path / "s", [stream_doc("X")])
    done = cli(clean_server, "apply", "-y", str(specs), "--owner", "../evil name")
    assert done.returncode == 1 and "--owner" in done.stderr and "Traceback" not in done.stderr
    assert "X" not in streams(clean_server)
