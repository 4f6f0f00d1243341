"""Issue 30, attacked again: what is applied is what was reviewed, and caches and files
cannot smuggle changes in.

Each test is a hole found by trying to break a guarantee as an attacker (or a careless
user) would, on real ``nats-server`` processes; it failed on the code before its fix.
Messages are published first and counted after.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cache_entries import CONFIG, Entry
from cli_runner import reconcile
from servers import NatsServer, options, run
from terminal import QUESTION, Terminal

from reconciler.jetstream import open_client

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
HOST_SECRET = "root:x:0:0 host secret, never for a server"


def publish(server: NatsServer, subject: str, messages: int) -> None:
    async def go() -> None:
        async with open_client(options(server)) as client:
            for i in range(messages):
                await client.publish(subject, f"m{i}".encode())

    run(go())


def count(server: NatsServer, stream: str) -> int:
    async def go() -> int:
        async with open_client(options(server)) as client:
            return int((await client.stream_info(stream))["state"]["messages"])

    return run(go())


def stream_names(server: NatsServer) -> list[str]:
    async def go() -> list[str]:
        async with open_client(options(server)) as client:
            return sorted(await client.stream_names())

    return run(go())


def kv_value(server: NatsServer, bucket: str, key: str) -> bytes | None:
    async def go() -> bytes | None:
        async with open_client(options(server)) as client:
            found = await client.kv_entry(bucket, key)
            return None if found is None else bytes(found.value)

    return run(go())


# --- caches and files ------------------------------------------------------------------

ENTRY_SPECS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
---
kind: KeyValue
name: CONF
history: 5
---
kind: KeyValueEntry
bucket: CONF
key: motd
value_file: data/motd.txt
"""


def test_a_value_file_made_a_symlink_after_a_cached_run_is_refused_not_read(
    clean_server: NatsServer, tmp_path: Path, figures: Any
) -> None:
    """The spec cache re-reads a ``value_file`` on a hit; the cache key is the spec
    files' bytes. A pull request that leaves the spec files alone and turns
    ``data/motd.txt`` (or ``data/``) into a symlink out of the repository hit the cache:
    the plan printed the host file (base64) and apply wrote it into the bucket. Now the
    hit is a miss and the path is judged again: FILE:LINE error, nothing applied."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "data").mkdir()
    (repo / "data" / "motd.txt").write_text("hello\n")
    (repo / "specs.yaml").write_text(ENTRY_SPECS)
    secret = tmp_path / "host-secret.txt"
    secret.write_text(HOST_SECRET)
    env = {"RECONCILE_SPEC_CACHE": str(tmp_path / "cache"), "RECONCILE_CACHE_KEY": "k" * 40}
    server = ["--server", clean_server.url]
    done = reconcile("apply", "specs.yaml", *server, "-y", cwd=repo, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list((tmp_path / "cache").glob("specs-*.json"))  # the run was cached
    publish(clean_server, "orders.new", 100)
    leaked = base64.b64encode(HOST_SECRET.encode()).decode()

    for swap in ("file", "folder"):
        if swap == "file":
            (repo / "data" / "motd.txt").unlink()
            (repo / "data" / "motd.txt").symlink_to(secret)
        else:
            (repo / "data" / "motd.txt").unlink()
            (repo / "data").rmdir()
            (tmp_path / "motd.txt").symlink_to(secret)
            (repo / "data").symlink_to(tmp_path)
        for command in (["plan"], ["apply", "-y"]):
            ran = reconcile(*command, "specs.yaml", *server, cwd=repo, env=env)
            said = ran.stdout + ran.stderr
            assert ran.returncode == 1, (swap, command, said)
            assert "specs.yaml:12: value_file" in said and "symlink" in said, said
            assert leaked not in said and HOST_SECRET not in said, said
            assert "Traceback" not in said
    assert kv_value(clean_server, "CONF", "motd") == b"hello\n"
    assert count(clean_server, "ORDERS") == 100
    figures.add("security_cases", 4)
    figures.add("messages_checked", 100)


CACHED_SPECS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
"""


