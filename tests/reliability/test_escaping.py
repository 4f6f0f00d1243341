"""Names, descriptions, metadata and file names cannot drive a terminal or a CI log
(issue 30).

A stream created on a real server carries in its name what the server accepts there (an
ESC sequence, a C1 control, a bidi override, ``::error::``) and in its description and
metadata anything: a screen clear, an OSC 8 hyperlink, U+202E, ``\\n::error::pwned``,
``[x](http://evil)``, HTML. Every output shows them escaped: the plan as text, Markdown
and JSON, the drift report, error lines, the Action's log and step summary. The Action's
log is read the way the GitHub runner reads it: no line outside a
``::stop-commands::`` block starts a workflow command that carries the hostile text.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, options, run

from reconciler.jetstream import open_client
from reconciler.model.normalize import ownership_marker
from reconciler.specs.spec import DEFAULT_OWNER

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
#: What the server takes in a stream name (no spaces, no path separators, no newline).
EVIL_NAME = "EVIL\x1b[2J\x9b31m\u202e::error::pwned-name[x](http:evil)<b"
HOSTILE = (
    "[x](http://evil.example) <img src=x> \x1b[2J\x1b]8;;http://e/\x07click\x1b]8;;\x07"
    "\u202etxt\n::error::pwned-description\r\n::add-mask::pwned-mask\x00\x9d"
)
METADATA = {"key\x1b[31m\u202e": "\n::error::pwned-metadata\x1b]8;;http://evil\x07"}
SPECS = """\
kind: Stream
name: HOSTILE
subjects: ["hostile.>"]
description: reviewed
"""
#: Characters no output may carry as they are.
RAW = ("\x1b", "\x9b", "\x9d", "\x07", "\x00", "\u202e", "\r")


async def _create_hostile(server: NatsServer) -> None:
    async with open_client(options(server)) as client:
        await client.create_stream(
            {
                "name": "HOSTILE",
                "subjects": ["hostile.>"],
                "description": HOSTILE,
                "metadata": METADATA,
            }
        )
        await client.create_stream({"name": EVIL_NAME, "subjects": ["evil.>"]})
        for i in range(10):
            await client.publish("hostile.x", f"m{i}".encode())


def commands(log: str) -> list[str]:
    """The workflow commands the GitHub runner would act on in ``log``: lines starting
    (after blanks) with ``::``, but for those between ``::stop-commands::TOKEN`` and
    ``::TOKEN::``."""
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
        if line.startswith("::"):
            found.append(line)
    return found


def assert_no_markup(markdown: str) -> None:
    """Outside code blocks and spans, no link, image or HTML tag made of hostile text."""
    prose = re.sub(r"^(`{3,})[^\n]*\n.*?^\1$", "", markdown, flags=re.S | re.M)
    prose = re.sub(r"(`+).+?\1", "", prose)
    assert not re.search(r"(?<!\\)\]\(", prose), prose
    assert "<img" not in prose and "<b" not in prose, prose


#: The workflow commands the Action itself writes (annotations, masks of its secrets).
OWN_COMMANDS = ("error", "warning", "add-mask")


def assert_inert(text: str, *, log: bool = True) -> None:
    """No raw control or bidi character; in a log, every workflow command one of the
    Action's own, its hostile text only as escaped data (never a mask, never a name)."""
    for char in RAW:
        assert char not in text, (char, text)
    if not log:
        return
    for command in commands(text):
        found = re.match(r"::([A-Za-z-]+)(?: ([^:]*))?::(.*)$", command)
        assert found is not None, command
        name, properties, data = found.groups()
        assert name in OWN_COMMANDS, command
        assert name != "add-mask" or "pwned" not in data, command
        if name == "error":  # the Action's annotations say who wrote them
            assert "title=jetstream-gitops" in (properties or ""), command
        for item in (properties or "").split(",") if properties else ():
            key, _, value = item.partition("=")  # file=..., line=..., title=...
            assert key.isalpha() and ":" not in value, command


