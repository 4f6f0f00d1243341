"""The four front doors (the CLI, the GitHub Action, the Pulumi provider and the engine
API an agent calls) give the same plan and the same refusal for the same specs and the
same live state, on a real nats-server: they all go through one pipeline
(``execution.requests``, ``execution.run``) and one executor refusal
(``execution.apply.check_allowed``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_capacity import USER, MiB, census, limited, stream_yaml, write_specs
from test_capacity import _publish as _capacity_publish

from reconciler.errors import PolicyDenied, RefusedPlan, SpecError
from reconciler.execution import run as engine
from reconciler.execution.requests import ApplyRequest, PlanRequest, Quiet
from reconciler.jetstream import ConnectionOptions, open_client

pytestmark = pytest.mark.integration

STREAM = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_msgs: {max_msgs}
"""
HEADLINE = "refusing to apply: 1 step(s) would destroy data; nothing was changed."

Door = Callable[[NatsServer, Path], tuple[list[Any], str, list[str]]]


async def _publish(url: str, count: int) -> None:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        for index in range(count):
            await nc.request("orders.new", str(index).encode(), timeout=5)
    finally:
        await nc.close()


async def _messages(url: str) -> int:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        reply = await nc.request("$JS.API.STREAM.INFO.ORDERS", b"", timeout=5)
        return int(json.loads(reply.data)["state"]["messages"])
    finally:
        await nc.close()


def normalised(plan_json: dict[str, Any]) -> list[Any]:
    """What a plan decides, without where it was read from (file names, server)."""
    return [
        (c["action"], c["kind"], c["name"], c["destructive"], [x["summary"] for x in c["loss"]])
        for c in plan_json["changes"]
    ]


def refusal_lines(text: str) -> tuple[str, list[str]]:
    """The refusal's headline (up to its way out) and its detail lines."""
    lines = [line for line in text.splitlines() if line.strip()]
    first = next(i for i, line in enumerate(lines) if "refusing to apply" in line)
    headline = lines[first][lines[first].index("refusing") :]
    return headline, [line.strip() for line in lines[first + 1 :] if line.startswith("  ")]


def engine_door(server: NatsServer, specs: Path) -> tuple[list[Any], str, list[str]]:
    wanted = PlanRequest.of([specs], ConnectionOptions(servers=server.url))
    plan = run(engine.plan_for(wanted))
    with pytest.raises(RefusedPlan) as refused:
        run(engine.apply_for(ApplyRequest(plan=wanted, lock_timeout=None)))
    return normalised(plan.to_json()), refused.value.headline, list(refused.value.details)


def cli_door(server: NatsServer, specs: Path) -> tuple[list[Any], str, list[str]]:
    where = ("--server", server.url)
    planned = reconcile("plan", str(specs), *where, "--format", "json", cwd=specs.parent)
    assert planned.returncode == 0, planned.stderr
    applied = reconcile("apply", str(specs), *where, "--yes", "--no-lock", cwd=specs.parent)
    assert applied.returncode == 1, applied.stderr
    headline, details = refusal_lines(applied.stderr)
    return normalised(json.loads(planned.stdout)), headline, details


