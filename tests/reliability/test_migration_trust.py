"""A migration record is data, never authority: forged records move no message.

Anyone who can create a stream can create ``MIGRATING_<stream>`` with an
``io.jetstream-gitops/migration`` record in its metadata. Before, a plain ``apply``
"finished" such a migration: ORDERS went from 100 messages to 0, and one owner's apply
migrated another owner's stream. Here an attacker forges records with the raw API, and
every apply (plain, ``--migrate``, another owner's, one that does not declare the
stream) leaves every message where it was, counted. A genuine interrupted migration
still resumes with ``--migrate``; when the specs changed after it stopped the person
chooses (``--migration resume|rollback|continue``) and each way keeps every message.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from migration_helpers import api, dump, killed_migration_script, publish_many
from servers import NatsServer, options, run, write

from reconciler.errors import ReconcileError, RefusedPlan, SpecError
from reconciler.execution import run as engine
from reconciler.identity import INTERNAL_STREAMS
from reconciler.jetstream import open_client
from reconciler.model.migration import RECORD_KEY, temp_name
from reconciler.planning.plan import Ownership
from reconciler.planning.steps import Migrate

pytestmark = pytest.mark.integration

ORDERS = """
kind: Stream
name: ORDERS
subjects: ["orders.>"]
storage: {storage}
{extra}
---
kind: Consumer
stream: ORDERS
name: BILLING
ack_policy: explicit
"""
PAYMENTS = """
kind: Stream
name: PAYMENTS
subjects: ["payments.>"]
"""
OTHER = """
kind: Stream
name: OTHER
subjects: ["other.>"]
"""
TEMP = temp_name("ORDERS")


def orders(tmp_path: Path, storage: str = "file", extra: str = "", name: str = "o.yaml") -> Path:
    return write(tmp_path, ORDERS.format(storage=storage, extra=extra), name)


def count(server: NatsServer, stream: str) -> int:
    async def go() -> int:
        async with open_client(options(server)) as client:
            info = await client.stream_info(stream)
            return int(info["state"]["messages"])

    return run(go())


def names(server: NatsServer) -> list[str]:
    async def go() -> list[str]:
        async with open_client(options(server)) as client:
            return sorted(n for n in await client.stream_names() if n not in INTERNAL_STREAMS)

    return run(go())


def still_takes_publishes(server: NatsServer, subject: str) -> bool:
    async def go() -> bool:
        nc = await nats.connect(server.url)
        try:
            reply = await nc.request(subject, b"probe", timeout=2)
            return "error" not in json.loads(reply.data)
        finally:
            await nc.close()

    return run(go())


def forge(server: NatsServer, stream: str, body: dict[str, Any], **extra: Any) -> None:
    """What an attacker does with the raw API: a MIGRATING_ stream carrying a record."""
    config = {
        "name": temp_name(stream),
        "subjects": [f"junk.{stream}.>"],
        "metadata": {RECORD_KEY: json.dumps(body)},
        **extra,
    }
    run(api(server, f"STREAM.CREATE.{temp_name(stream)}", config))


def naive_record(stream: str = "ORDERS") -> dict[str, Any]:
    return {
        "stream": stream,
        "phase": "serving",
        "target": {
            "name": stream,
            "subjects": [f"{stream.lower()}.>"],
            "storage": "memory",
            "max_msgs": 1,
            "retention": "limits",
            "discard": "old",
            "num_replicas": 1,
        },
        "subjects": {"subjects": [f"{stream.lower()}.>"]},
        "mirrors": True,
    }


def setup_orders(server: NatsServer, tmp_path: Path) -> tuple[Path, list[Any]]:
    spec = orders(tmp_path)
    assert run(engine.apply([spec], options(server))).ok
    run(publish_many(server, ["orders.a", "orders.b"], 100))
    return spec, run(dump(server, "ORDERS"))


def test_a_forged_record_moves_no_message_whatever_apply_runs(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The issue's 100 -> 0: a record with no owner, phase serving, target max_msgs 1 in
    memory. Plain apply, apply --migrate, another owner's apply and an apply that does
    not declare ORDERS all leave its 100 messages."""
    spec, expected = setup_orders(clean_server, tmp_path)
    forge(clean_server, "ORDERS", naive_record())

    shown = run(engine.plan([spec], options(clean_server), migrate=True))
    (step,) = [s for s in shown.steps if s.stream_name == "ORDERS"]
    assert isinstance(step, Migrate) and step.blocked
    assert f"{TEMP} is not a migration of ORDERS" in step.blocked
    assert "no owner" in step.blocked

    for migrate in (False, True):
        with pytest.raises(RefusedPlan, match="cannot be acted on; nothing was changed"):
            run(engine.apply([spec], options(clean_server), migrate=migrate))
        assert run(dump(clean_server, "ORDERS")) == expected
    with pytest.raises((RefusedPlan, SpecError)):
        run(
            engine.apply(
                [spec], options(clean_server), migrate=True, ownership=Ownership("payments")
            )
        )
    other = write(tmp_path, OTHER, "other.yaml")
    assert run(engine.apply([other], options(clean_server), migrate=True)).ok
    assert run(dump(clean_server, "ORDERS")) == expected
    assert count(clean_server, TEMP) == 0 and TEMP in names(clean_server)
    assert still_takes_publishes(clean_server, "orders.a")
    assert count(clean_server, "ORDERS") == 101


