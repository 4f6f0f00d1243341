"""What is applied is what was reviewed, and every run says which server it changes.

- The answer at the prompt approves the plan that was shown: the live state is read again
  after it and a plan that now differs (its steps, what they destroy) is refused.
- Without a terminal, an apply to a server the user named needs ``--yes``; the embedded
  server needs no approval.
- Ctrl-C at the prompt: exit status 130 and one line.
- An empty server (``--server ''``, ``NATS_URL=''``, the Action's missing ``server``) is an
  error, never a switch to a throwaway embedded server; plans and applies name their server.

Real ``nats-server`` processes and a real pseudo-terminal (the CLI's controlling terminal,
so Ctrl-C typed at it is the kernel's SIGINT).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from migration_helpers import api, publish_many
from servers import NatsServer, run
from terminal import QUESTION, Terminal

from reconciler.jetstream import ConnectionOptions, open_client

REPO = Path(__file__).resolve().parents[2]
SHOP = REPO / "examples" / "shop"
NO_TERMINAL = "no terminal to confirm on; pass --yes"


def stream_names(url: str) -> list[str]:
    async def names() -> list[str]:
        async with open_client(ConnectionOptions(servers=url)) as client:
            return [n for n in await client.stream_names() if not n.startswith("KV_")]

    return run(names())


def stream_info(server: NatsServer, name: str) -> dict[str, Any]:
    return run(api(server, f"STREAM.INFO.{name}"))


# --- what is applied is what was reviewed ----------------------------------------------


def test_messages_published_while_the_question_waits_are_kept(
    tmp_path: Path, clean_server: NatsServer
) -> None:
    """Planned on empty streams, ``max_msgs: 10`` deletes nothing; 100 messages reach WAIT
    while the question waits: 'yes' then approves a plan that no longer holds, so nothing
    is changed and all 100 are kept (before: cut to 10). The 3 that reach CALM change
    nothing it would do: it is not named. Asked again (the loss now shown and allowed),
    'yes' applies, and a harmless publish while it waits does not stop it."""
    spec = tmp_path / "wait.yaml"
    streams = "kind: Stream\nname: WAIT\nsubjects: [wait.>]\n---\nkind: Stream\nname: CALM\n"
    spec.write_text(streams)
    created = reconcile("apply", str(spec), "--server", clean_server.url, "-y", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    limited = streams.replace("[wait.>]\n", "[wait.>]\nmax_msgs: 10\n") + "max_msgs: 10\n"
    spec.write_text(limited)

    term = Terminal("apply", str(spec), "--server", clean_server.url, cwd=tmp_path)
    assert term.read_until(QUESTION), term.text
    assert "~ update Stream WAIT" in term.text and "~ update Stream CALM" in term.text
    assert "at least" not in term.text  # harmless as planned
    run(publish_many(clean_server, ["wait.a", "wait.b"], 100))
    run(publish_many(clean_server, ["CALM"], 3))
    term.type(b"yes\r")

    assert term.finish() == 1, term.text
    said = term.after_question()
    assert "Stream WAIT" in said and "changed since the plan was shown" in said, said
    assert "deletes at least 90" in said and "nothing was changed" in said, said
    assert "CALM" not in said and "Traceback" not in term.text
    for name, held in (("WAIT", 100), ("CALM", 3)):
        info = stream_info(clean_server, name)
        assert info["state"]["messages"] == held and info["config"]["max_msgs"] == -1

    again = Terminal(
        "apply", str(spec), "--server", clean_server.url, "--allow-data-loss", cwd=tmp_path
    )
    assert again.read_until(QUESTION), again.text
    assert "deletes at least 90" in again.text
    run(publish_many(clean_server, ["CALM"], 2, tag="late"))  # still under the limit
    again.type(b"yes\r")
    assert again.finish() == 0, again.text
    for name, held in (("WAIT", 10), ("CALM", 5)):
        info = stream_info(clean_server, name)
        assert info["state"]["messages"] == held and info["config"]["max_msgs"] == 10


# --- no terminal: a named server needs --yes --------------------------------------------


def _context(tmp_path: Path, url: str) -> dict[str, str]:
    folder = tmp_path / "xdg" / "nats" / "context"
    folder.mkdir(parents=True)
    (folder / "prod.json").write_text(json.dumps({"url": url}))
    return {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}


@pytest.mark.parametrize("named_by", ["--server", "NATS_URL", "--context", "--env"])
def test_without_a_terminal_a_named_server_is_changed_only_with_yes(
    tmp_path: Path, clean_server: NatsServer, named_by: str
) -> None:
    url = clean_server.url
    args: list[str] = ["apply", str(SHOP)]
    env: dict[str, str] = {}
    if named_by == "--server":
        args += ["--server", url]
    elif named_by == "NATS_URL":
        env["NATS_URL"] = url
    elif named_by == "--context":
        args += ["--context", "prod"]
        env |= _context(tmp_path, url)
    else:
        shutil.copytree(SHOP, tmp_path / "shop")
        (tmp_path / "reconcile.yaml").write_text(
            f"specs: [shop]\nenvironments:\n  prod: {{servers: '{url}'}}\n"
        )
        args = ["apply", "--env", "prod"]

    refused = reconcile(*args, cwd=tmp_path, env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert NO_TERMINAL in refused.stderr
    assert "+ create Stream ORDERS" in refused.stdout  # the plan it would have applied
    assert "Traceback" not in refused.stderr
    # nothing at all: not even the apply lock's bucket (nothing could be approved, so
    # no lock was taken; "nothing was changed" is true)
    assert not run(api(clean_server, "STREAM.NAMES")).get("streams")

    for flag in ("--yes", "-y", "--auto-approve"):
        done = reconcile(*args, flag, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
    assert stream_names(url) == ["ORDERS"]


# --- Ctrl-C at the prompt ----------------------------------------------------------------


@pytest.mark.parametrize("how", ["typed", "signal"])
def test_ctrl_c_at_the_question_exits_130_with_one_line(
    tmp_path: Path, clean_server: NatsServer, how: str
) -> None:
    term = Terminal("apply", str(SHOP), "--server", clean_server.url, cwd=tmp_path)
    assert term.read_until(QUESTION), term.text
    if how == "typed":
        term.type(b"\x03")  # the terminal turns it into SIGINT for the foreground group
    else:
        os.killpg(term.process.pid, 2)
    assert term.finish() == 130, term.text
    assert "Fatal Python error" not in term.text and "Traceback" not in term.text
    lines = [ln for ln in term.after_question().replace("^C", "").splitlines() if ln.strip()]
    assert lines == ["interrupted: nothing was changed"], term.text
    assert stream_names(clean_server.url) == []


# --- an empty server is an error; every run names its server ----------------------------


@pytest.mark.parametrize("command", ["plan", "apply"])
def test_an_empty_server_is_an_error_not_the_embedded_server(tmp_path: Path, command: str) -> None:
    store = tmp_path / "store"
    for args, env in (
        (["--server", ""], {}),
        (["--server", " , "], {}),
        ([], {"NATS_URL": ""}),
        ([], {"NATS_URL": "  "}),
    ):
        yes = ["-y"] if command == "apply" else []
        done = reconcile(
            command, str(SHOP), "--store", str(store), *yes, *args, cwd=tmp_path, env=env
        )
        assert done.returncode == 1, (args, env, done.stdout, done.stderr)
        assert "empty" in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert not store.exists()  # no embedded server was started
        assert "embedded" not in done.stdout


def test_plan_and_apply_name_the_server_without_its_password(
    tmp_path: Path, server_factory: Any
) -> None:
    server = server_factory(users=[{"user": "alice", "password": "s3cret"}])
    with_password = server.url.replace("nats://", "nats://alice:s3cret@")
    address = f"nats://127.0.0.1:{server.port}"
    for args in (["plan"], ["apply", "-y"]):
        done = reconcile(*args, str(SHOP), "--server", with_password, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "using nats-server " in done.stderr and f" at {address}\n" in done.stderr
        assert "s3cret" not in done.stdout + done.stderr
        assert "embedded" not in done.stdout + done.stderr
    # the embedded server: said plainly, and applied without a question
    store = ["--store", str(tmp_path / "store")]
    for args in (["plan"], ["apply"]):
        done = reconcile(*args, str(SHOP), *store, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "using embedded nats-server " in done.stderr
        assert "using nats-server" not in done.stderr


# --- the Action ----------------------------------------------------------------------------


def action(tmp_path: Path, **inputs: str) -> subprocess.CompletedProcess[str]:
    """``python -m action`` with the runner's variables; ``inputs`` become INPUT_*."""
    (tmp_path / "specs").mkdir(exist_ok=True)
    (tmp_path / "specs" / "s.yaml").write_text("kind: Stream\nname: ACT\nsubjects: [act.>]\n")
    temp = tmp_path / "runner-temp"
    temp.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(REPO),
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(tmp_path),
        "RUNNER_TEMP": str(temp),
        "INPUT_PATH": "specs",
        "INPUT_UPLOAD_PLAN": "false",
    } | {"INPUT_" + k.upper().replace("-", "_"): v for k, v in inputs.items()}
    return subprocess.run(
        [sys.executable, "-m", "action"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("mode", ["plan", "apply"])
def test_the_action_without_a_server_is_an_error_not_a_throwaway_server(
    tmp_path: Path, mode: str
) -> None:
    for given in ({}, {"server": ""}, {"server": "  "}):
        done = action(tmp_path, mode=mode, **given)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "::error title=jetstream-gitops::input 'server' is empty" in done.stdout
        assert "embedded" not in done.stdout.replace("throwaway embedded server", "")
        assert not (tmp_path / "runner-temp" / "jetstream-gitops" / "embedded-server").exists()


@pytest.mark.parametrize("scheme", ["nats://", ""], ids=["scheme", "no-scheme"])
def test_the_action_masks_the_password_and_the_token_of_a_server_url(
    tmp_path: Path, server_factory: Any, scheme: str
) -> None:
    """``alice:s3cret@host`` and ``T0KEN@host`` (with or without a scheme, as nats-py
    takes them): the secret is masked before anything is printed, and the log names
    the server without it."""
    with_users = server_factory(users=[{"user": "alice", "password": "s3cret"}])
    with_token = server_factory(token="T0KEN")
    for server, secret in ((with_users, "alice:s3cret"), (with_token, "T0KEN")):
        url = f"{scheme}{secret}@127.0.0.1:{server.port}"
        done = action(tmp_path, mode="apply", server=url)
        assert done.returncode == 0, done.stdout + done.stderr
        hidden = secret.rpartition(":")[2]
        lines = done.stdout.splitlines()
        assert lines[0] == f"::add-mask::{hidden}", done.stdout
        assert "using nats-server " in done.stdout
        assert f" at nats://127.0.0.1:{server.port}" in done.stdout
        assert not any(hidden in line for line in lines[1:])
        assert stream_names(server_url(server, secret)) == ["ACT"]


def server_url(server: NatsServer, secret: str) -> str:
    return f"nats://{secret}@127.0.0.1:{server.port}"