def _action(
    server: NatsServer | None, specs: Path, mode: str, **inputs: str
) -> tuple[int, dict[str, str]]:
    temp = specs.parent / f"runner-{mode}"
    temp.mkdir()
    output = temp / "output"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(specs.parent),
        "GITHUB_WORKSPACE": str(specs.parent),
        "GITHUB_OUTPUT": str(output),
        "GITHUB_STEP_SUMMARY": str(temp / "summary.md"),
        "RUNNER_TEMP": str(temp),
        "INPUT_PATH": specs.name,
        "INPUT_SERVER": server.url if server else "",
        "INPUT_MODE": mode,
    } | {f"INPUT_{name.upper()}": value for name, value in inputs.items()}
    done = subprocess.run(
        [sys.executable, "-m", "action"],
        cwd=specs.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    outputs: dict[str, str] = {}
    lines = output.read_text().split("\n")
    i = 0
    while i < len(lines):
        if lines[i]:
            name, _, delimiter = lines[i].partition("<<")
            end = lines.index(delimiter, i + 1)
            outputs[name] = "\n".join(lines[i + 1 : end])
            i = end
        i += 1
    return done.returncode, outputs | {"stdout": done.stdout}


def action_door(server: NatsServer, specs: Path) -> tuple[list[Any], str, list[str]]:
    code, planned = _action(server, specs, "plan")
    assert code == 0, planned
    plan_json = json.loads(Path(planned["plan-json"]).read_text())
    code, applied = _action(server, specs, "apply")
    assert code == 1
    headline, details = refusal_lines(applied["stdout"])
    return normalised(plan_json), headline, details


def pulumi_door(server: NatsServer, specs: Path) -> tuple[list[Any], str, list[str]]:
    """The provider's methods as the Pulumi engine calls them: read (refresh), diff
    (preview), update (up). Its preview says update or replace per resource."""
    from pulumi_provider import JetStreamProvider

    provider = JetStreamProvider(connection={"servers": server.url})
    inputs = {"kind": "Stream", "name": "ORDERS", "subjects": ["orders.>"], "max_msgs": 5}
    news = provider.check({}, inputs).inputs
    outputs = provider.read("ORDERS", news).outs
    diff = provider.diff("ORDERS", outputs, news)
    action = "replace" if diff.replaces else "update" if diff.changes else "unchanged"
    with pytest.raises(RefusedPlan) as refused:
        provider.update("ORDERS", outputs, news)
    return [(action, "Stream", "ORDERS")], refused.value.headline, list(refused.value.details)


DOORS: dict[str, Door] = {
    "engine": engine_door,
    "cli": cli_door,
    "action": action_door,
    "pulumi": pulumi_door,
}


@pytest.fixture
def live(clean_server: NatsServer, tmp_path: Path) -> tuple[NatsServer, Path]:
    """ORDERS applied with max_msgs 100 and holding 20 messages; the specs now ask for
    max_msgs 5 (an update that deletes 15 of them)."""
    specs = tmp_path / "ws" / "specs"
    specs.mkdir(parents=True)
    (specs / "orders.yaml").write_text(STREAM.format(max_msgs=100), encoding="utf-8")
    options = ConnectionOptions(servers=clean_server.url)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(clean_server.url, 20))
    assert run(_messages(clean_server.url)) == 20
    (specs / "orders.yaml").write_text(STREAM.format(max_msgs=5), encoding="utf-8")
    return clean_server, specs


def _expected(server: NatsServer, specs: Path) -> tuple[list[Any], str, list[str]]:
    return engine_door(server, specs)


@pytest.mark.parametrize("door", sorted(DOORS))
def test_every_front_door_gives_the_same_plan_and_refusal(
    door: str, live: tuple[NatsServer, Path]
) -> None:
    server, specs = live
    plan, headline, details = _expected(server, specs)
    assert plan == [("update", "Stream", "ORDERS", True, [plan[0][4][0]])]
    assert headline.startswith(HEADLINE)
    assert details and details[0].startswith("update Stream ORDERS: holds 20 messages")

    door_plan, door_headline, door_details = DOORS[door](server, specs)
    if door == "pulumi":  # its preview names the action per resource, not the losses
        assert door_plan == [step[:3] for step in plan]
    else:
        assert door_plan == plan
    assert door_headline.startswith(HEADLINE)
    assert door_details == details
    assert run(_messages(server.url)) == 20  # refused: nothing was changed


