"""`python -m action` run as a GitHub runner runs it, against a real nats-server.

The runner's side is reproduced with its files and variables (GITHUB_OUTPUT,
GITHUB_STEP_SUMMARY, GITHUB_EVENT_PATH with a pull_request payload, INPUT_*), and GitHub's
REST API with a small HTTP stand-in on 127.0.0.1 that records every call and serves the
pull request's comments in pages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from cli_runner import reconcile
from credentials import make_operator
from servers import NatsServer, run

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions, open_client

REPO = Path(__file__).resolve().parents[2]
TOKEN = "ghs_test-token-123"
SPECS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_age: 7d
---
kind: Consumer
stream: ORDERS
name: ship
ack_policy: explicit
"""


@dataclass
class GitHubStandIn:
    """Issue comments of pull request o/r#7, with GitHub's paging and a call log."""

    comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, auth
    url: str = ""
    next_id: int = 1000
    read_only: bool = False  # the token of a pull request from a fork

    def add(self, body: str, *, user: str = "someone", kind: str = "User") -> dict[str, Any]:
        self.next_id += 1
        comment = {"id": self.next_id, "body": body, "html_url": f"https://gh/c/{self.next_id}"}
        comment |= {"user": {"login": user, "type": kind}, "author_association": "NONE"}
        self.comments[self.next_id] = comment
        return comment

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p, _ in self.calls if m != "GET"]


def handler_for(state: GitHubStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def reply(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def record(self) -> tuple[str, dict[str, list[str]]]:
            parts = urlsplit(self.path)
            auth = self.headers.get("Authorization", "")
            state.calls.append((self.command, parts.path, auth))
            return parts.path, parse_qs(parts.query)

        def body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length", "0"))
            return dict(json.loads(self.rfile.read(length)))

        def do_GET(self) -> None:
            path, query = self.record()
            if path != "/repos/o/r/issues/7/comments":
                return self.reply(404, {"message": "Not Found"})
            per_page = int(query.get("per_page", ["30"])[0])
            page = int(query.get("page", ["1"])[0])
            items = list(state.comments.values())
            chunk = items[(page - 1) * per_page : page * per_page]
            headers = {}
            if page * per_page < len(items):
                nxt = f"{state.url}{path}?per_page={per_page}&page={page + 1}"
                headers["Link"] = f'<{nxt}>; rel="next"'
            self.reply(200, chunk, headers)

        def do_POST(self) -> None:
            path, _ = self.record()
            if state.read_only:
                return self.reply(403, {"message": "Resource not accessible by integration"})
            if path != "/repos/o/r/issues/7/comments":
                return self.reply(404, {"message": "Not Found"})
            bot = {"user": "github-actions[bot]", "kind": "Bot"}  # the job token's author
            self.reply(201, state.add(self.body()["body"], **bot))

        def do_PATCH(self) -> None:
            path, _ = self.record()
            comment_id = int(path.rsplit("/", 1)[1])
            if (
                not path.startswith("/repos/o/r/issues/comments/")
                or comment_id not in state.comments
            ):
                return self.reply(404, {"message": "Not Found"})
            state.comments[comment_id]["body"] = self.body()["body"]
            self.reply(200, state.comments[comment_id])

    return Handler


@pytest.fixture
def github() -> Iterator[GitHubStandIn]:
    state = GitHubStandIn()
    for i in range(130):  # other people's comments: the action must page past them
        state.add(f"looks good {i}")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(state))
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


@dataclass
class StepRun:
    code: int
    stdout: str
    stderr: str
    outputs: dict[str, str]
    summary: str


def parse_outputs(text: str) -> dict[str, str]:
    """A GITHUB_OUTPUT file read back the way the runner reads it."""
    values: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i]:
            name, _, delimiter = lines[i].partition("<<")
            end = lines.index(delimiter, i + 1)
            values[name] = "\n".join(lines[i + 1 : end])
            i = end
        i += 1
    return values


