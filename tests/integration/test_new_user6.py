"""A careless new user's walk through the README and the docs, on real servers.

Each test is one thing that went wrong on that walk: the command run as a user runs it
(a subprocess), the server counted with a raw client before and after."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import nats
import pytest
from cli_runner import reconcile
from credentials import make_tls
from servers import NatsServer, run
from test_backup_faults import BIG, _big_streams, _start
from test_saved_plans import api, plan_out, publish, repo, state

pytestmark = pytest.mark.integration

PASSWORD = "n0t-in-any-output"


def _said(done: object) -> str:
    return str(getattr(done, "stdout", "")) + str(getattr(done, "stderr", ""))


def test_the_ambiguous_unit_said_is_the_first_in_the_file(tmp_path: Path) -> None:
    """docs/spec-format.md: "the first such value in each file is a warning at its
    FILE:LINE". A `1GB` above a `1M` was counted, and the `1M` below it said."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "o.yaml").write_text(
        "kind: Stream\nname: O\nsubjects: [o.>]\nmax_bytes: 1GB\nmax_age: 1M\n"
    )
    done = reconcile("validate", "specs", cwd=tmp_path)
    assert done.returncode == 0, _said(done)
    warnings = [line for line in _said(done).splitlines() if ": warning: " in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("specs/o.yaml:4: warning: max_bytes: ")
    assert "(and 1 more in this file)" in warnings[0]


def test_a_saved_plan_refused_by_another_server_names_it_without_the_password(
    clean_server: NatsServer, server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """README: every apply names the server it talks to, credentials removed. A saved
    plan applied to the wrong server was refused without saying which server that was."""
    root = repo(tmp_path)
    plan = plan_out(root, clean_server)
    other = server_factory(users=[{"user": "alice", "password": PASSWORD}])
    host_port = other.url.removeprefix("nats://")
    before = state(other, user="alice", password=PASSWORD)
    done = reconcile(
        "apply", str(plan), "--server", f"nats://alice:{PASSWORD}@{host_port}", cwd=root
    )
    assert done.returncode == 1, _said(done)
    refusal = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(refusal) == 1, done.stderr
    assert "another server" in refusal[0] and host_port in refusal[0]
    assert PASSWORD not in _said(done)
    assert "Traceback" not in _said(done)
    assert state(other, user="alice", password=PASSWORD) == before == {}


def test_a_spec_path_declaring_nothing_is_a_warning_and_strict_refuses_it(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """An empty file, or a folder with no spec in it (the wrong folder), declared nothing
    and said nothing: `0 documents valid`, and an apply with --prune planned to delete
    every managed stream. It is a warning now; --strict refuses it, deleting nothing."""
    root = repo(tmp_path)
    done = reconcile("apply", "specs", "--server", clean_server.url, "--yes", cwd=root)
    assert done.returncode == 0, _said(done)
    publish(clean_server, "ORDERS.new", 5)
    before = state(clean_server)
    assert before["ORDERS"]["messages"] == 5
    (root / "empty").mkdir()
    (root / "empty" / "orders.yaml").write_text("")
    (root / "notes").mkdir()
    (root / "notes" / "README.md").write_text("kind: Stream\n")

    for path in ("empty", "notes"):
        checked = reconcile("validate", path, cwd=root)
        assert checked.returncode == 0, _said(checked)
        assert f"warning: no spec document in {path}" in _said(checked)
        strict = reconcile("validate", path, "--strict", cwd=root)
        assert strict.returncode == 1, _said(strict)
        done = reconcile(
            "apply", path, "--server", clean_server.url, "--yes", "--prune", "--allow-replace",
            "--strict", cwd=root,
        )  # fmt: skip
        assert done.returncode == 1, _said(done)
        assert f"warning: no spec document in {path}" in done.stderr
        assert "Traceback" not in _said(done)
        assert state(clean_server) == before


@pytest.mark.parametrize("source", ["nats-cli", "terraform", "nack"])
def test_an_import_that_finds_nothing_is_an_error_and_writes_nothing(
    tmp_path: Path, source: str
) -> None:
    """docs/importers.md: an import ends in spec files or in errors. The wrong folder
    (none of the tool's files in it) said `imported 0 file(s)` and exited 0."""
    (tmp_path / "wrong").mkdir()
    (tmp_path / "wrong" / "notes.txt").write_text("nothing here\n")
    done = reconcile("import", "--from", source, "wrong", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, _said(done)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "wrong" in errors[0], done.stderr
    assert not (tmp_path / "specs").exists()


def test_a_plan_folds_long_lists_of_resources_it_never_touches(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """README: over 50, plans fold (`--full` shows every one). A plan against a shared
    server listed every app-made stream and every other owner's, one line each (thousands
    on a real account) under the steps; drift reports folded them, plans did not."""
    root = repo(tmp_path)
    for index in range(55):  # made by an application: no managed-by marker
        made = api(clean_server, f"STREAM.CREATE.APP{index}", {"name": f"APP{index}"})
        assert "error" not in made, made
    billing = root / "billing"
    billing.mkdir()
    (billing / "s.yaml").write_text(
        "---\n".join(f"kind: Stream\nname: BILL{i}\nsubjects: [bill{i}.>]\n" for i in range(52))
    )
    done = reconcile(
        "apply", "billing", "--owner", "billing", "--server", clean_server.url, "--yes", cwd=root
    )
    assert done.returncode == 0, _said(done)
    before = state(clean_server)

    done = reconcile("plan", "specs", "--server", clean_server.url, cwd=root)
    assert done.returncode == 0, _said(done)
    lines = done.stdout.splitlines()
    assert "  ? 55 Stream(s) (names: --full or --format json)" in lines
    assert "  = 52 Stream(s) (owners: billing 52) (names: --full or --format json)" in lines
    assert not [line for line in lines if "APP1" in line or "BILL1" in line]

    full = reconcile("plan", "specs", "--server", clean_server.url, "--full", cwd=root)
    assert full.returncode == 0, _said(full)
    assert sum(line.startswith("  ? Stream APP") for line in full.stdout.splitlines()) == 55
    assert "  = Stream BILL7 (owner billing)" in full.stdout.splitlines()
    assert state(clean_server) == before


def test_a_tls_url_never_sends_the_password_to_a_server_without_tls(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """`tls://user:password@host` to a server that does not require TLS connected in
    plaintext: nats-py upgrades only when the server's INFO says `tls_required`, so the
    CONNECT carried the password in the clear (and anyone on the way could strip the
    flag). A connection asked for TLS now upgrades whatever INFO says, or fails."""
    plain = server_factory(users=[{"user": "alice", "password": PASSWORD}])
    host_port = plain.url.removeprefix("nats://")
    root = repo(tmp_path)
    done = reconcile(
        "plan", "specs", "--server", f"tls://alice:{PASSWORD}@{host_port}", cwd=root
    )  # fmt: skip
    assert done.returncode == 1, _said(done)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "TLS" in errors[0], done.stderr
    assert PASSWORD not in _said(done) and "Traceback" not in _said(done)

    # someone on the way answers with an INFO that asks for no TLS: what reaches them
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(30)
    heard: list[bytes] = []

    def answer() -> None:
        peer, _ = listener.accept()
        info = {"server_id": "strip", "version": "2.10.0", "proto": 1, "auth_required": True}
        peer.sendall(b"INFO " + json.dumps(info).encode() + b"\r\n")
        peer.settimeout(5)
        with contextlib.suppress(OSError):
            while chunk := peer.recv(65536):
                heard.append(chunk)
        peer.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    done = reconcile(
        "plan", "specs", "--server", f"tls://alice:{PASSWORD}@127.0.0.1:{port}", cwd=root
    )  # fmt: skip
    thread.join(timeout=30)
    listener.close()
    assert done.returncode == 1, _said(done)
    assert heard, "the client sent nothing"
    assert PASSWORD.encode() not in b"".join(heard)
    assert not b"".join(heard).startswith(b"CONNECT")


def test_a_tls_url_upgrades_on_a_server_where_tls_is_optional(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """A server that allows clients without TLS (`allow_non_tls`) does not ask for it in
    INFO: the upgrade made whatever INFO says still works there (a guard for the fix
    above, which passes without it too)."""
    tls = make_tls(tmp_path / "tls")
    server = server_factory(tls=tls, config={"allow_non_tls": True})
    host_port = server.url.split("://", 1)[1]
    root = repo(tmp_path)
    args = ("plan", "specs", "--server", f"tls://{host_port}", "--tls-ca", str(tls.ca))
    done = reconcile(*args, cwd=root)
    assert done.returncode == 0, _said(done)
    assert f"at tls://{host_port}" in done.stderr


def test_ctrl_c_mid_backup_says_the_folder_is_unfinished(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Ctrl-C in the middle of `reconcile backup` printed `aborted` and nothing else: not
    which folder was left, nor that it is unusable until the backup runs again."""
    source = server_factory()
    run(_big_streams(source, BIG, 4))
    before = state(source)
    out = tmp_path / "nightly"
    started = _start(["backup", "--all", "--out", str(out), "--server", source.url], tmp_path)
    deadline = time.monotonic() + 60
    while not (out / "backup-in-progress.json").exists():
        assert started.poll() is None and time.monotonic() < deadline, started.communicate()
        time.sleep(0.005)
    # frozen while Ctrl-C arrives: the backup cannot finish first
    err = _interrupted_while_frozen(started, source, timeout=60)
    assert started.returncode == 130, err
    assert "Traceback" not in err
    said = [line for line in err.splitlines() if line.strip()]
    assert said[-1].startswith(f"interrupted: the backup in {out} is unfinished"), err
    assert not (out / "manifest.json").exists()
    assert reconcile("backup", "verify", str(out), cwd=tmp_path).returncode == 1
    assert "free" in reconcile("lock", "status", "--server", source.url, cwd=tmp_path).stdout
    assert state(source) == before


@pytest.mark.parametrize("typed", ["alice:{pw}/x", "alice:x/{pw}", "alice:{pw}?x", "{pw}/x"])
def test_a_password_typed_with_a_slash_in_the_url_is_never_printed(
    server_factory: Callable[..., NatsServer], tmp_path: Path, typed: str
) -> None:
    """A password holding an unencoded `/` (`nats://alice:pa/ss@host`) ends the user info
    for every URL parser: the redaction found no credentials and the error printed the
    URL whole, password included. Now the credentials are everything before the last
    `@`, and such a URL is refused in one line saying how to give them."""
    server = server_factory(users=[{"user": "alice", "password": PASSWORD}])
    host_port = server.url.removeprefix("nats://")
    url = f"nats://{typed.format(pw=PASSWORD)}@{host_port}"
    root = repo(tmp_path)
    for command in (("plan", "specs"), ("drift", "specs"), ("lock", "status")):
        done = reconcile(*command, "--server", url, cwd=root)
        assert done.returncode == 1, _said(done)
        assert PASSWORD not in _said(done) and "Traceback" not in _said(done)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "--user/--password" in errors[0], done.stderr
    assert state(server, user="alice", password=PASSWORD) == {}


def test_a_project_file_url_with_a_slashed_password_is_refused_at_its_line(
    tmp_path: Path,
) -> None:
    """docs/environments.md: a server URL carrying credentials is refused, so no secret
    sits in the repository. The check looked for `@` in what urllib calls the host part,
    which a `/` in the password ends before the `@`: validate passed, the secret in git."""
    root = repo(tmp_path)
    (root / "reconcile.yaml").write_text(
        f"owner: shop\nspecs: [specs]\nenvironments:\n  prod:\n"
        f"    servers: nats://alice:{PASSWORD}/x@nats.internal:4222\n"
    )
    for command in (("validate",), ("envs",), ("plan", "--env", "prod")):
        done = reconcile(*command, cwd=root)
        assert done.returncode == 1, _said(done)
        assert "reconcile.yaml:5: environments.prod.servers: " in done.stderr, done.stderr
        assert PASSWORD not in _said(done) and "Traceback" not in _said(done)


async def _fill(url: str, subject: str, count: int) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        body = b"m" * 1024
        for start in range(0, count, 1000):
            await asyncio.gather(*(js.publish(subject, body) for _ in range(start, start + 1000)))
    finally:
        await nc.close()


async def _migrating(url: str, deadline: float) -> bool:
    """Whether the migration's temporary stream appeared before ``deadline``."""
    nc = await nats.connect(url)
    try:
        while time.monotonic() < deadline:
            reply = await nc.request("$JS.API.STREAM.NAMES", b"{}", timeout=5)
            if any(n.startswith("MIGRATING_") for n in json.loads(reply.data)["streams"] or []):
                return True
            await asyncio.sleep(0.005)
        return False
    finally:
        await nc.close()


def test_ctrl_c_during_the_last_step_does_not_ask_for_a_rerun(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Ctrl-C while the only step (a migration) ran: the step finished, as the README
    says, and the apply then said `interrupted: 0 step(s) not started; re-run apply to
    converge`, though nothing was left to apply."""
    specs = tmp_path / "specs"
    specs.mkdir()
    spec = specs / "big.yaml"
    spec.write_text("kind: Stream\nname: BIG\nsubjects: [big.>]\nstorage: memory\n")
    done = reconcile("apply", "specs", "--server", clean_server.url, "--yes", cwd=tmp_path)
    assert done.returncode == 0, _said(done)
    run(_fill(clean_server.url, "big.x", 50_000))
    spec.write_text("kind: Stream\nname: BIG\nsubjects: [big.>]\nstorage: file\n")
    args = ["apply", "specs", "--migrate", "--yes", "--server", clean_server.url]
    started = _start(args, tmp_path)
    assert run(_migrating(clean_server.url, time.monotonic() + 60)), started.communicate()
    # the step in flight while Ctrl-C arrives
    err = _interrupted_while_frozen(started, clean_server, timeout=120)
    assert started.returncode == 130, err
    said = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert said and "re-run" not in said[-1] and "none is left" in said[-1], err
    again = reconcile("plan", "specs", "--server", clean_server.url, cwd=tmp_path)
    assert "No changes." in again.stdout, _said(again)
    assert state(clean_server)["BIG"]["messages"] == 50_000


def test_applying_the_json_a_plan_printed_says_how_to_save_a_plan(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """`plan --format json > plan.json`, then `apply plan.json`: the file was read as a
    spec and refused with `plan.json:1: kind: missing kind`, no word of saved plans."""
    root = repo(tmp_path)
    printed = reconcile("plan", "specs", "--server", clean_server.url, "--format", "json", cwd=root)
    assert printed.returncode == 0, _said(printed)
    (tmp_path / "plan.json").write_text(printed.stdout)
    done = reconcile("apply", "../plan.json", "--server", clean_server.url, "--yes", cwd=root)
    assert done.returncode == 1, _said(done)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "--out" in errors[0] and "plan.json" in errors[0], done.stderr
    assert state(clean_server) == {}


def _interrupted_while_frozen(
    process: subprocess.Popen[str], server: NatsServer, *, timeout: float
) -> str:
    """SIGINT to ``process`` while ``server`` is paused (nothing in flight can end first),
    the server resumed half a second later; the process's standard error once it ended."""
    server.pause()
    try:
        process.send_signal(signal.SIGINT)
        time.sleep(0.5)
    finally:
        server.resume()
    return process.communicate(timeout=timeout)[1]