def test_every_front_door_validates_before_it_connects(tmp_path: Path) -> None:
    """An invalid spec is refused at its line by the engine before any server is asked
    (the CLI and the Action call the same function)."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "bad.yaml").write_text("kind: Stream\nname: ORDERS\nmax_msgs: many\n")
    nowhere = ConnectionOptions(servers="nats://127.0.0.1:1")
    requests = [PlanRequest.of([specs], nowhere, env="a"), PlanRequest.of([specs], nowhere)]

    async def plan_all() -> list[Any]:
        return [p async for p in engine.plan_environments(requests)]

    with pytest.raises(SpecError, match=r"bad\.yaml:3"):
        asyncio.run(plan_all())


def test_every_environment_is_validated_before_any_is_planned(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A broken overlay in environment prod stops the CLI's ``plan --all-envs`` and the
    Action's ``environment: all`` before any server is asked: the Action planned dev
    first, then failed on prod."""
    root = tmp_path / "ws"
    specs = root / "specs"
    specs.mkdir(parents=True)
    (specs / "orders.yaml").write_text(STREAM.format(max_msgs=100), encoding="utf-8")
    (root / "overlays").mkdir()
    (root / "overlays" / "prod.yaml").write_text("kind: Stream\nname: ORDERS\nmax_msgs: many\n")
    (root / "reconcile.yaml").write_text(
        "owner: shop\nspecs: [specs]\nenvironments:\n"
        f"  dev: {{servers: '{clean_server.url}'}}\n"
        f"  prod: {{servers: '{clean_server.url}', overlays: [overlays/prod.yaml]}}\n"
    )
    code, outputs = _action(None, specs, "plan", path="", environment="all")
    assert code == 1
    assert outputs["summary"].startswith("failed: ") and "prod.yaml:3" in outputs["summary"]
    assert "using nats-server" not in outputs["stdout"]  # dev was not planned either
    cli = reconcile("plan", "--all-envs", cwd=root)
    assert cli.returncode == 1 and "prod.yaml:3" in cli.stderr
    assert "using nats-server" not in cli.stderr


POLICY = """\
rules:
  - id: loses-at-most-10
    level: deny
    message: no step loses more than 10 messages
    expr: step.loss_messages <= 10
"""
DENIED = "policy rule(s) loses-at-most-10 deny this plan"


def _policy_refusal(door: str, server: NatsServer, specs: Path, policy: Path) -> str:
    """What ``door`` says when it refuses the apply (data loss allowed: only the policy
    stops it), after checking its exit status (3) where it has one."""
    if door == "engine":
        wanted = PlanRequest.of([specs], ConnectionOptions(servers=server.url), policies=(policy,))
        request = ApplyRequest(plan=wanted, allow_data_loss=True, lock_timeout=None)
        with pytest.raises(PolicyDenied) as denied:
            run(engine.apply_for(request))
        return str(denied.value)
    if door == "cli":
        flags = ("--server", server.url, "--policy", str(policy))
        planned = reconcile("plan", str(specs), *flags, cwd=specs.parent)
        assert planned.returncode == 3 and DENIED in planned.stderr
        applied = reconcile(
            "apply", str(specs), *flags, "--allow-data-loss", "--yes", "--no-lock", cwd=specs.parent
        )
        assert applied.returncode == 3, applied.stderr
        return applied.stderr
    if door == "action":
        code, planned = _action(server, specs, "plan", policy=str(policy))
        assert code == 3 and DENIED in planned["stdout"]
        code, applied = _action(server, specs, "apply", policy=str(policy), allow_data_loss="true")
        assert code == 3
        return applied["stdout"]
    from pulumi_provider import JetStreamProvider

    provider = JetStreamProvider(connection={"servers": server.url}, policies=[str(policy)])
    inputs = {"kind": "Stream", "name": "ORDERS", "subjects": ["orders.>"], "max_msgs": 5}
    news = provider.check({}, {**inputs, "allow_destroy": True}).inputs
    outputs = provider.read("ORDERS", news).outs
    with pytest.raises(PolicyDenied) as denied:
        provider.update("ORDERS", outputs, news)
    return str(denied.value)


@pytest.mark.parametrize("door", sorted(DOORS))
def test_every_front_door_refuses_a_policy_deny_naming_the_rule(
    door: str, live: tuple[NatsServer, Path]
) -> None:
    """A deny rule (no step loses more than 10 messages) against an update deleting 15:
    every door refuses before any step, names the rule and the resource, with data loss
    allowed; the 20 messages are all still there."""
    server, specs = live
    policy = specs.parent / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    said = _policy_refusal(door, server, specs, policy)
    assert f"refusing to apply: {DENIED}" in said
    assert "deny loses-at-most-10: Stream ORDERS (update)" in said
    assert run(_messages(server.url)) == 20  # refused: nothing was changed