def test_one_owners_apply_does_not_migrate_another_owners_stream(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The issue's PAYMENTS to memory: a record naming PAYMENTS (owner payments) does
    nothing in the default owner's apply, declared there or not."""
    payments = write(tmp_path, PAYMENTS, "p.yaml")
    mine = Ownership("payments")
    assert run(engine.apply([payments], options(clean_server), ownership=mine)).ok
    run(publish_many(clean_server, ["payments.x"], 100))
    expected = run(dump(clean_server, "PAYMENTS"))
    forge(clean_server, "PAYMENTS", {**naive_record("PAYMENTS"), "owner": "default"})
    spec = orders(tmp_path)
    assert run(engine.apply([spec], options(clean_server), migrate=True)).ok
    with pytest.raises((RefusedPlan, SpecError)):
        run(engine.apply([payments], options(clean_server), migrate=True))
    with pytest.raises(RefusedPlan, match="not a migration of PAYMENTS"):
        run(engine.apply([payments], options(clean_server), migrate=True, ownership=mine))
    assert run(dump(clean_server, "PAYMENTS")) == expected
    info = run(api(clean_server, "STREAM.INFO.PAYMENTS"))
    assert info["config"]["storage"] == "file" and info["config"]["max_msgs"] == -1


def bound_record(server: NatsServer, phase: str, target: dict[str, Any]) -> dict[str, Any]:
    """A forger who copies every fact the record is bound to (they can read them all)."""
    info = run(api(server, "STREAM.INFO.ORDERS"))
    return {
        "stream": "ORDERS",
        "phase": phase,
        "target": target,
        "subjects": {"subjects": ["orders.>"]},
        "mirrors": True,
        "owner": "default",
        "origin": info["config"],
        "created": info["created"],
        "stream_created": info["created"],
    }


@pytest.mark.parametrize("phase", ["copy", "handover", "serving", "refill", "cutover"])
@pytest.mark.parametrize("junk", [0, 100], ids=["empty", "junk"])
def test_a_record_bound_by_a_forger_still_deletes_nothing(
    clean_server: NatsServer, tmp_path: Path, phase: str, junk: int
) -> None:
    """The binding facts can be read by anyone who can read the stream, so a forger can
    copy them, and the target the specs declare. Then the executor's own checks stop
    it: no stream is retired unless the temporary stream copies it, and none is deleted
    unless the temporary stream holds every one of its messages (its last one at its
    very sequence and time)."""
    _, expected = setup_orders(clean_server, tmp_path)
    memory = orders(tmp_path, "memory", name="m.yaml")
    target = dict(run(engine.plan([memory], options(clean_server), migrate=True)).steps[0].config)
    forge(clean_server, "ORDERS", bound_record(clean_server, phase, target))
    temp_info = run(api(clean_server, f"STREAM.INFO.{TEMP}"))
    body = json.loads(temp_info["config"]["metadata"][RECORD_KEY])
    config = {
        **temp_info["config"],
        "metadata": {RECORD_KEY: json.dumps({**body, "temp_created": temp_info["created"]})},
    }
    run(api(clean_server, f"STREAM.UPDATE.{TEMP}", config))
    if junk:
        run(publish_many(clean_server, ["junk.ORDERS.x"], junk, tag="j"))

    with contextlib.suppress(ReconcileError):  # refused, or the step failed
        run(engine.apply([memory], options(clean_server), migrate=True))
    assert run(dump(clean_server, "ORDERS")) == expected
    assert still_takes_publishes(clean_server, "orders.a")


CHILD = killed_migration_script("ORDERS")


async def ack_some(server: NatsServer, count: int) -> None:
    nc = await nats.connect(server.url)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    body = json.dumps({"batch": count, "expires": 2_000_000_000}).encode()
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ORDERS.BILLING", body, reply=inbox)
    for _ in range(count):
        msg = await sub.next_msg(timeout=3)
        await nc.request(msg.reply, b"+ACK", timeout=2)
    await nc.close()


def ack_floor(server: NatsServer) -> int:
    info = run(api(server, "CONSUMER.INFO.ORDERS.BILLING"))
    return int(info["ack_floor"]["stream_seq"])


def interrupted(server: NatsServer, tmp_path: Path, boundary: str) -> tuple[Path, list[Any]]:
    """ORDERS (file, 300 messages, BILLING acked 40) half-way to memory: the migrating
    process killed -9 at ``boundary``."""
    spec, _ = setup_orders(server, tmp_path)
    run(publish_many(server, ["orders.c"], 200, tag="n"))
    run(ack_some(server, 40))
    expected = run(dump(server, "ORDERS"))
    memory = orders(tmp_path, "memory", name="m.yaml")
    step = run(engine.plan([memory], options(server), migrate=True)).steps[0]
    assert isinstance(step, Migrate) and not step.blocked
    child = subprocess.run(
        [sys.executable, "-c", CHILD, server.url, json.dumps(dict(step.config)), boundary],
        check=False,
        capture_output=True,
        timeout=120,
        env={**os.environ},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    assert TEMP in names(server)
    return spec, expected


def test_a_genuine_interrupted_migration_needs_migrate_and_then_keeps_every_message(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    _, expected = interrupted(clean_server, tmp_path, "restored")
    memory = orders(tmp_path, "memory", name="m.yaml")
    step = run(engine.plan([memory], options(clean_server))).steps[0]
    assert isinstance(step, Migrate) and step.phase == "serving"
    assert "resumed only with --migrate" in step.blocked
    with pytest.raises(RefusedPlan, match="nothing was changed"):
        run(engine.apply([memory], options(clean_server)))
    assert TEMP in names(clean_server)
    assert run(engine.apply([memory], options(clean_server), migrate=True)).ok
    assert run(dump(clean_server, "ORDERS")) == expected
    assert names(clean_server) == ["ORDERS"]
    assert not run(engine.plan([memory], options(clean_server))).has_changes


#: Where a migration can stop: the old stream intact (handover), deleted (deleted),
#: the new stream made and its consumers restored (restored), copied back (cutover).
STOPS = ["handover", "deleted", "restored", "cutover"]


@pytest.mark.parametrize("boundary", STOPS)
@pytest.mark.parametrize("way", ["resume", "rollback", "continue"])
def test_specs_changed_after_a_migration_stopped_the_person_chooses_and_nothing_is_lost(
    clean_server: NatsServer, tmp_path: Path, boundary: str, way: str
) -> None:
    before, expected = interrupted(clean_server, tmp_path, boundary)
    newer = orders(tmp_path, "memory", 'description: "v2"', name="v2.yaml")
    shown = run(engine.plan([newer], options(clean_server), migrate=True)).steps[0]
    assert isinstance(shown, Migrate) and "choose --migration resume" in shown.blocked
    assert [(f.path, f.before, f.after) for f in shown.fields] == [("description", "", "v2")]
    with pytest.raises(RefusedPlan, match="nothing was changed"):
        run(engine.apply([newer], options(clean_server), migrate=True))

    chosen = run(engine.plan([newer], options(clean_server), migrate=True, migration=way))
    assert not chosen.steps[0].blocked
    assert run(engine.apply([newer], options(clean_server), migrate=True, migration=way)).ok
    assert run(dump(clean_server, "ORDERS")) == expected
    assert names(clean_server) == ["ORDERS"]
    assert ack_floor(clean_server) == 40
    config = run(api(clean_server, "STREAM.INFO.ORDERS"))["config"]
    wanted = {"resume": ("memory", None), "rollback": ("file", None), "continue": ("memory", "v2")}
    assert (config["storage"], config.get("description")) == wanted[way]
    converged = {
        "resume": orders(tmp_path, "memory", name="m.yaml"),
        "rollback": before,
        "continue": newer,
    }[way]
    assert not run(engine.plan([converged], options(clean_server))).has_changes
    assert still_takes_publishes(clean_server, "orders.z")


def test_a_taken_migrating_name_refuses_the_migration_naming_it(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    _, expected = setup_orders(clean_server, tmp_path)
    run(api(clean_server, f"STREAM.CREATE.{TEMP}", {"name": TEMP, "subjects": ["theirs.>"]}))
    run(publish_many(clean_server, ["theirs.x"], 5, tag="t"))
    memory = orders(tmp_path, "memory", name="m.yaml")
    step = run(engine.plan([memory], options(clean_server), migrate=True)).steps[0]
    assert isinstance(step, Migrate) and f"stream {TEMP} already exists" in step.blocked
    with pytest.raises(RefusedPlan, match=f"stream {TEMP} already exists"):
        run(engine.apply([memory], options(clean_server), migrate=True))
    assert run(dump(clean_server, "ORDERS")) == expected
    assert count(clean_server, TEMP) == 5


def test_export_during_an_interrupted_migration_skips_its_internals_and_says_so(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    interrupted(clean_server, tmp_path, "restored")
    out = tmp_path / "exported"
    done = reconcile("export", "--server", clean_server.url, "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"skipped stream {TEMP}: the temporary stream of an interrupted migration" in (
        done.stderr
    )
    assert f"skipped stream ORDERS: mid-migration, still filled from {TEMP}" in done.stderr
    written = sorted(p.name for p in out.iterdir())
    assert not [name for name in written if "MIGRATING" in name or "ORDERS" in name]


@pytest.mark.parametrize("version", ["2.10.26", "2.12.8"])
@pytest.mark.parametrize("way", ["rollback", "resume"])
def test_older_servers_roll_back_and_resume_with_every_message(
    server_factory: Callable[..., NatsServer], tmp_path: Path, version: str, way: str
) -> None:
    """Before 2.12 both copies are sources (sequences mapped through the
    Nats-Stream-Source header): the way out keeps every message there too."""
    server = server_factory(version=version)
    before, expected = interrupted(server, tmp_path, "restored")
    memory = orders(tmp_path, "memory", name="m.yaml")
    specs = before if way == "rollback" else memory
    assert run(engine.apply([specs], options(server), migrate=True, migration=way)).ok
    assert run(dump(server, "ORDERS")) == expected
    assert names(server) == ["ORDERS"]
    assert not run(engine.plan([specs], options(server))).has_changes


@pytest.mark.parametrize("version", ["2.10.26", "2.12.8"])
def test_older_servers_refuse_to_delete_for_a_bound_forgery(
    server_factory: Callable[..., NatsServer], tmp_path: Path, version: str
) -> None:
    server = server_factory(version=version)
    _, expected = setup_orders(server, tmp_path)
    memory = orders(tmp_path, "memory", name="m.yaml")
    target = dict(run(engine.plan([memory], options(server), migrate=True)).steps[0].config)
    body = {**bound_record(server, "serving", target), "mirrors": version >= "2.12"}
    forge(server, "ORDERS", body)
    info = run(api(server, f"STREAM.INFO.{TEMP}"))
    bound = {**body, "temp_created": info["created"]}
    run(
        api(
            server,
            f"STREAM.UPDATE.{TEMP}",
            {**info["config"], "metadata": {RECORD_KEY: json.dumps(bound)}},
        )
    )
    run(publish_many(server, ["junk.ORDERS.x"], 100, tag="j"))
    with pytest.raises(ReconcileError, match="does not hold its 100 messages"):
        run(engine.apply([memory], options(server), migrate=True))
    assert run(dump(server, "ORDERS")) == expected


def test_the_cli_shows_the_block_refuses_in_one_line_and_rolls_back(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    before, expected = interrupted(clean_server, tmp_path, "refill")
    newer = orders(tmp_path, "memory", 'description: "v2"', name="v2.yaml")
    url = ("--server", clean_server.url)
    shown = reconcile("plan", str(newer), "--migrate", *url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "# blocked: stream ORDERS: the specs changed after its migration stopped" in (
        shown.stdout
    )
    refused = reconcile("apply", "-y", str(newer), *url, cwd=tmp_path)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "cannot be acted on; nothing was changed" in refused.stderr
    assert "resumed only with --migrate" in refused.stderr
    assert TEMP in names(clean_server)
    back = reconcile(
        "apply", "-y", str(newer), "--migrate", "--migration", "rollback", *url, cwd=tmp_path
    )
    assert back.returncode == 0, back.stderr
    assert run(dump(clean_server, "ORDERS")) == expected
    assert names(clean_server) == ["ORDERS"]
    assert reconcile("plan", str(before), "--detailed-exitcode", *url, cwd=tmp_path).returncode == 0


def action_step(
    server: NatsServer, root: Path, spec: Path, **inputs: str
) -> subprocess.CompletedProcess[str]:
    """The GitHub Action (``python -m action``) on ``spec``, as a workflow step runs it."""
    temp = root / f"runner-temp-{len(list(root.glob('runner-temp-*')))}"
    temp.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(root),
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(root),
        "GITHUB_OUTPUT": str(temp / "output"),
        "GITHUB_STEP_SUMMARY": str(temp / "summary.md"),
        "GITHUB_EVENT_NAME": "push",
        "RUNNER_TEMP": str(temp),
        "INPUT_PATH": str(spec.relative_to(root)),
        "INPUT_SERVER": server.url,
        "INPUT_MIGRATE": "true",
    } | {"INPUT_" + name.upper(): value for name, value in inputs.items()}
    return subprocess.run(
        [sys.executable, "-m", "action"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_action_takes_the_same_choice_and_refuses_without_it(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    before, expected = interrupted(clean_server, tmp_path, "restored")
    newer = orders(tmp_path, "memory", 'description: "v2"', name="v2.yaml")

    bad = action_step(clean_server, tmp_path, newer, mode="plan", migration="undo")
    assert bad.returncode == 1
    assert "input 'migration' must be one of resume, rollback, continue" in bad.stdout

    refused = action_step(clean_server, tmp_path, newer, mode="apply")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "choose input migration: resume" in refused.stdout  # the Action names its input
    assert TEMP in names(clean_server)  # nothing was changed

    rolled = action_step(clean_server, tmp_path, newer, mode="apply", migration="rollback")
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert run(dump(clean_server, "ORDERS")) == expected
    assert names(clean_server) == ["ORDERS"]
    assert ack_floor(clean_server) == 40
    assert not run(engine.plan([before], options(clean_server))).has_changes