def test_hostile_names_descriptions_and_metadata_are_escaped_in_every_output(
    clean_server: NatsServer, tmp_path: Path, figures: Any
) -> None:
    run(_create_hostile(clean_server))
    (tmp_path / "specs.yaml").write_text(SPECS)
    server = ["--server", clean_server.url]

    text = reconcile("plan", "specs.yaml", *server, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "\\x1b[2J" in text.stdout and "\\u202e" in text.stdout  # shown, escaped
    assert "EVIL\\x1b[2J\\x9b31m\\u202e::error::pwned-name" in text.stdout  # unmanaged
    assert_inert(text.stdout + text.stderr)

    markdown = reconcile("plan", "specs.yaml", *server, "--format", "markdown", cwd=tmp_path)
    assert markdown.returncode == 0, markdown.stderr
    assert_inert(markdown.stdout)
    assert_no_markup(markdown.stdout)
    assert "<img src=x>" in markdown.stdout  # in the diff block: code, shown as text

    plan_json = reconcile("plan", "specs.yaml", *server, "--format", "json", cwd=tmp_path)
    assert plan_json.returncode == 0, plan_json.stderr
    assert_inert(plan_json.stdout)
    [change] = json.loads(plan_json.stdout)["changes"]
    assert [f["before"] for f in change["fields"] if f["path"] == "description"] == [HOSTILE]

    for fmt in ("text", "markdown", "json", "html"):
        drift = reconcile("drift", "specs.yaml", *server, "--format", fmt, cwd=tmp_path)
        assert drift.returncode == 2, drift.stderr
        assert_inert(drift.stdout + drift.stderr)
        if fmt == "html":
            assert "<img" not in drift.stdout

    step = action_step(tmp_path, clean_server)
    assert step.returncode == 0, step.stdout + step.stderr
    assert_inert(step.stdout + step.stderr)
    summary = (tmp_path / "runner" / "summary.md").read_text()
    assert_inert(summary, log=False)
    assert_no_markup(summary)
    assert "\\u202e" in summary
    figures.add("outputs_grepped", 9)  # plan x3, drift x4, the Action's log and summary


def test_a_hostile_file_name_and_line_cannot_start_a_workflow_command(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """An error names the file first: a spec file called ``::error::...`` and a YAML
    error quoting a line that starts with ``::add-mask::`` stay text."""
    hostile_file = tmp_path / "::error::pwned-file.yaml"
    hostile_file.write_text("kind: Stream\nname: A\nmax_age: 7 parsecs\n")
    (tmp_path / "broken.yaml").write_text("kind: Stream\nname: B\n::add-mask::pwned-quoted: [a\n")
    done = reconcile("validate", ".", cwd=tmp_path)
    assert done.returncode == 1
    said = done.stdout + done.stderr
    assert "pwned-file.yaml:3" in said and "pwned-quoted" in said
    assert_inert(said)

    step = action_step(tmp_path, clean_server, path=".")
    assert step.returncode == 1
    assert_inert(step.stdout + step.stderr)
    assert "::error file=" in step.stdout  # the Action's own annotations still work
    summary = (tmp_path / "runner" / "summary.md").read_text()
    assert_inert(summary, log=False)

    hostile_file.unlink()  # valid files now; a warning still names its file first
    (tmp_path / "broken.yaml").unlink()
    warned = tmp_path / "::warning::pwned-warn.yaml"
    warned.write_text("kind: Stream\nname: W\nmax_msgs: 1\nmax_msgs: 1\n")
    done = reconcile("validate", ".", cwd=tmp_path)
    assert done.returncode == 0 and "pwned-warn.yaml:4: warning" in done.stderr, done.stderr
    assert_inert(done.stdout + done.stderr)


def test_a_lock_holder_written_by_someone_else_is_shown_escaped(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The apply lock's lease is a KV value anyone with access can write: its holder's
    names reach ``lock status``, ``lock break`` and an apply waiting for the lock."""
    from reconciler.execution import lock

    holder = lock.Holder(owner=EVIL_NAME, host=HOSTILE[:60], pid=1, run="x")

    async def take() -> None:
        async with open_client(options(clean_server)) as client:
            await lock.acquire(client, holder, timeout=0)

    run(take())
    (tmp_path / "specs.yaml").write_text(SPECS)
    server = ["--server", clean_server.url]
    status = reconcile("lock", "status", *server, cwd=tmp_path)
    assert status.returncode == 2 and "pwned-name" in status.stdout
    waited = reconcile("apply", "-y", "specs.yaml", *server, "--lock-timeout", "0.3", cwd=tmp_path)
    assert waited.returncode == 1 and "pwned-name" in waited.stderr
    broken = reconcile("lock", "break", "--force", *server, cwd=tmp_path)
    assert broken.returncode == 0 and "pwned-name" in broken.stdout
    for done in (status, waited, broken):
        assert_inert(done.stdout + done.stderr)


def test_the_actions_log_never_starts_a_workflow_command_it_did_not_write() -> None:
    """Whatever reaches the Action's log: a message with a line that would start a
    command is written inside a ``::stop-commands::`` block with a random token; its
    own annotations and masks still work."""
    from action.runner import Runner

    out = io.StringIO()
    runner = Runner(env={}, stdout=out)
    runner.log("plan\n  ::error::pwned-log\n::add-mask::pwned-log")
    runner.log("::stop-commands::guess\n::guess::\n::error::pwned-after-guess")
    runner.error("real problem\n::error::pwned-annotation", file="a.yaml", line=3, title="t")
    runner.mask("s3cret")
    found = commands(out.getvalue())
    assert found == [
        "::error file=a.yaml,line=3,title=t::real problem\\n::error::pwned-annotation",
        "::add-mask::s3cret",
    ], out.getvalue()
    assert "pwned-log" in out.getvalue() and "pwned-after-guess" in out.getvalue()


#: Names the server takes and no spec may declare (docs/spec-format.md): a stream this
#: tool manages, one it does not, a consumer's name and a consumer's filter.
ORPHAN = "ORPH\x1b[2J\u202eAN"
FREE = "FREE\u200bY"
HIDDEN_CONSUMER = "C\u202eD"


async def _create_undeclarable(server: NatsServer) -> None:
    async with open_client(options(server)) as client:
        marked = {"metadata": ownership_marker(DEFAULT_OWNER)}
        await client.create_stream({"name": "HOSTILE", "subjects": ["hostile.>"], **marked})
        await client.create_stream({"name": ORPHAN, "subjects": ["orphan.>"], **marked})
        await client.create_stream({"name": FREE, "subjects": ["free.>"]})
        for stream in ("HOSTILE", ORPHAN):
            consumer = {"durable_name": HIDDEN_CONSUMER, "ack_policy": "explicit", **marked}
            await client.create_consumer(stream, consumer, action="create")
        filtered = {"durable_name": "BADF", "filter_subject": "hostile.\x1bz", **marked}
        await client.create_consumer("HOSTILE", filtered, action="create")
        await client.create_consumer(
            "HOSTILE", {"durable_name": "GOOD", "filter_subject": "hostile.a"}, action="create"
        )


async def _names(server: NatsServer) -> tuple[set[str], set[tuple[str, str]]]:
    async with open_client(options(server)) as client:
        live = await client.fetch_live()
    return set(live.streams), set(live.consumers)


def test_a_live_name_no_spec_may_declare_is_planned_and_pruned_shown_escaped(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A spec may not declare a name holding ESC or a bidi override, but the server may
    hold one: a plan lists it (unmanaged, or managed by no spec), ``--prune`` deletes
    the managed ones, and every output shows the names escaped, without a traceback."""
    run(_create_undeclarable(clean_server))
    (tmp_path / "specs.yaml").write_text(SPECS)
    server = ["--server", clean_server.url]

    plan = reconcile("plan", "specs.yaml", "--prune", *server, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert_inert(plan.stdout + plan.stderr)
    for shown in ("- delete Stream ORPH\\x1b[2J\\u202eAN", "- delete Consumer HOSTILE/C\\u202eD"):
        assert shown in plan.stdout, plan.stdout
    assert "? Stream FREE\\u200bY" in plan.stdout
    as_json = reconcile("plan", "specs.yaml", "--prune", *server, "--format", "json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert_inert(as_json.stdout)
    deleted = {(c["kind"], c["name"]) for c in json.loads(as_json.stdout)["changes"]}
    assert {("Stream", ORPHAN), ("Consumer", HIDDEN_CONSUMER)} <= deleted

    flags = ("--prune", "--yes", "--allow-replace", "--allow-data-loss")
    applied = reconcile("apply", "specs.yaml", *flags, *server, cwd=tmp_path)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert_inert(applied.stdout + applied.stderr)
    streams, consumers = run(_names(clean_server))
    assert ORPHAN not in streams and FREE in streams  # the unmanaged one is kept
    assert ("HOSTILE", HIDDEN_CONSUMER) not in consumers and ("HOSTILE", "GOOD") in consumers


def test_an_export_leaves_out_a_name_no_spec_may_declare_and_says_why(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``reconcile export`` wrote such names into spec files that ``validate`` then
    refused, unexplained. Now each resource is left out, with a notice naming it escaped
    and why (a managed one: that ``--prune`` deletes it); the files written validate."""
    run(_create_undeclarable(clean_server))
    server = ["--server", clean_server.url]
    out = tmp_path / "exported"
    printed = reconcile("export", *server, cwd=tmp_path)
    written = reconcile("export", *server, "--out", str(out), cwd=tmp_path)
    for done in (printed, written):
        assert done.returncode == 0, done.stderr
        assert_inert(done.stdout + done.stderr)
        said = done.stderr
        assert "skipped Stream ORPH\\x1b[2J\\u202eAN and its 1 consumer(s)" in said, said
        assert "--prune deletes it" in said.split("ORPH", 1)[1].split("\n", 1)[0]
        for name in ("Stream FREE\\u200bY", "Consumer HOSTILE/C\\u202eD", "Consumer HOSTILE/BADF"):
            assert f"skipped {name}" in said, said
    assert sorted(p.name for p in out.iterdir()) == ["stream-HOSTILE.yaml"]
    checked = reconcile("validate", str(out), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    exported = (out / "stream-HOSTILE.yaml").read_text(encoding="utf-8")
    assert "name: GOOD" in exported and "BADF" not in exported

    # what export used to write: refused at its line, the name escaped
    declared = tmp_path / "declared.yaml"
    declared.write_text('kind: Stream\nname: "ORPH\\e[2J\\u202eAN"\nsubjects: [orphan.>]\n')
    refused = reconcile("validate", str(declared), cwd=tmp_path)
    assert refused.returncode == 1
    assert f"{declared}:2: name: 'ORPH\\x1b[2J\\u202eAN' holds U+001B" in refused.stderr
    assert_inert(refused.stdout + refused.stderr)


def action_step(
    root: Path, server: NatsServer, *, path: str = "specs.yaml"
) -> subprocess.CompletedProcess[str]:
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
        "INPUT_PATH": path,
        "INPUT_SERVER": server.url,
        "INPUT_MODE": "plan",
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