class Workspace:
    """A checkout with specs, the runner's files, and a way to run the step in it."""

    def __init__(self, root: Path, github: GitHubStandIn) -> None:
        self.root = root
        self.github = github
        self.runs = 0
        (root / "specs").mkdir(parents=True)
        self.spec = root / "specs" / "orders.yaml"
        self.spec.write_text(SPECS, encoding="utf-8")
        self.event = root / "event.json"
        self.event.write_text(json.dumps({"number": 7, "pull_request": {"number": 7}}))

    def step(
        self, server: NatsServer | None, *, extra: dict[str, str] | None = None, **inputs: str
    ) -> StepRun:
        """Run the step; ``inputs`` become INPUT_* (GITHUB_* as given), ``extra`` is
        the step's own ``env:`` (variables a project file names)."""
        self.runs += 1
        temp = self.root / f"runner-temp-{self.runs}"
        temp.mkdir()
        output, summary = temp / "output", temp / "summary.md"
        env = dict(extra or {}) | {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.root),
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": str(self.root),
            "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(summary),
            "GITHUB_EVENT_NAME": "pull_request",
            "GITHUB_EVENT_PATH": str(self.event),
            "GITHUB_REPOSITORY": "o/r",
            "GITHUB_TOKEN": TOKEN,
            "GITHUB_API_URL": self.github.url,
            "RUNNER_TEMP": str(temp),
            "INPUT_PATH": "specs",
            "INPUT_SERVER": server.url if server else "",
        }
        for name, value in inputs.items():
            key = name.upper().replace("-", "_")
            env[key if key.startswith("GITHUB_") else "INPUT_" + key] = value
            if key == "JOB":
                env["GITHUB_JOB"] = value
        done = subprocess.run(
            [sys.executable, "-m", "action"],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        return StepRun(
            code=done.returncode,
            stdout=done.stdout,
            stderr=done.stderr,
            outputs=parse_outputs(output.read_text()) if output.exists() else {},
            summary=summary.read_text() if summary.exists() else "",
        )


@pytest.fixture
def workspace(tmp_path: Path, github: GitHubStandIn) -> Workspace:
    return Workspace(tmp_path / "ws", github)


def ours(github: GitHubStandIn) -> list[dict[str, Any]]:
    return [
        c
        for c in github.comments.values()
        if c["body"].startswith("<!-- jetstream-gitops:specs -->")
    ]


def test_plan_on_a_pull_request_writes_outputs_summary_and_one_sticky_comment(
    clean_server: NatsServer, workspace: Workspace, github: GitHubStandIn
) -> None:
    first = workspace.step(clean_server, mode="plan", comment="true")

    assert first.code == 0, first.stdout + first.stderr
    assert first.outputs["has-changes"] == "true"
    assert first.outputs["summary"].startswith("2 to create, 0 to update")
    plan = json.loads(Path(first.outputs["plan-json"]).read_text())
    assert [c["action"] for c in plan["changes"]] == ["create", "create"]
    assert "## JetStream plan for `specs`\n" in first.summary
    assert "ORDERS" in first.summary
    assert github.writes() == [("POST", "/repos/o/r/issues/7/comments")]
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth in github.calls)
    assert TOKEN not in first.stdout.replace(f"::add-mask::{TOKEN}", "")

    workspace.spec.write_text(SPECS.replace("max_age: 7d", "max_age: 2d"))
    second = workspace.step(clean_server, mode="plan", comment="true")

    assert second.code == 0, second.stdout + second.stderr
    [comment] = ours(github)
    assert github.writes()[-1] == ("PATCH", f"/repos/o/r/issues/comments/{comment['id']}")
    assert len(github.writes()) == 2
    assert "+ max_age: 2d\n" in comment["body"] and "7d" not in comment["body"]
    assert comment["body"].split("\n")[3] == "### ✅ 2 to create: nothing is destroyed"
    assert len(github.comments) == 131


def test_a_plan_too_long_for_a_comment_is_cut_with_a_link_to_its_artifact(
    clean_server: NatsServer, workspace: Workspace, github: GitHubStandIn
) -> None:
    """1,500 streams with long descriptions: far beyond one comment. The comment stays
    under GitHub's limit, says how many changes it left out and links the run holding
    the plan artifact; the JSON plan output keeps every change."""
    description = "d" * 120
    workspace.spec.write_text(
        "".join(
            f"---\nkind: Stream\nname: S{i:04d}\nsubjects: [s{i}]\ndescription: {description}\n"
            for i in range(1_500)
        )
    )
    run_env = {"github-server-url": "https://github.example", "github-run-id": "4242"}
    done = workspace.step(clean_server, mode="plan", comment="true", job="plan", **run_env)

    assert done.code == 0, done.stdout + done.stderr
    [comment] = ours(github)
    body = comment["body"]
    assert len(body) < 65_536
    shown = body.count("**🆕 create Stream S")
    assert 0 < shown < 1_500
    assert f"{1_500 - shown} more change(s) not shown" in body
    artifact = done.outputs["plan-artifact"]
    assert artifact.startswith("jetstream-plan-")
    link = "[the workflow run](https://github.example/o/r/actions/runs/4242)"
    assert f"artifact `{artifact}` of {link}" in body
    assert len(json.loads(Path(done.outputs["plan-json"]).read_text())["changes"]) == 1_500


