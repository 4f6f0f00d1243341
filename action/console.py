"""Where the step shows a run: the GitHub console (Markdown and ``::error``
annotations at FILE:LINE), and the files and outputs a plan leaves."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from action.inputs import Inputs
from action.jobs import work_dir
from action.runner import Runner
from reconciler.console.markdown import MarkdownConsole
from reconciler.errors import (
    ExitStatus,
    ReconcileError,
    SpecError,
    UnsupportedField,
)

if TYPE_CHECKING:
    from reconciler.planning.findings import PolicyFinding
    from reconciler.planning.steps import Plan


SPEC_TITLE = "jetstream-gitops: invalid spec"


def workspace_path(runner: Runner, file: str) -> str:
    """``file`` relative to the workspace, as annotations want it."""
    workspace = runner.env.get("GITHUB_WORKSPACE") or os.getcwd()
    try:
        return str(Path(file).resolve().relative_to(Path(workspace).resolve()))
    except ValueError:
        return file


def annotate(runner: Runner, err: ReconcileError) -> None:
    """One ``::error`` per problem, at its file and line when known."""
    if isinstance(err, (SpecError, UnsupportedField)):
        for problem in err.problems:
            where = problem.location
            message = f"{problem.path}: {problem.message}" if problem.path else problem.message
            runner.error(
                message,
                file=workspace_path(runner, where.file) if where else None,
                line=where.line if where else None,
                title=SPEC_TITLE,
            )
        return
    runner.error(str(err), title="jetstream-gitops")


class GitHubConsole(MarkdownConsole):
    """The Markdown console, plus an ``::error`` annotation for every error shown."""

    def __init__(self, runner: Runner, inputs: Inputs, what: str) -> None:
        from reconciler.render.markdown import code

        super().__init__(runner.log, title=f"JetStream {what} for {code(inputs.label)}")
        self.runner = runner
        self.full_plan = full_plan_link(runner, inputs)

    def on_error(self, err: ReconcileError) -> None:
        annotate(self.runner, err)


def artifact_name(runner: Runner, inputs: Inputs) -> str:
    """The name the plan JSON is uploaded under: the job and the paths, so two steps or
    jobs of one run do not collide (a matrix sets ``artifact-name`` itself)."""
    given = runner.input("artifact-name")
    if given:
        return given
    job = re.sub(r"[^A-Za-z0-9_.-]+", "-", runner.env.get("GITHUB_JOB", "")).strip("-")
    digest = hashlib.sha256(inputs.label.encode()).hexdigest()[:10]
    return "-".join(part for part in ("jetstream-plan", job, digest) if part)


def full_plan_link(runner: Runner, inputs: Inputs) -> str | None:
    """Markdown naming the plan artifact and linking the run that holds it."""
    env = runner.env
    if not runner.flag("upload-plan", default=True):
        return None
    server, repository, run_id = (
        env.get("GITHUB_SERVER_URL", ""),
        env.get("GITHUB_REPOSITORY", ""),
        env.get("GITHUB_RUN_ID", ""),
    )
    if not (server.startswith(("https://", "http://")) and repository and run_id.isdigit()):
        return None
    run_url = f"{server.rstrip('/')}/{repository}/actions/runs/{run_id}"
    return f"artifact `{artifact_name(runner, inputs)}` of [the workflow run]({run_url})"


def write_json(runner: Runner, inputs: Inputs, name: str, data: Any) -> str:
    digest = hashlib.sha256(inputs.label.encode()).hexdigest()[:10]
    path = work_dir(runner.env) / f"{name}-{digest}.json"
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return str(path)


def plan_outputs(runner: Runner, inputs: Inputs, plan: Plan) -> dict[str, str]:
    from reconciler.render.text import counts_line

    return {
        "has-changes": "true" if plan.has_changes else "false",
        "plan-json": write_json(runner, inputs, "plan", plan.to_json()),
        "plan-artifact": artifact_name(runner, inputs),
        "summary": counts_line(plan),
    }


def policy_code(runner: Runner, findings: Sequence[PolicyFinding]) -> ExitStatus:
    """3 with an ``::error`` naming the rules when a policy deny rule does not hold
    (docs/policy.md), else 0: the step fails; its findings are in the plan shown."""
    from reconciler.planning.policy import refusal

    denied = refusal(findings, applying=False)
    if denied is None:
        return ExitStatus.OK
    runner.error(str(denied), title="jetstream-gitops: policy")
    return denied.exit_code
