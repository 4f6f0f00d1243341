"""Attacks on this round's changes: a refusal the agent took for a server that is down
(a real nats-server's route or leaf node port, a listener that is no NATS server, a
server that refuses the agent's missing client certificate), a real account's list
that grows fast while it is read, a Pulumi secret input quoted in a form
``<redacted>`` did not find, the agent naming a flag ``reconcile watch`` has not (or
a creds file by the flag alone), and a commit's invalid project file taken for a
connection to open again."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_harness import (
    ORDERS,
    changes,
    fixed_source,
    get,
    lines,
    link_error,
    project_of,
    project_sources,
    running_agent,
    until,
)
from cli_runner import reconcile
from credentials import make_operator, make_tls
from migration_helpers import dump, killed_migration_script, publish_many
from servers import NatsServer, options, unused_port, write
from test_agent_git import origin, push_commit
from test_attacks8 import read_while_created
from test_greeting_attacks import greeting

from pulumi_provider import JetStreamProvider
from reconciler.agent.source import GitSource
from reconciler.errors import ConnectError, ConnectRefused
from reconciler.execution import run as engine
from reconciler.execution.environments import environment_target
from reconciler.execution.requests import PlanRequest
from reconciler.jetstream import ConnectionOptions
from reconciler.jetstream.connection import connect
from reconciler.model.migration import temp_name
from reconciler.planning.steps import Migrate
from reconciler.specs.project import load_project

pytestmark = pytest.mark.integration


# --- the agent: a listener that answers and refuses is not a server that is down ---------


@contextlib.contextmanager
def banner(text: bytes) -> Iterator[str]:
    """A listener on 127.0.0.1 that sends ``text`` to whoever connects and closes (an
    SSH or SMTP port named by mistake). Its URL."""
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = listening.accept()
            except OSError:  # closed: the test is over
                return
            with contextlib.suppress(OSError), conn:
                conn.sendall(text)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"nats://127.0.0.1:{port}"
    finally:
        listening.close()
        thread.join(5)


def test_a_wrong_port_or_a_listener_that_is_no_nats_server_makes_the_agent_not_ready(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """A rollout that names a real nats-server's route port or leaf node port (a Service's
    wrong targetPort), or a port where another service greets first: the server
    answered and refused the agent, the configuration's fault. They counted as servers
    that are down, so beside one that really is down ``/readyz`` was 200 and the broken
    rollout went on. Now they are refused (503, ``refused`` in /status) and the one
    that is down is still down."""
    route, leaf = unused_port(), unused_port()
    cluster = {"name": "c", "host": "127.0.0.1", "port": route}
    config = {"cluster": cluster, "leafnodes": {"host": "127.0.0.1", "port": leaf}}
    server_factory(jetstream=False, config=config)
    down = server_factory()
    down.kill()
    root = tmp_path / "project"
    root.mkdir()
    write(root, ORDERS, "orders.yaml")

    async def scenario(ssh: str) -> None:
        envs = {
            "routeport": f"nats://127.0.0.1:{route}",
            "leafport": f"nats://127.0.0.1:{leaf}",
            "ssh": ssh,
            "down": down.url,
        }
        listed = "".join(f"  {name}:\n    servers: {url}\n" for name, url in envs.items())
        text = f"owner: shop\nspecs: [orders.yaml]\nenvironments:\n{listed}"
        options = ConnectionOptions(timeout=1.0, connect_timeout=1.0)
        sources = project_sources(write(root, text, "reconcile.yaml"), options)
        async with running_agent(sources, mode="heal", interval=0.5) as (agent, _log):
            await until(
                lambda: all(w.tried for w in agent.watches.values()), what="every one tried"
            )
            code, body = await get(agent, "/readyz")
            status = json.loads((await get(agent, "/status"))[1])["environments"]
            assert code == 503, (body, status)
            for env in ("routeport", "leafport", "ssh"):
                assert status[env]["refused"] is True, status[env]
                assert env.encode() in body
            assert status["down"]["refused"] is False
            assert status["down"]["reachable"] is False
            assert "OpenSSH" not in json.dumps(status)  # what it sent is never quoted

    with banner(b"SSH-2.0-OpenSSH_9.6\r\n") as ssh:
        run(scenario(ssh))


def test_a_server_that_refuses_a_missing_client_certificate_refuses_every_time(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """A server that verifies clients, and an agent whose client certificate a rollout
    left out: with TLS 1.3 the server refuses it after the handshake, and its alert races
    the CONNECT. Read first, a TLS error (refused); else the connection it ended was a
    "reset" or "broken pipe": a server that is down, half the attempts, so ``/readyz``
    went 503 and 200 by turns and a rollout passed. Now every attempt is refused."""
    tls = make_tls(tmp_path / "tls")
    server = server_factory(tls=tls, verify_clients=True)
    options = ConnectionOptions(servers=server.url, tls_ca=str(tls.ca), connect_timeout=2)

    async def attempt() -> str:
        try:
            nc = await connect(options)
        except ConnectRefused:
            return "refused"
        except ConnectError as err:
            return f"down: {err}"
        await nc.close()
        return "connected"

    outcomes = [run(attempt()) for _ in range(12)]
    assert set(outcomes) == {"refused"}, outcomes


# --- a real account's list that grows fast while it is read -------------------------------


def test_a_list_that_grows_by_more_than_the_bound_between_two_pages_is_read_again(
    server_factory: Any, run: Any
) -> None:
    """300 streams, and 1,100 more created by other clients after the first page came
    (a provisioning burst, thousands of clients re-creating their consumers after a
    restart): the growth bound refused the real server's list as an unexpected reply,
    and the plan failed, where it read the list again before. Now a read that grows
    past the bound is read again from its new total, as any read that changed is; only
    a last read that still does is refused."""
    server = server_factory()
    found, _ = read_while_created(server.url, 300, 1400)
    assert found == {f"E{n}" for n in range(1400)}


# --- Pulumi: a secret input's value in a form <redacted> did not find ----------------------

SECRET = "s3cr\\et-Hunter2"  # a backslash: quoted, it reads s3cr\\et-Hunter2


def test_a_secret_inputs_value_is_in_no_check_failure_even_escaped_or_cut_short() -> None:
    """A check failure quotes an invalid value as its repr (a backslash doubled) or cut
    short (a long one: its first 80 or 200 characters): ``<redacted>`` replaced only the
    value as it is, so the secret showed in ``pulumi preview``. Now a failure at a
    secret input says the value is not shown."""
    provider = JetStreamProvider()
    base = {"kind": "Stream", "name": "S", "storage": "memory", "subjects": ["s.>"]}
    long_secret = "Hunter2-" * 100
    cases = {
        "max_age": f"{SECRET} days",
        "subjects": [f"bad {SECRET}"],
        "description": long_secret * 10,
        "max_msgs": long_secret,
    }
    for name, value in cases.items():
        failures = provider.check({}, {**base, name: value, "secret_inputs": [name]}).failures
        assert [f.property.split(".")[0] for f in failures] == [name], failures
        said = " ".join(f.reason for f in failures)
        assert "Hunter2" not in said and "s3cr" not in said, said


def test_a_secret_subject_with_a_backslash_is_in_no_error(clean_server: NatsServer) -> None:
    """The overlap refusal quotes both subjects as their repr: a secret one holding a
    backslash showed doubled, which ``<redacted>`` did not find."""
    provider = JetStreamProvider(connection={"servers": clean_server.url})
    taken = {"kind": "Stream", "name": "TAKEN", "storage": "memory", "subjects": ["t.x.>"]}
    provider.create(taken)
    clash = {
        "kind": "Stream",
        "name": "CLASH",
        "storage": "memory",
        "subjects": [f"t.x.{SECRET}"],
        "secret_inputs": ["subjects"],
    }
    with pytest.raises(Exception) as refused:
        provider.create(clash)
    said = str(refused.value)
    assert "TAKEN" in said and "overlaps" in said, said
    assert "Hunter2" not in said and "s3cr" not in said, said


# --- the agent names a way it has, not a flag of another command --------------------------


def test_the_agent_names_the_command_that_takes_a_stream_over_not_a_flag_it_lacks(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """ORDERS is managed by another owner: the agent's cycle failed saying "re-run with
    --take-over", a flag ``reconcile watch`` has not (re-running the agent with it is a
    usage error). Now it names the command that does take it over."""
    specs = write(tmp_path, ORDERS, "orders.yaml")
    made = reconcile(
        "apply", str(specs), "--server", clean_server.url, "--owner", "billing", "--yes",
        cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr

    async def scenario() -> str:
        async with running_agent(fixed_source([specs], clean_server.url), interval=0.5) as (
            agent,
            log,
        ):
            await until(lambda: agent.watch.cycles >= 1, what="a cycle")
            failed = [line for line in lines(log) if line["event"] == "cycle"]
            return str(failed[0].get("error"))

    error = run(scenario())
    assert "billing" in error, error
    assert "reconcile apply --take-over" in error, error


def test_the_agent_names_a_creds_file_that_is_none_by_its_flag_or_its_environments_field(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """The environment's ``creds`` names a file that is no credentials file: the agent's
    connection failed saying "--creds PATH", though the path came from the project file
    (``creds:``), not a flag. It names both ways the agent takes it now."""
    root = tmp_path / "project"
    root.mkdir()
    project = project_of(root, {"blue": clean_server.url})
    write(root, "no JWT, no seed\n", "wrong.creds")
    project.write_text(project.read_text() + "    creds: wrong.creds\n", encoding="utf-8")

    error = link_error(project, "blue", run)
    assert "--creds (or the environment's creds)" in error, error
    assert "wrong.creds: not a NATS credentials file" in error, error


MIGRATED = "kind: Stream\nname: HALFWAY\nsubjects: [HALFWAY.>]\nstorage: {storage}\n"


def test_the_agent_names_the_command_that_finishes_an_interrupted_migration(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """A migration of HALFWAY to memory stopped half-way (its process killed): the agent
    reported it as needing a person who would "run apply --migrate", a command that is
    no ``reconcile watch`` (re-running the agent with it is a usage error). It names
    ``reconcile apply --migrate`` now, and the migration's stream holds every message."""
    before = write(tmp_path, MIGRATED.format(storage="file"), "before.yaml")
    assert run(engine.apply([before], options(clean_server))).ok
    run(publish_many(clean_server, ["HALFWAY.a"], 20))
    spec = write(tmp_path, MIGRATED.format(storage="memory"), "halfway.yaml")
    step = run(engine.plan([spec], options(clean_server), migrate=True)).steps[0]
    assert isinstance(step, Migrate) and not step.blocked
    script = killed_migration_script("HALFWAY")
    target = json.dumps(dict(step.config))
    child = subprocess.run(
        [sys.executable, "-c", script, clean_server.url, target, "restored"],
        check=False,
        capture_output=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    held = run(dump(clean_server, temp_name("HALFWAY")))  # HALFWAY copies them back itself
    assert len(held) == 20

    async def scenario() -> str:
        source = fixed_source([spec], clean_server.url)
        async with running_agent(source, interval=0.5) as (_agent, log):
            await until(
                lambda: changes(log, "Stream HALFWAY", "needs_person"), what="HALFWAY refused"
            )
            return str(changes(log, "Stream HALFWAY", "needs_person")[0])

    said = run(scenario())
    assert "run `reconcile apply --migrate`" in said, said
    assert "run apply --migrate" not in said, said
    assert run(dump(clean_server, temp_name("HALFWAY"))) == held  # no heal touched it


# --- the agent: a commit whose project file is invalid fails its cycle, connected ---------


def test_a_commit_whose_project_file_is_invalid_fails_its_cycle_on_the_open_connection(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """``--git``: a commit whose project file cannot be served. The check for a project
    file naming another server, made before each cycle, raised its error outside the
    cycle: the agent dropped the connection and reconnected with the backoff (failing
    again, before it connected), no cycle of that commit said why, and /status said the
    agent was not connected. Now the cycle of that commit fails naming the file's line,
    on the connection open."""
    bare, work = origin(tmp_path)
    url = clean_server.url
    good = f"owner: shop\nspecs: [specs]\nenvironments:\n  blue:\n    servers: {url}\n"
    push_commit(work, bare, {"reconcile.yaml": good, "specs/orders.yaml": ORDERS}, "1")
    options = ConnectionOptions(timeout=2.0)

    def make(root: Path | None) -> PlanRequest:
        assert root is not None
        target = environment_target(load_project(root / "reconcile.yaml"), "blue", options, "shop")
        return PlanRequest.for_target(target)

    source = GitSource(f"file://{bare}", "main", tmp_path / "cache", make)

    async def scenario() -> None:
        async with running_agent(source, mode="heal", interval=30.0, git_poll=0.2) as (
            agent,
            log,
        ):
            await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
            bad = good + "    lifecycle: {mode: sometimes}\n"
            second = push_commit(work, bare, {"reconcile.yaml": bad}, "2")
            watch = agent.watch
            await until(
                lambda: watch.last is not None and watch.last.commit == second,
                what="a cycle of the second commit",
            )
            assert watch.last is not None and not watch.last.ok
            assert "reconcile.yaml:6" in str(watch.last.error), watch.last.error
            assert watch.link.connected
            assert not [line for line in lines(log) if line["event"] == "error"]

    run(scenario())


def _jwt_said_back(line: bytes) -> bytes:
    """A listener's answer to the CONNECT it was sent: an -ERR saying the user JWT."""
    if not line.startswith(b"CONNECT "):
        return b""
    sent = json.loads(line[len(b"CONNECT ") :])
    return f"-ERR 'you sent {sent.get('jwt')}'\r\n".encode()


def test_a_listener_saying_the_creds_files_jwt_back_never_gets_it_printed(tmp_path: Path) -> None:
    """The CONNECT carries the creds file's user JWT (a bearer JWT is all a client needs
    to log in); a listener's -ERR said it back and the connection error printed it (a CI
    log keeps it). Now it is masked as the password and the token are."""
    setup = make_operator(tmp_path / "op")
    text = setup.creds.read_text()
    jwt = text.split("-----BEGIN NATS USER JWT-----\n", 1)[1].split("\n", 1)[0]
    specs = write(tmp_path, ORDERS, "orders.yaml")
    auth = b'{"server_id":"NX","max_payload":1048576,"auth_required":true,"nonce":"abc"}'
    with greeting(auth, answer=_jwt_said_back) as url:
        args = ("plan", str(specs), "--server", url, "--timeout", "2", "--creds", str(setup.creds))
        done = reconcile(*args, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "you sent" in done.stderr  # the listener's answer is said ...
    for part in jwt.split("."):  # ... without the JWT, nor any part of it
        assert part not in done.stdout + done.stderr