def test_apply_converges_and_a_second_apply_has_nothing_to_do(
    clean_server: NatsServer, workspace: Workspace, github: GitHubStandIn
) -> None:
    first = workspace.step(clean_server, mode="apply")
    assert first.code == 0, first.stdout + first.stderr
    assert first.outputs["has-changes"] == "true"
    assert first.outputs["summary"] == "Apply complete: 2 applied, 0 failed, 0 skipped."
    assert "applied create Stream ORDERS" in first.stdout

    second = workspace.step(clean_server, mode="apply")
    assert second.code == 0, second.stdout + second.stderr
    assert second.outputs["has-changes"] == "false"
    assert github.calls == []  # comment is off by default


def test_apply_refuses_a_replace_without_allow_replace(
    clean_server: NatsServer, workspace: Workspace
) -> None:
    assert workspace.step(clean_server, mode="apply").code == 0
    workspace.spec.write_text(SPECS.replace("max_age: 7d", "max_age: 7d\nstorage: memory"))

    refused = workspace.step(clean_server, mode="apply")

    assert refused.code == 1
    assert "::error title=jetstream-gitops::refusing to apply" in refused.stdout
    assert refused.outputs["has-changes"] == "true"
    refused_plan = json.loads(Path(refused.outputs["plan-json"]).read_text())
    assert refused_plan["changes"][0]["action"] == "replace"
    assert "**Failed:** refusing to apply" in refused.summary
    live = run(engine.plan([workspace.spec], ConnectionOptions(servers=clean_server.url)))
    assert live.changes[0].action == "replace"  # nothing was changed

    allowed = workspace.step(clean_server, mode="apply", **{"allow-replace": "true"})
    assert allowed.code == 0, allowed.stdout + allowed.stderr


def test_migrate_shows_in_the_plan_comment_and_apply_keeps_every_message(
    clean_server: NatsServer, workspace: Workspace
) -> None:
    assert workspace.step(clean_server, mode="apply").code == 0

    async def publish() -> None:
        async with open_client(ConnectionOptions(servers=clean_server.url)) as client:
            for index in range(25):
                await client.publish("orders.x", str(index).encode())

    run(publish())
    workspace.spec.write_text(SPECS.replace("max_age: 7d", "max_age: 7d\nstorage: memory"))
    planned = workspace.step(clean_server, mode="plan", migrate="true")
    assert planned.code == 0, planned.stdout + planned.stderr
    assert "1 to migrate" in planned.outputs["summary"]
    assert "🚚 migrate Stream ORDERS" in planned.summary
    assert "copies 25 messages" in planned.summary
    document = json.loads(Path(planned.outputs["plan-json"]).read_text())
    assert document["changes"][0]["migration"]["messages"] == 25

    applied = workspace.step(clean_server, mode="apply", migrate="true")
    assert applied.code == 0, applied.stdout + applied.stderr

    async def state() -> tuple[str, int]:
        async with open_client(ConnectionOptions(servers=clean_server.url)) as client:
            info = await client.stream_info("ORDERS")
            return info["config"]["storage"], int(info["state"]["messages"])

    assert run(state()) == ("memory", 25)


def test_apply_refuses_an_update_that_deletes_messages_without_allow_data_loss(
    clean_server: NatsServer, workspace: Workspace
) -> None:
    assert workspace.step(clean_server, mode="apply").code == 0

    async def publish() -> None:
        async with open_client(ConnectionOptions(servers=clean_server.url)) as client:
            for index in range(10):
                await client.publish("orders.x", str(index).encode())

    run(publish())
    workspace.spec.write_text(SPECS.replace("max_age: 7d", "max_age: 7d\nmax_msgs: 3"))
    for flags in ({}, {"allow-replace": "true"}):
        refused = workspace.step(clean_server, mode="apply", **flags)
        assert refused.code == 1
        assert "input allow-data-loss: true" in refused.stdout  # the input, not the flag
        assert "holds 10 messages; max_msgs 3 deletes at least 7" in refused.summary
    allowed = workspace.step(clean_server, mode="apply", **{"allow-data-loss": "true"})
    assert allowed.code == 0, allowed.stdout + allowed.stderr