# --- Pulumi runs the same stages, scoped to one resource --------------------------------


def _provider(server: NatsServer) -> Any:
    """The Pulumi provider on the capacity tests' limited account (user team)."""
    from pulumi_provider import JetStreamProvider

    return JetStreamProvider(
        connection={"servers": server.url, "user": "team", "password": "s3cret"}
    )


def _pulumi_stream(name: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "Stream", "name": name, "subjects": [f"{name.lower()}.>"], **fields}


def _cli_refusal(server: NatsServer, specs: Path, *flags: str) -> str:
    """``reconcile apply`` of ``specs`` under the apply lock (as Pulumi's changes): its
    stderr after checking that it refused (exit 1) without a traceback."""
    where = ("--server", server.url, *USER, "--yes")
    applied = reconcile("apply", str(specs), *where, *flags, cwd=specs.parent)
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert "Traceback" not in applied.stderr
    return applied.stderr


@pytest.mark.parametrize("limit", ["max_bytes", "max_streams"])
def test_pulumi_refuses_a_create_the_account_cannot_fit_as_the_cli_does(
    limit: str, server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """ORDERS (40 MiB, 25 messages) and the apply lock's bucket on an account of 64 MiB
    and 3 streams; a stream of 30 MiB (max_bytes), or a fourth stream (max_streams),
    does not fit. Pulumi's create (under the lock, as ``reconcile apply``) is refused by
    the same capacity check, with the same sentence, as ``reconcile apply``; nothing is
    created and no message is lost."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB, max_streams=3)
    first = write_specs(tmp_path / "first", stream_yaml("ORDERS", "40MiB"))
    if limit == "max_streams":
        (first / "more.yaml").write_text(stream_yaml("AUDIT", "1MiB"))
    where = ("--server", server.url, *USER, "--yes")
    assert reconcile("apply", str(first), *where, cwd=tmp_path).returncode == 0
    asyncio.run(_capacity_publish(server, "orders.new", 25))
    before = census(server)
    extra = stream_yaml("EXTRA", "30MiB" if limit == "max_bytes" else "1MiB")
    (first / "extra.yaml").write_text(extra)
    said = _cli_refusal(server, first)

    provider = _provider(server)
    size = "30MiB" if limit == "max_bytes" else "1MiB"
    news = provider.check({}, _pulumi_stream("EXTRA", storage="file", max_bytes=size)).inputs
    with pytest.raises(SpecError) as refused:
        provider.create(news)

    problems = refused.value.problems
    assert problems and all(p.message in said for p in problems)
    assert "Stream EXTRA" in problems[0].message
    assert ("64.0 MiB" if limit == "max_bytes" else "the account allows 3") in said
    assert census(server) == before  # nothing created, every message kept


async def _fill(server: NatsServer, subject: str, count: int, *, size: int) -> None:
    """``count`` messages of ``size`` bytes on the limited account (user team)."""
    nc = await nats.connect(server.url, user="team", password="s3cret")
    try:
        js = nc.jetstream()
        for index in range(count):
            await js.publish(subject, b"x" * size + str(index).encode())
    finally:
        await nc.close()


def test_pulumi_refuses_a_migration_the_account_has_no_room_for_as_the_cli_does(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """A migration (``migrate: true``) of a stream holding 1.5 MiB on an account with
    1.5 MiB free: the room check refuses it in Pulumi as in ``reconcile apply
    --migrate``, naming the numbers; every message is still there."""
    server = limited(server_factory, max_file=3 * MiB, max_mem=64 * MiB)
    specs = write_specs(tmp_path / "specs", stream_yaml("ORDERS", None))
    where = ("--server", server.url, *USER, "--yes", "--no-lock")
    assert reconcile("apply", str(specs), *where, cwd=tmp_path).returncode == 0
    asyncio.run(_fill(server, "orders.new", 1500, size=1000))
    before = census(server)
    write_specs(specs, stream_yaml("ORDERS", None, extra="retention: workqueue\n"))
    said = _cli_refusal(server, specs, "--migrate")

    provider = _provider(server)
    inputs = _pulumi_stream("ORDERS", storage="file")
    outputs = provider.read("ORDERS", provider.check({}, inputs).inputs).outs
    news = provider.check({}, {**inputs, "retention": "workqueue", "migrate": True}).inputs
    with pytest.raises(SpecError) as refused:
        provider.update("ORDERS", outputs, news)

    message = refused.value.problems[0].message
    assert "of file storage for its copies; the account has" in message
    assert message in said
    assert census(server) == before


def _prune_loss(server: NatsServer, tmp_path: Path, name: str) -> tuple[str, list[str]]:
    """What ``reconcile plan --prune`` says deleting ``name`` destroys (its specs gone)."""
    empty = write_specs(tmp_path / "pruned", stream_yaml("OTHER", "1MiB"))
    where = ("--server", server.url, *USER, "--prune", "--format", "json")
    planned = reconcile("plan", str(empty), *where, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    changes = json.loads(planned.stdout)["changes"]
    (step,) = [c for c in changes if c["action"] == "delete" and name in (c["name"], c["stream"])]
    return step["action"], [loss["summary"] for loss in step["loss"]]


def test_pulumi_destroy_refuses_with_the_loss_the_cli_plan_shows(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Deleting ORDERS (20 messages): Pulumi's destroy is the planner's delete step, so
    its refusal names the loss ``reconcile plan --prune`` shows for it, word for word
    (it was ``holds 20 message(s)``, made by hand); nothing is deleted."""
    server = limited(server_factory, max_file=64 * MiB, max_mem=8 * MiB)
    specs = write_specs(tmp_path / "specs", stream_yaml("ORDERS", "1MiB"))
    where = ("--server", server.url, *USER, "--yes", "--no-lock")
    assert reconcile("apply", str(specs), *where, cwd=tmp_path).returncode == 0
    asyncio.run(_capacity_publish(server, "orders.new", 20))
    action, losses = _prune_loss(server, tmp_path, "ORDERS")

    provider = _provider(server)
    inputs = provider.check({}, _pulumi_stream("ORDERS", storage="file", max_bytes="1MiB")).inputs
    outputs = provider.read("ORDERS", inputs).outs
    with pytest.raises(RefusedPlan) as refused:
        provider.delete("ORDERS", outputs)

    assert refused.value.details == (f"{action} Stream ORDERS: {'; '.join(losses)}",)
    assert "holds 20 messages" in losses[0]
    assert census(server) == {"ORDERS": 20}


def test_pulumi_still_applies_for_a_user_who_may_not_list_the_streams(
    server_factory: Callable[..., NatsServer],
) -> None:
    """A user denied ``$JS.API.STREAM.LIST`` (a permission scoped to its own streams):
    Pulumi's read falls back to the resource's own stream, says so, and the create is
    made (it was before the capacity check needed the list)."""
    from pulumi_provider import JetStreamProvider, operations
    from pulumi_provider.inputs import to_spec

    scoped = {
        "user": "scoped",
        "password": "sc0ped",
        "permissions": {"publish": {"deny": ["$JS.API.STREAM.LIST"]}},
    }
    server = server_factory(users=[scoped])
    provider = JetStreamProvider(
        connection={"servers": server.url, "user": "scoped", "password": "sc0ped"}
    )
    news = provider.check({}, _pulumi_stream("ORDERS")).inputs
    provider.create(news)

    said: list[str] = []

    class Notices(Quiet):
        def notice(self, message: str) -> None:
            said.append(message)

    async def again() -> None:
        options = ConnectionOptions(servers=server.url, user="scoped", password="sc0ped")
        async with open_client(options) as client:
            await operations.converge(client, to_spec(news), observer=Notices())

    run(again())
    assert run(_messages_as(server, "scoped", "sc0ped")) == 0  # the stream is there
    assert any("may not list the account's streams" in line for line in said)


async def _messages_as(server: NatsServer, user: str, password: str) -> int:
    nc = await nats.connect(server.url, user=user, password=password)
    try:
        reply = await nc.request("$JS.API.STREAM.INFO.ORDERS", b"", timeout=5)
        return int(json.loads(reply.data)["state"]["messages"])
    finally:
        await nc.close()