@pytest.mark.parametrize("weak", ["k", " " * 40], ids=["one-letter", "blanks"])
def test_a_short_or_blank_cache_key_is_no_key(
    clean_server: NatsServer, tmp_path: Path, weak: str, figures: Any
) -> None:
    """``RECONCILE_CACHE_KEY=k`` (or forty blanks) was taken as the key: whoever restores
    the folder has the entries and their MACs and finds such a key offline, then seals
    an entry of their own under it. Now a key under 32 characters (blanks not counted)
    authenticates nothing: the forged entry, sealing ORDERS, is never used."""
    (tmp_path / "specs.yaml").write_text(CACHED_SPECS)
    cache = tmp_path / "cache"
    server = ["--server", clean_server.url]
    strong = {"RECONCILE_SPEC_CACHE": str(cache), "RECONCILE_CACHE_KEY": "s" * 64}
    done = reconcile("apply", "specs.yaml", *server, "-y", cwd=tmp_path, env=strong)
    assert done.returncode == 0, done.stdout + done.stderr
    publish(clean_server, "orders.x", 100)
    [entry] = cache.glob("specs-*.json")  # the attacker's template: name and shape
    forged = Entry(entry)
    orders = forged.spec("ORDERS")
    orders[CONFIG] = {**orders[CONFIG], "sealed": True}
    forged.write(weak.encode())  # sealed under the weak key

    env = {"RECONCILE_SPEC_CACHE": str(cache), "RECONCILE_CACHE_KEY": weak}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    plan = reconcile("plan", "specs.yaml", *server, "--format", "json", cwd=tmp_path, env=env)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["changes"] == [], plan.stdout
    applied = reconcile("apply", "specs.yaml", *server, "-y", cwd=tmp_path, env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    publish(clean_server, "orders.y", 5)  # still takes writes: not sealed
    assert count(clean_server, "ORDERS") == 105
    figures.add("security_cases", 1)
    figures.add("messages_checked", 105)


NUL_SPECS = """\
kind: KeyValue
name: CONF
---
kind: KeyValueEntry
bucket: CONF
key: nul
value_file: "motd.txt\\0../../etc/passwd"
"""


def test_gits_folder_in_any_case_is_never_read(clean_server: NatsServer, tmp_path: Path) -> None:
    """``value_file: .GIT/config`` passed the ``.git`` rule (compared case-sensitively);
    on a case-insensitive disk (a macOS laptop checking out a pull request) that is
    git's config, which may hold the checkout's token. Now any case is refused at its
    line (the test makes the folder, as a case-sensitive disk needs)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".GIT").mkdir()
    (tmp_path / ".GIT" / "config").write_text("extraheader = AUTHORIZATION: basic c2VjcmV0\n")
    specs = NUL_SPECS.replace('"motd.txt\\0../../etc/passwd"', ".GIT/config")
    (tmp_path / "specs.yaml").write_text(specs)
    done = reconcile("apply", "specs.yaml", "--server", clean_server.url, "-y", cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "specs.yaml:7: value_file: '.GIT/config' is inside .git" in said, said
    assert "c2VjcmV0" not in said and stream_names(clean_server) == []


def test_a_nul_byte_in_a_named_path_is_an_error_at_its_line_not_a_traceback(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``value_file: "a\\0b"`` (YAML writes a NUL as ``\\0``) ended in a Python
    traceback (``embedded null byte``); a project file's path did the same. Now each is
    one FILE:LINE error and nothing reaches the server."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "motd.txt").write_text("hi")
    (tmp_path / "specs.yaml").write_text(NUL_SPECS)
    done = reconcile("apply", "specs.yaml", "--server", clean_server.url, "-y", cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "specs.yaml:7: value_file" in said and "NUL" in said, said
    assert "Traceback" not in said
    assert stream_names(clean_server) == []

    (tmp_path / "reconcile.yaml").write_text(
        'specs: ["specs.yaml\\0x"]\nenvironments:\n  dev:\n    embedded: true\n'
    )
    checked = reconcile("validate", cwd=tmp_path)
    said = checked.stdout + checked.stderr
    assert checked.returncode == 1 and "reconcile.yaml:1" in said and "NUL" in said, said
    assert "Traceback" not in said


PROJECT = """\
specs: ["specs.yaml"]
environments:
  dev:
    servers: {env: DEV_URL}
"""


def test_a_server_url_with_control_characters_is_refused_and_headings_are_escaped(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A project's server URL (written in the file, or read from a variable) holding ESC,
    a bidi override or a line break reached ``plan --all-envs`` as it was: its heading
    and summary printed a raw ``\\n::error::`` (a workflow command) and ESC; a ``[`` in
    one ended in a traceback (urllib's "Invalid IPv6 URL"). Now each is a FILE:LINE
    error naming the field (never the value), and a URL that is one (but holds Markdown)
    is escaped in the Markdown heading."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "specs.yaml").write_text(CACHED_SPECS)
    hostile = "nats://x\x1b[2J\u202e\n::error::pwned-url:1"
    for written in ("nats://x\\e[2J:1", "nats://x\\e\\u202e\\n::error::pwned:1"):
        (tmp_path / "reconcile.yaml").write_text(PROJECT.replace("{env: DEV_URL}", f'"{written}"'))
        for command in (["validate"], ["envs"], ["plan", "--all-envs"]):
            done = reconcile(*command, cwd=tmp_path)
            said = done.stdout + done.stderr
            assert done.returncode == 1, (command, said)
            assert "reconcile.yaml:4: environments.dev.servers: not a valid server URL" in said
            assert "Traceback" not in said and "\x1b" not in said, said

    (tmp_path / "reconcile.yaml").write_text(PROJECT)
    done = reconcile("plan", "--all-envs", cwd=tmp_path, env={"DEV_URL": hostile})
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "reconcile.yaml:4: environments.dev.servers: environment variable DEV_URL" in said
    assert "pwned-url" not in said and "\x1b" not in said, said

    markup = f"{clean_server.url},nats://x<img src=x>:1"
    done = reconcile("plan", "--all-envs", "--format", "markdown", cwd=tmp_path,
                     env={"DEV_URL": markup})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "<img" not in done.stdout and "&lt;img src=x&gt;" in done.stdout, done.stdout
    assert stream_names(clean_server) == []  # plans only


NO_SERVER = """\
specs: ["specs.yaml"]
environments:
  prod:
    domain: hub
  staging:
    user: deployer
    password: {env: STAGING_PW}
"""


def test_an_environment_naming_no_server_is_an_error_not_the_embedded_server(
    tmp_path: Path,
) -> None:
    """``--server ''`` and an empty ``NATS_URL`` are errors, but a project environment
    that named no server (``servers`` forgotten, only a domain) was silently the
    embedded server: ``apply --env prod`` without a terminal and without ``--yes``
    reported "Apply complete" against a throwaway server; one naming only credentials
    went to nats-py's default ``127.0.0.1:4222`` while ``reconcile envs`` said
    "embedded". Now each is an error at its line; ``embedded: true`` says it."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "specs.yaml").write_text(CACHED_SPECS)
    (tmp_path / "reconcile.yaml").write_text(NO_SERVER)
    for command in (["apply", "--env", "prod"], ["envs"], ["validate"]):
        done = reconcile(*command, cwd=tmp_path, env={"STAGING_PW": "pw"})
        said = done.stdout + done.stderr
        assert done.returncode == 1, (command, said)
        assert "reconcile.yaml:3: environments.prod: names no server" in said, said
        assert "reconcile.yaml:5: environments.staging: names no server" in said, said
        assert "embedded nats-server" not in said and "Traceback" not in said, said
    assert not (tmp_path / ".reconcile").exists()  # no embedded server was started
    (tmp_path / "reconcile.yaml").write_text(NO_SERVER.replace("domain: hub", "embedded: true"))
    done = reconcile("envs", cwd=tmp_path)
    assert done.returncode == 1 and "environments.prod" not in done.stdout + done.stderr


# --- the embedded server ----------------------------------------------------------------

SPECS = """\
kind: Stream
name: PLANTED
subjects: ["planted.>"]
"""


def test_a_forged_embedded_state_file_never_makes_a_real_server_the_embedded_one(
    server_factory: Any, tmp_path: Path, figures: Any
) -> None:
    """The embedded server needs no ``--yes``. Its state file (``.reconcile/
    embedded.json``: a pid and a port) is a file in the checkout anyone can commit:
    naming a real nats-server on this host made an apply without a terminal and without
    ``--yes`` change that server as "embedded", then SIGTERM it as the last user out.
    Now a server this tool did not start is never taken for the embedded one: the run
    starts its own, and the real server keeps its streams, messages and process."""
    real = server_factory()
    run(_create_orders(real))
    publish(real, "orders.x", 100)
    (tmp_path / "specs.yaml").write_text(SPECS)
    store = tmp_path / ".reconcile"
    store.mkdir()
    (store / "embedded.json").write_text(json.dumps({"pid": real.pid, "port": real.port}))
    done = reconcile("apply", "specs.yaml", cwd=tmp_path)  # no terminal, no --yes
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert f"127.0.0.1:{real.port}" not in said, said  # the run used its own server
    assert real.running, "the real server was stopped by an embedded run"
    assert stream_names(real) == ["ORDERS"]
    assert count(real, "ORDERS") == 100
    again = reconcile("plan", "specs.yaml", cwd=tmp_path)  # its own server, reused
    assert again.returncode == 0 and "No changes" in again.stdout, again.stdout + again.stderr
    figures.add("security_cases", 1)
    figures.add("messages_checked", 100)


async def _create_orders(server: NatsServer) -> None:
    async with open_client(options(server)) as client:
        await client.create_stream({"name": "ORDERS", "subjects": ["orders.>"]})


# --- GitHub's older workflow commands ----------------------------------------------------

#: Every command the GitHub runner registers (actions/runner ActionCommandManager).
RUNNER_COMMANDS = (
    "set-env|set-output|save-state|add-mask|add-path|add-matcher|remove-matcher|debug|"
    "warning|error|notice|group|endgroup|echo|stop-commands"
)
_LEGACY = re.compile(rf"##\[({RUNNER_COMMANDS})[ \]]", re.I)


def legacy_commands(log: str) -> list[str]:
    """The ``##[command]`` lines the runner would act on in ``log`` (its ``TryParse``
    looks for ``##[`` anywhere in a line), but for those between ``::stop-commands::TOKEN``
    and ``::TOKEN::``."""
    found: list[str] = []
    stopped: str | None = None
    for raw in re.split(r"\r\n|\r|\n", log):
        line = raw.lstrip()
        if stopped is not None:
            if line == f"::{stopped}::":
                stopped = None
            continue
        if line.startswith("::stop-commands::"):
            stopped = line.removeprefix("::stop-commands::")
            continue
        if _LEGACY.search(raw):
            found.append(raw)
    return found


HOSTILE_DESCRIPTION = "x ##[error title=pwned]pwned-description ##[add-mask]Plan"
HOSTILE_NAME = "##[stop-commands]pwned"


async def _create_hostile(server: NatsServer) -> None:
    async with open_client(options(server)) as client:
        await client.create_stream(
            {
                "name": "HOSTILE",
                "subjects": ["hostile.>"],
                "description": HOSTILE_DESCRIPTION,
                "metadata": {"note": "##[set-output name=has-changes;]false"},
            }
        )
        marker = {"io.jetstream-gitops/managed-by": "reconcile"}
        await client.create_stream(
            {"name": HOSTILE_NAME, "subjects": ["evil.>"], "metadata": marker}
        )


HOSTILE_SPECS = """\
kind: Stream
name: HOSTILE
subjects: ["hostile.>"]
description: reviewed
"""


def test_the_runners_older_workflow_commands_from_the_server_are_inert_in_every_output(
    clean_server: NatsServer, tmp_path: Path, figures: Any
) -> None:
    """The GitHub runner also reads ``##[command]data`` (its legacy form) anywhere in a
    log line: a stream description ``##[error]...`` made an annotation, ``##[add-mask]``
    hid words of every later line, a stream named ``##[stop-commands]...`` stopped the
    Action's own annotations. Plans, drift reports (every format) and the Action's log
    printed them as they were; now none is a command, and the JSON still reads back the
    server's exact text."""
    run(_create_hostile(clean_server))
    publish(clean_server, "hostile.x", 10)
    (tmp_path / "specs.yaml").write_text(HOSTILE_SPECS)
    server = ["--server", clean_server.url]
    outputs = []
    for fmt in ("text", "markdown", "json"):
        done = reconcile("plan", "specs.yaml", *server, "--prune", "--format", fmt, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout + done.stderr)
        if fmt == "json":
            [change] = [c for c in json.loads(done.stdout)["changes"] if c["name"] == "HOSTILE"]
            described = [f["before"] for f in change["fields"] if f["path"] == "description"]
            assert described == [HOSTILE_DESCRIPTION]
    for fmt in ("text", "markdown", "json", "html"):
        done = reconcile("drift", "specs.yaml", *server, "--format", fmt, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        outputs.append(done.stdout + done.stderr)
    step = action_step(tmp_path, clean_server)
    assert step.returncode == 0, step.stdout + step.stderr
    outputs.append(step.stdout + step.stderr)
    for said in outputs:
        assert "pwned" in said  # shown ...
        assert legacy_commands(said) == [], said  # ... as text
    assert count(clean_server, "HOSTILE") == 10
    figures.add("outputs_grepped", len(outputs))
    figures.add("messages_checked", 10)


_MENTION = re.compile(r"@(?!&#8203;|\u200b)[A-Za-z0-9]")


def test_a_name_from_the_server_mentions_nobody_in_markdown(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A stream named ``@security-team`` (the server takes the ``@``) was written as
    ``Stream @security-team`` in the Markdown a pull-request comment and the step
    summary carry: GitHub notifies whoever that names. Now the ``@`` is followed by a
    zero-width space in Markdown text (code blocks never mention)."""
    marker = {"io.jetstream-gitops/managed-by": "reconcile"}

    async def create() -> None:
        async with open_client(options(clean_server)) as client:
            await client.create_stream(
                {"name": "@security-team", "subjects": ["m.>"], "metadata": marker}
            )

    run(create())
    publish(clean_server, "m.x", 10)
    (tmp_path / "specs.yaml").write_text(HOSTILE_SPECS)
    server = ["--server", clean_server.url]
    markdown = []
    for prune in ([], ["--prune"]):
        done = reconcile(
            "plan", "specs.yaml", *server, *prune, "--format", "markdown", cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        markdown.append(done.stdout)
    drift = reconcile("drift", "specs.yaml", *server, "--format", "markdown", cwd=tmp_path)
    assert drift.returncode == 2, drift.stderr
    markdown.append(drift.stdout)
    step = action_step(tmp_path, clean_server)
    assert step.returncode == 0, step.stdout + step.stderr
    markdown.append((tmp_path / "runner" / "summary.md").read_text())
    for text in markdown:
        prose = re.sub(r"^(`{3,})[^\n]*\n.*?^\1$", "", text, flags=re.S | re.M)
        prose = re.sub(r"(`+).+?\1", "", prose)
        assert "security-team" in text and not _MENTION.search(prose), text
    assert count(clean_server, "@security-team") == 10


NACK = """\
apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata:
  name: s
spec:
  name: OLD
  subjects: ["old.>"]
  account: team-a
---
apiVersion: jetstream.nats.io/v1beta2
kind: Account
metadata:
  name: team-a
spec:
  servers: ["nats://h:1 ##[error]pwned-server", "nats://x\\e]8;;http://e\\a\\n::error::pwned"]
  user:
    user: "u ##[add-mask]Plan"
"""


def test_imported_nack_accounts_are_shown_escaped(tmp_path: Path) -> None:
    """Without a project file, ``import --from nack`` prints the Accounts it found as a
    YAML snippet: a hostile manifest's server URL or user (``##[error]``, ``##[add-mask]``,
    an OSC hyperlink, a line starting ``::error::`` once YAML unfolds nothing) reached
    stderr as written. Now each line is escaped as every other output."""
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "a.yaml").write_text(NACK)
    done = reconcile("import", "--from", "nack", "k8s", "--out", "specs", cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "NACK Account(s) found" in said and "pwned-server" in said, said
    assert legacy_commands(said) == [] and "\x1b" not in said and "\x07" not in said, said


def workflow_commands(log: str) -> list[str]:
    """The lines the runner would read a workflow command in: ``::`` after blanks (its
    ``TryParseV2``) or a legacy ``##[command]`` anywhere."""
    found = [line for line in re.split(r"\r\n|\r|\n", log) if line.lstrip().startswith("::")]
    return found + legacy_commands(log)


WRAPPED = "a" * 70 + " ::error::pwned-folded"


async def _create_folding(server: NatsServer) -> None:
    async with open_client(options(server)) as client:
        await client.create_stream(
            {
                "name": "FOLD",
                "subjects": ["fold.>"],
                "description": WRAPPED,
                "metadata": {
                    "::error::pwned-key": "x\n::add-mask::pwned-line ##[error]v1",
                    "io.jetstream-gitops/managed-by": "reconcile",
                },
            }
        )


def test_export_printed_to_a_log_starts_no_workflow_command(
    clean_server: NatsServer, tmp_path: Path, figures: Any
) -> None:
    """``reconcile export`` prints YAML: PyYAML folds a long string at a blank, so a
    description of 70 letters then `` ::error::...`` put ``::error::`` at the start of a
    line (a command in a CI log), as did a metadata value's line break and a key
    starting ``::``; ``##[error]`` went out as it was. Now such strings are double-quoted
    on one line (``\\n``, ``#\\x23[``) and the files still read back to the server's
    exact values: a plan on them is empty."""
    run(_create_folding(clean_server))
    publish(clean_server, "fold.x", 10)
    server = ["--server", clean_server.url]
    printed = reconcile("export", *server, cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    assert "pwned-folded" in printed.stdout and "pwned-line" in printed.stdout
    assert workflow_commands(printed.stdout) == [], printed.stdout
    done = reconcile("export", *server, "--out", "specs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plan = reconcile("plan", "specs", *server, "--format", "json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["changes"] == [], plan.stdout
    assert count(clean_server, "FOLD") == 10
    figures.add("messages_checked", 10)


def test_the_actions_log_wraps_a_legacy_command_too() -> None:
    """Whatever reaches the Action's log: a line holding ``##[`` anywhere is written
    inside a ``::stop-commands::`` block, as a line starting with ``::`` was."""
    import io

    from action.runner import Runner

    out = io.StringIO()
    Runner(env={}, stdout=out).log("plan for x ##[add-mask]Plan\n  y ##[error]pwned-log")
    assert "pwned-log" in out.getvalue()
    assert legacy_commands(out.getvalue()) == [], out.getvalue()


def action_step(root: Path, server: NatsServer) -> subprocess.CompletedProcess[str]:
    """``python -m action`` in mode plan, as the GitHub runner starts it."""
    runner = root / "runner"
    runner.mkdir(exist_ok=True)
    env: dict[str, Any] = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(root),
        "PYTHONPATH": str(REPO),
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(root),
        "GITHUB_OUTPUT": str(runner / "output"),
        "GITHUB_STEP_SUMMARY": str(runner / "summary.md"),
        "RUNNER_TEMP": str(runner),
        "INPUT_PATH": "specs.yaml",
        "INPUT_SERVER": server.url,
        "INPUT_MODE": "plan",
        "INPUT_PRUNE": "true",
    }
    return subprocess.run(
        [sys.executable, "-m", "action"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


# --- what is applied is what was reviewed ----------------------------------------------


def entry_specs(value: str, *, secret: bool) -> str:
    return (
        "kind: KeyValue\nname: CONF\nhistory: 5\n---\n"
        f"kind: KeyValueEntry\nbucket: CONF\nkey: cfg\nsecret: {str(secret).lower()}\n"
        f"value: {json.dumps(value)}\n"
    )


@pytest.mark.parametrize("hidden", ["long", "secret"])
def test_a_kv_value_written_while_the_question_waits_is_not_overwritten_unreviewed(
    clean_server: NatsServer, tmp_path: Path, hidden: str, figures: Any
) -> None:
    """The plan shows an entry's old value cut to 200 characters, and a secret's not at
    all; the review compared what the plan shows. Someone writing the key while the
    question waited (past its 200th character, or a secret) went unnoticed: 'yes'
    overwrote a value nobody reviewed. Now the value the step replaces is compared
    too: refused, the concurrent write kept."""
    secret = hidden == "secret"
    first = "A" * 300
    spec = tmp_path / "entries.yaml"
    spec.write_text(entry_specs(first, secret=secret))
    server = ["--server", clean_server.url]
    done = reconcile("apply", str(spec), *server, "-y", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    spec.write_text(entry_specs("reviewed", secret=secret))

    term = Terminal("apply", str(spec), *server, cwd=tmp_path)
    assert term.read_until(QUESTION), term.text
    assert "~ update KeyValueEntry CONF/cfg" in term.text, term.text
    concurrent = ("A" * 250 + "B" * 50).encode()
    run(_write_key(clean_server, concurrent))
    status = term.answer(b"yes\r")
    assert status == 1, term.text
    said = term.text.split(QUESTION.decode(), 1)[1]
    assert "KeyValueEntry CONF/cfg" in said and "nothing was changed" in said, said
    assert "Traceback" not in term.text
    assert kv_value(clean_server, "CONF", "cfg") == concurrent
    assert count(clean_server, "KV_CONF") == 2  # the first value and the concurrent one
    figures.add("security_cases", 1)


async def _write_key(server: NatsServer, value: bytes) -> None:
    async with open_client(options(server)) as client:
        await client.publish("$KV.CONF.cfg", value)


# --- the pull-request comment reviewers read ----------------------------------------------


class Comments:
    """Issue comments of pull request o/r#7 as GitHub's REST API keeps them: each with
    its author (``user.login``, ``user.type``) and ``author_association``. A token with
    write access may edit anyone's comment, as GitHub's job token may."""

    def __init__(self) -> None:
        self.items: dict[int, dict[str, Any]] = {}
        self.patched: list[int] = []

    def add(self, body: str, *, login: str, kind: str, association: str) -> dict[str, Any]:
        number = 1000 + len(self.items)
        self.items[number] = {
            "id": number,
            "body": body,
            "html_url": f"https://gh/c/{number}",
            "user": {"login": login, "type": kind},
            "author_association": association,
        }
        return self.items[number]


def comments_handler(state: Comments) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def sent(self) -> str:
            length = int(self.headers.get("Content-Length", "0"))
            return str(json.loads(self.rfile.read(length))["body"])

        def do_GET(self) -> None:
            self.reply(200, list(state.items.values()))

        def do_POST(self) -> None:
            bot = {"login": "github-actions[bot]", "kind": "Bot", "association": "NONE"}
            self.reply(201, state.add(self.sent(), **bot))

        def do_PATCH(self) -> None:
            number = int(self.path.rsplit("/", 1)[1])
            state.items[number]["body"] = self.sent()
            state.patched.append(number)
            self.reply(200, state.items[number])

    return Handler


@pytest.fixture
def github() -> Iterator[tuple[Comments, str]]:
    state = Comments()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), comments_handler(state))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def comment_step(root: Path, server: NatsServer, api: str) -> subprocess.CompletedProcess[str]:
    """The Action in mode plan on a pull_request event, commenting."""
    event = root / "event.json"
    event.write_text(json.dumps({"number": 7, "pull_request": {"number": 7}}))
    runner = root / "runner"
    runner.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(root),
        "PYTHONPATH": str(REPO),
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(root),
        "GITHUB_OUTPUT": str(runner / "output"),
        "GITHUB_STEP_SUMMARY": str(runner / "summary.md"),
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_TOKEN": "ghs_test-token",
        "GITHUB_API_URL": api,
        "RUNNER_TEMP": str(runner),
        "INPUT_PATH": "specs.yaml",
        "INPUT_SERVER": server.url,
        "INPUT_MODE": "plan",
        "INPUT_COMMENT": "true",
    }
    return subprocess.run(
        [sys.executable, "-m", "action"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


DESTRUCTIVE = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_msgs: 10
"""


def test_a_comment_carrying_the_marker_written_by_someone_else_never_holds_the_plan(
    clean_server: NatsServer, tmp_path: Path, github: tuple[Comments, str], figures: Any
) -> None:
    """The Action edits the pull request's comment that starts with its marker. Anyone
    may write that marker: a contributor's comment posted first was the one edited, so
    the plan reviewers read sat in a comment its author can edit at will (a plan that
    deletes 90 messages turned back into "No changes"); where the token may not edit it,
    the step failed. Now only a bot's comment (the job token's) or one by someone with
    write access is this tool's; the contributor's stays as they wrote it, and the plan
    goes to a comment of the Action's own, kept current on the next run."""
    from action.comment import marker

    comments, api = github
    tag = marker("specs.yaml")
    forged = comments.add(
        f"{tag}\n### ✅ No changes", login="mallory", kind="User", association="CONTRIBUTOR"
    )
    run(_create_orders(clean_server))
    publish(clean_server, "orders.x", 100)
    (tmp_path / "specs.yaml").write_text(DESTRUCTIVE)

    for _ in range(2):
        step = comment_step(tmp_path, clean_server, api)
        assert step.returncode == 0, step.stdout + step.stderr
    assert forged["body"] == f"{tag}\n### ✅ No changes" and forged["id"] not in comments.patched
    own = [c for c in comments.items.values() if c["user"]["type"] == "Bot"]
    assert len(own) == 1 and own[0]["body"].startswith(tag), comments.items
    assert "ORDERS" in own[0]["body"] and own[0]["id"] in comments.patched  # kept current
    assert count(clean_server, "ORDERS") == 100  # a plan: nothing applied
    figures.add("security_cases", 1)
    figures.add("messages_checked", 100)


def test_yes_typed_before_the_plan_was_shown_answers_nothing(
    clean_server: NatsServer, tmp_path: Path, figures: Any
) -> None:
    """A ``yes`` typed ahead (pasted with the command, or typed while the plan was being
    made) waited in the terminal's buffer and answered the question the moment it was
    asked: the plan, cutting 100 messages to 10, was applied before anyone read it. Now
    what was typed before the question is discarded; the question waits for an answer
    given after it ('no' here: the 100 messages stay)."""
    run(_create_orders(clean_server))
    publish(clean_server, "orders.x", 100)
    spec = tmp_path / "orders.yaml"
    spec.write_text(DESTRUCTIVE)
    server = ["--server", clean_server.url]
    term = Terminal("apply", str(spec), *server, "--allow-data-loss", cwd=tmp_path)
    os.write(term.primary, b"yes\r")  # before the plan: Python has not even started
    assert term.read_until(QUESTION), term.text
    assert "deletes at least 90" in term.text, term.text
    status = term.answer(b"no\r")
    assert status == 1, term.text
    assert "Apply cancelled: nothing was changed." in term.text, term.text
    assert count(clean_server, "ORDERS") == 100
    figures.add("messages_checked", 100)