def test_drift_fails_the_step_and_writes_the_html_report(
    clean_server: NatsServer, workspace: Workspace
) -> None:
    assert workspace.step(clean_server, mode="apply").code == 0
    workspace.spec.write_text(SPECS.replace("max_age: 7d", "max_age: 1d"))

    failed = workspace.step(clean_server, mode="drift")

    assert failed.code == 2
    assert "::error title=jetstream-gitops%3A drift::Drift: 1 of 2" in failed.stdout
    assert failed.outputs["has-changes"] == "true"
    report = json.loads(Path(failed.outputs["report-json"]).read_text())
    assert report["summary"]["by_field"] == {"max_age": 1}
    page = Path(failed.outputs["report-html"]).read_text()
    assert '<dd id="figure-drifted" data-value="1">1</dd>' in page
    assert "| ⚠️ drifted | Stream | `ORDERS` | `max_age` | `1d` | `7d` |" in failed.summary

    tolerated = workspace.step(clean_server, mode="drift", **{"fail-on-drift": "false"})
    assert tolerated.code == 0
    assert tolerated.outputs["summary"].startswith("Drift: 1 of 2 resource(s) differ")


def test_invalid_specs_are_annotated_at_their_file_and_line(
    clean_server: NatsServer, workspace: Workspace
) -> None:
    workspace.spec.write_text(
        "kind: Stream\nname: ORDERS\nmax_age: soon\n---\n"
        "kind: Consumer\nstream: ORDERS\nname: ship\nack_policy: sometimes\n"
    )
    result = workspace.step(clean_server, mode="plan")

    assert result.code == 1
    errors = [line for line in result.stdout.splitlines() if line.startswith("::error ")]
    prefix = "::error file=specs/orders.yaml,line={},title=jetstream-gitops%3A invalid spec::{}"
    assert errors[0].startswith(prefix.format(3, "max_age: "))
    assert errors[1].startswith(prefix.format(8, "ack_policy: "))
    assert len(errors) == 2
    assert "specs/orders.yaml:3" in result.summary


def test_creds_given_as_contents_are_masked_and_used(
    tmp_path: Path, server_factory: Any, workspace: Workspace
) -> None:
    setup = make_operator(tmp_path / "auth")
    server = server_factory(config=setup.settings)
    creds = setup.creds.read_text()
    seed = next(line for line in creds.splitlines() if line.startswith("SU"))

    result = workspace.step(server, mode="plan", creds=creds)

    assert result.code == 0, result.stdout + result.stderr
    assert f"::add-mask::{seed}" in result.stdout
    shown = [line for line in result.stdout.splitlines() if not line.startswith("::add-mask::")]
    assert not any(seed in line for line in shown)
    assert "::add-mask::------END" not in result.stdout
    assert result.outputs["has-changes"] == "true"


def test_bad_inputs_fail_before_touching_a_server(workspace: Workspace) -> None:
    result = workspace.step(None, mode="destroy")
    assert result.code == 1
    assert result.outputs == {}
    assert "::error title=jetstream-gitops::input 'mode' must be one of" in result.stdout


def test_a_refused_comment_is_a_warning_not_a_failed_step(
    clean_server: NatsServer, workspace: Workspace, github: GitHubStandIn
) -> None:
    github.read_only = True
    result = workspace.step(clean_server, mode="plan", comment="true")
    assert result.code == 0, result.stdout + result.stderr
    assert "::warning title=jetstream-gitops::could not comment on the pull request" in (
        result.stdout
    )
    assert "answered 403" in result.stdout
    assert TOKEN not in result.stdout.replace(f"::add-mask::{TOKEN}", "")


def project_workspace(workspace: Workspace, server: NatsServer) -> None:
    """The workspace as a multi-environment repository: dev on the embedded server,
    prod on ``server`` with an overlay and a password from a variable."""
    (workspace.root / "reconcile.yaml").write_text(
        "owner: shop\nspecs: [specs]\nenvironments:\n"
        "  dev: {embedded: true}\n"
        f"  prod: {{servers: '{server.url}', user: deployer, password: {{env: PROD_PW}},"
        " overlays: [overlays/prod.yaml]}\n"
    )
    (workspace.root / "overlays").mkdir()
    (workspace.root / "overlays" / "prod.yaml").write_text(
        "kind: Stream\nname: ORDERS\nmax_age: 30d\n"
    )


def test_plan_for_every_environment_posts_one_sticky_comment_each(
    clean_server: NatsServer, workspace: Workspace, github: GitHubStandIn
) -> None:
    project_workspace(workspace, clean_server)
    secret = "prod-pw-31337"
    done = workspace.step(
        None, mode="plan", environment="all", path="", comment="true", extra={"PROD_PW": secret}
    )
    assert done.code == 0, done.stdout + done.stderr
    mine = {
        c["body"].split("\n", 1)[0]: c["body"]
        for c in github.comments.values()
        if c["body"].startswith("<!-- jetstream-gitops:env ")
    }
    assert set(mine) == {"<!-- jetstream-gitops:env dev -->", "<!-- jetstream-gitops:env prod -->"}
    assert "+ max_age: 30d" in mine["<!-- jetstream-gitops:env prod -->"]
    assert "+ max_age: 7d" in mine["<!-- jetstream-gitops:env dev -->"]
    assert done.outputs["summary"].startswith("dev: 2 to create")
    assert "; prod: 2 to create" in done.outputs["summary"]
    assert "## JetStream plan for `env dev`" in done.summary
    assert "## JetStream plan for `env prod`" in done.summary
    assert f"::add-mask::{secret}" in done.stdout
    assert secret not in done.stdout.replace(f"::add-mask::{secret}", "") + done.summary

    again = workspace.step(None, mode="plan", environment="all", path="", comment="true")
    assert again.code == 1  # PROD_PW unset: an error naming the line, not a secret
    assert "reconcile.yaml:5" in again.stdout and "PROD_PW is not set" in again.stdout
    assert len([c for c in github.comments.values() if "jetstream-gitops:env" in c["body"]]) == 2


def test_apply_runs_one_environment_per_step_with_its_overlay(
    clean_server: NatsServer, workspace: Workspace, github: GitHubStandIn
) -> None:
    project_workspace(workspace, clean_server)
    refused = workspace.step(None, mode="apply", environment="all", path="", extra={"PROD_PW": "x"})
    assert refused.code == 1 and "runs one environment per step" in refused.stdout
    done = workspace.step(None, mode="apply", environment="prod", path="", extra={"PROD_PW": "x"})
    assert done.code == 0, done.stdout + done.stderr
    live = run(engine.fetch_live(ConnectionOptions(servers=clean_server.url)))
    assert live.streams["ORDERS"]["max_age"] == 30 * 86_400 * 10**9
    assert live.streams["ORDERS"]["metadata"]["io.jetstream-gitops/owner"] == "shop"
    both = workspace.step(
        clean_server, mode="apply", environment="prod", path="", extra={"PROD_PW": "x"}
    )
    assert both.code == 1 and "'server' cannot be combined with 'environment'" in both.stdout


def test_messages_name_action_inputs_not_cli_flags(
    clean_server: NatsServer, workspace: Workspace, github: GitHubStandIn
) -> None:
    """A workflow author sets inputs: the log, annotations, step summary, comment and
    `summary` output say `input allow-replace: true`, never `--allow-replace`."""
    workspace.spec.write_text(SPECS + "---\nkind: Stream\nname: OLD\nsubjects: [old]\n")
    assert workspace.step(clean_server, mode="apply").code == 0
    workspace.spec.write_text(SPECS.replace("max_age: 7d", "max_age: 7d\nstorage: memory"))

    planned = workspace.step(clean_server, mode="plan", comment="true")
    assert planned.code == 0, planned.stdout + planned.stderr
    [comment] = ours(github)
    for shown in (planned.stdout, planned.summary, comment["body"]):
        assert "input allow-replace: true" in shown
        assert "input prune: true" in shown
        assert "--allow-replace" not in shown and "--prune" not in shown

    refused = workspace.step(clean_server, mode="apply")
    assert refused.code == 1
    said = refused.stdout + refused.summary + refused.outputs["summary"]
    assert "::error title=jetstream-gitops::refusing to apply" in refused.stdout
    assert (
        "Re-run with input allow-replace: true (or input allow-data-loss: true)" in refused.stdout
    )
    assert "input allow-replace: true" in refused.outputs["summary"]
    assert "--allow-" not in said and "--prune" not in said


def test_no_message_names_a_cli_flag_the_action_has_no_input_for(
    clean_server: NatsServer, workspace: Workspace, github: GitHubStandIn
) -> None:
    """docs/github-action.md, "Inputs, not flags": every line the Action shows names the
    input that sets a thing, not the CLI's flag. The capacity note said "give --monitor
    URL or --system-creds/--system-context", and an owner conflict "re-run with
    --take-over": flags a workflow has no way to pass. A server setting is named where an
    Action user gives it (a project environment's field); a take-over is the CLI's
    command, named as such."""
    planned = workspace.step(clean_server, mode="plan", comment="true")
    assert planned.code == 0, planned.stdout + planned.stderr
    [comment] = ours(github)
    for shown in (planned.stdout, planned.summary, comment["body"]):
        assert "the server's own storage limits are unknown" in shown
        assert "a project environment's monitor:" in shown
        assert "--monitor" not in shown and "--system-" not in shown

    other = {"NATS_URL": clean_server.url}
    claimed = reconcile(
        "apply", "specs", "--owner", "team-b", "--yes", cwd=workspace.root, env=other
    )
    assert claimed.returncode == 0, claimed.stderr
    refused = workspace.step(clean_server, mode="plan")
    assert refused.code == 1
    said = refused.stdout + refused.summary + refused.outputs["summary"]
    assert "::error file=specs/orders.yaml,line=1," in refused.stdout
    assert "managed by owner 'team-b'" in said
    assert said.count("--take-over") == said.count("reconcile apply --take-over") > 0
    assert "Traceback" not in refused.stdout + refused.stderr


def test_several_environments_lead_the_step_summary_with_a_table(
    clean_server: NatsServer, workspace: Workspace
) -> None:
    project_workspace(workspace, clean_server)
    done = workspace.step(None, mode="plan", environment="all", path="", extra={"PROD_PW": "x"})
    assert done.code == 0, done.stdout + done.stderr
    head = done.summary.split("## JetStream plan for")[0]
    assert "| environment | | summary |" in head
    assert "| `env dev` | ✅ | 2 to create, 0 to update" in head
    assert "| `env prod` | ✅ | 2 to create, 0 to update" in head


async def _app_consumer(server: NatsServer, name: str, count: int) -> int:
    """What an app does at run time: a consumer of its own, and messages; the count."""
    async with open_client(ConnectionOptions(servers=server.url)) as client:
        config = {"durable_name": name, "ack_policy": "explicit"}
        await client.request(
            f"CONSUMER.CREATE.ORDERS.{name}", {"stream_name": "ORDERS", "config": config}
        )
        for n in range(count):
            await client.publish("orders.new", str(n).encode())
        return int((await client.stream_info("ORDERS"))["state"]["messages"])


def test_drift_reads_the_ignore_rules_next_to_the_paths_and_of_the_project(
    clean_server: NatsServer, workspace: Workspace
) -> None:
    rule = "Consumer ORDERS/ephemeral-*"
    shown = rule.replace("*", "\\*")  # as Markdown escapes it
    assert workspace.step(clean_server, mode="apply").code == 0
    assert run(_app_consumer(clean_server, "ephemeral-7f3a", 25)) == 25
    assert workspace.step(clean_server, mode="drift").code == 2  # unmanaged: drift
    ignore_file = workspace.root / "specs" / ".reconcileignore"
    ignore_file.write_text(f"{rule}\n", encoding="utf-8")

    beside = workspace.step(clean_server, mode="drift")
    assert beside.code == 0, beside.stdout + beside.stderr
    assert f"1 hidden by rule {shown} (specs/.reconcileignore:1)" in beside.summary
    assert "ephemeral-7f3a" not in beside.summary

    ignore_file.unlink()
    (workspace.root / "reconcile.yaml").write_text(
        f"specs: [specs]\nignore:\n  - {rule}\nenvironments:\n"
        f"  prod: {{servers: '{clean_server.url}'}}\n",
        encoding="utf-8",
    )
    project = workspace.step(None, mode="drift", environment="prod", path="")
    assert project.code == 0, project.stdout + project.stderr
    assert f"1 hidden by rule {shown} (" in project.summary
    assert "reconcile.yaml:3)" in project.summary
    planned = workspace.step(None, mode="plan", environment="prod", path="")
    assert planned.code == 0 and "ephemeral-7f3a" not in planned.summary
    assert run(_app_consumer(clean_server, "ephemeral-7f3a", 5)) == 30
