"""``python -m action``: the GitHub Action's entry point, configured by ``INPUT_*`` variables.

Runs the engine in-process (so an invalid spec becomes one ``::error file=,line=::``
annotation per problem), then writes the step's outputs, its Markdown summary and, on a
pull request with ``comment: true``, one sticky comment per path.

Exit status: 0 on success (a plan with changes is a success: ``has-changes`` says so);
1 on any error, refused or failed apply step; 2 when drift is found and ``fail-on-drift``
is true; 3 when a policy rule at level deny does not hold (docs/policy.md: the plan and
its findings are shown, apply changes nothing).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from action.runner import InputError, Runner
from reconciler.console import result_line
from reconciler.console.markdown import MarkdownConsole
from reconciler.errors import (
    ApplyFailed,
    ExitStatus,
    ReconcileError,
    RefusedPlan,
    SpecError,
    UnsupportedField,
)
from reconciler.model.migration import CHOICES as MIGRATION_CHOICES

if TYPE_CHECKING:
    from reconciler.execution.stages import PlanRequest
    from reconciler.jetstream import ConnectionOptions
    from reconciler.planning.findings import PolicyFinding
    from reconciler.planning.saved import SavedPlan
    from reconciler.planning.steps import Plan
    from reconciler.specs.ignore import IgnoreRules

MODES = ("plan", "apply", "drift", "backup")
BACKUP_DIR = "jetstream-backup"
SPEC_TITLE = "jetstream-gitops: invalid spec"


@dataclass(frozen=True)
class Inputs:
    paths: tuple[str, ...]
    mode: str
    server: str
    creds: str
    context: str
    prune: bool
    allow_replace: bool
    allow_data_loss: bool
    comment: bool
    fail_on_drift: bool
    migrate: bool = False
    migration: str | None = None  # resume | rollback | continue: an interrupted migration
    environments: tuple[str, ...] = ()  # project environments to run, or ("all",)
    project: str = ""
    backup_dir: str = BACKUP_DIR  # mode backup: the folder written (for upload-artifact)
    # set per environment by ``jobs``:
    env: str = ""
    overlays: tuple[str, ...] = ()
    owner: str = "default"
    lifecycle: Any = None  # the environment's (reconciler.specs.lifecycle.Lifecycle)
    policies: tuple[str, ...] = ()  # policy files (docs/policy.md), the project's first
    #: Drift ignore rules (docs/drift.md#ignore-rules): the project's for an environment;
    #: None: the ``.reconcileignore`` next to the paths, as the CLI reads them.
    ignore: IgnoreRules | None = None
    #: The environment's project read: every environment's domain and connection, where
    #: a stream's standby mirrors it from and its pair's health (docs/dr.md).
    domains: tuple[tuple[str, str | None], ...] = ()
    project_read: Any = None

    @classmethod
    def read(cls, runner: Runner) -> Inputs:
        paths = tuple(runner.input("path").split())
        environments = tuple(runner.input("environment").replace(",", " ").split())
        if not paths and not environments:
            raise InputError(
                "input 'path' (spec files or folders) or 'environment' (of the project "
                "file) is required"
            )
        if paths and environments:
            raise InputError("give either 'path' or 'environment', not both")
        mode = runner.input("mode", default="plan").lower()
        if mode not in MODES:
            raise InputError(f"input 'mode' must be one of {', '.join(MODES)}, not {mode!r}")
        if mode != "plan" and (len(environments) > 1 or environments == ("all",)):
            raise InputError(f"mode {mode} runs one environment per step, not {environments}")
        if runner.input("plan-file") and (len(environments) > 1 or environments == ("all",)):
            raise InputError("input 'plan-file' holds one plan: name one environment")
        migration = runner.input("migration").strip().lower() or None
        if migration not in (None, *MIGRATION_CHOICES):
            raise InputError(
                f"input 'migration' must be one of {', '.join(MIGRATION_CHOICES)}, "
                f"not {migration!r}"
            )
        given = [name for name in ("server", "creds", "context") if runner.input(name)]
        if environments and given:
            raise InputError(f"input '{given[0]}' cannot be combined with 'environment'")
        if paths and not ({"server", "context"} & set(given)):
            raise InputError(
                "input 'server' is empty: name the NATS server (nats://HOST:PORT, or a "
                "'context'); a secret that is not set reads as empty, and this action never "
                "falls back to a throwaway embedded server"
            )
        return cls(
            paths=paths,
            mode=mode,
            server=runner.input("server"),
            creds=runner.input("creds"),
            context=runner.input("context"),
            prune=runner.flag("prune", default=False),
            allow_replace=runner.flag("allow-replace", default=False),
            allow_data_loss=runner.flag("allow-data-loss", default=False),
            comment=runner.flag("comment", default=False),
            fail_on_drift=runner.flag("fail-on-drift", default=True),
            migrate=runner.flag("migrate", default=False),
            migration=migration,
            environments=environments,
            project=runner.input("project"),
            backup_dir=runner.input("backup-dir") or BACKUP_DIR,
            policies=tuple(runner.input("policy").split()),
        )

    @property
    def label(self) -> str:
        """What a title, a comment's marker and file names are about: the paths, or
        the environment."""
        return f"env {self.env}" if self.env else " ".join(self.paths)


@dataclass(frozen=True)
class Outcome:
    """What a mode produced: the step's outputs, its summary and comment, its exit code."""

    outputs: dict[str, str]
    markdown: str
    code: int = ExitStatus.OK

    @classmethod
    def failed(cls, err: ReconcileError, markdown: str) -> Outcome:
        """A mode that failed with ``err`` (already shown): exit status ERROR."""
        return cls({"summary": f"failed: {err}"}, markdown, ExitStatus.ERROR)


# --- secrets and connection -------------------------------------------------------------


def work_dir(env: Mapping[str, str]) -> Path:
    """The action's scratch folder (under ``RUNNER_TEMP`` on a runner)."""
    base = Path(env.get("RUNNER_TEMP") or tempfile.gettempdir()) / "jetstream-gitops"
    base.mkdir(parents=True, exist_ok=True)
    return base


def creds_file(runner: Runner, creds: str) -> str | None:
    """A path to the credentials: the input itself, or a 0600 file holding its contents."""
    if not creds:
        return None
    if "\n" not in creds and "-----BEGIN" not in creds:
        return creds
    for line in creds.splitlines():  # the JWT and the seed; not the ----- armour lines
        if line.strip() and not line.lstrip().startswith("---"):
            runner.mask(line)
    digest = hashlib.sha256(creds.encode()).hexdigest()[:12]
    path = work_dir(runner.env) / f"user-{digest}.creds"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(creds if creds.endswith("\n") else creds + "\n")
    return str(path)


def connection(runner: Runner, inputs: Inputs) -> ConnectionOptions:
    from reconciler.jetstream import ConnectionOptions
    from reconciler.jetstream.connection import url_secrets

    for secret in url_secrets(inputs.server):
        runner.mask(secret)
    return ConnectionOptions(
        servers=inputs.server or None,
        creds=creds_file(runner, inputs.creds),
        context=inputs.context or None,
        store=work_dir(runner.env) / "embedded-server",
    )


def jobs(runner: Runner, inputs: Inputs) -> list[tuple[Inputs, ConnectionOptions]]:
    """What the step runs: the paths once, or each environment named (``all``: every
    environment of the project file), with its connection, paths, overlays and owner.
    Every environment's connection is resolved (and its secrets masked) before any runs."""
    if not inputs.environments:
        return [(inputs, connection(runner, inputs))]
    from dataclasses import replace

    from reconciler.execution.stages import environment_target
    from reconciler.jetstream.connection import url_secrets
    from reconciler.specs.project import PROJECT_FILE, load_project

    workspace = Path(runner.env.get("GITHUB_WORKSPACE") or os.getcwd())
    project = load_project(workspace / (inputs.project or PROJECT_FILE))
    names = list(project.environments) if inputs.environments == ("all",) else inputs.environments
    base = connection(runner, inputs)
    found = []
    for name in names:
        target = environment_target(project, name, base, project.owner or "default")
        for secret in (target.options.password, target.options.token):
            if secret:
                runner.mask(secret)
        for secret in url_secrets(target.options.servers or ""):
            runner.mask(secret)
        job = replace(
            inputs,
            paths=tuple(str(p) for p in target.paths),
            overlays=tuple(str(p) for p in target.overlays),
            env=name,
            owner=target.owner,
            lifecycle=target.lifecycle,
            policies=(*(str(p) for p in target.policies), *inputs.policies),
            ignore=target.ignore,
            domains=target.domains,
            project_read=target.project,
        )
        found.append((job, target.options))
    return found


# --- annotations -------------------------------------------------------------------------


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


# --- modes -------------------------------------------------------------------------------


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


def plan_request(inputs: Inputs, options: ConnectionOptions, **flags: Any) -> PlanRequest:
    """What the engine reads for one path list or environment (the engine's own value)."""
    from dataclasses import replace

    from reconciler.execution.stages import PlanRequest

    request = PlanRequest.of(
        inputs.paths,
        options,
        overlays=inputs.overlays,
        env=inputs.env or None,
        owner=inputs.owner,
        prune=inputs.prune,
        migrate=inputs.migrate,
        migration=inputs.migration,
        policies=tuple(Path(p) for p in inputs.policies),
        ignore=ignore_rules(inputs),
    )
    if inputs.lifecycle is not None:  # an environment's, from the project file
        request = replace(request, lifecycle=inputs.lifecycle)
    request = replace(request, domains=inputs.domains, project=inputs.project_read)
    return replace(request, **flags)


def ignore_rules(inputs: Inputs) -> IgnoreRules:
    """The job's drift ignore rules: an environment's come from the project file
    (``jobs``); for paths, the ``.reconcileignore`` in their folders (the CLI's rule)."""
    if inputs.ignore is not None:
        return inputs.ignore
    from reconciler.specs.ignore import rules_next_to

    return rules_next_to(Path(p) for p in inputs.paths)


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


def plan_mode(runner: Runner, inputs: Inputs, options: ConnectionOptions) -> Outcome:
    if runner.input("plan-file"):
        return save_plan_mode(runner, inputs, options)
    return plan_jobs(runner, [(inputs, options)])[0][1]


def plan_jobs(
    runner: Runner, planned: list[tuple[Inputs, ConnectionOptions]]
) -> list[tuple[Inputs, Outcome]]:
    """Plan every job (path list or environment) with the engine's ``plan_environments``:
    all are validated before any is planned; one that cannot be planned fails alone."""
    from reconciler.execution import stages

    requests = [plan_request(job, options) for job, options in planned]
    log = MarkdownConsole(runner.log)  # notices and warnings: the job log

    async def go() -> list[stages.EnvironmentPlan]:
        return [done async for done in stages.plan_environments(requests, log)]

    outcomes = []
    for (job, _), done in zip(planned, asyncio.run(go()), strict=True):
        console = GitHubConsole(runner, job, "plan")
        if done.plan is None:
            assert done.error is not None
            console.show_error(done.error)
            failed = Outcome(
                {"summary": f"failed: {done.error}"}, console.markdown, ExitStatus.ERROR
            )
            outcomes.append((job, failed))
            continue
        console.show_plan(done.plan)
        code = policy_code(runner, done.plan.policy)
        outputs = plan_outputs(runner, job, done.plan)
        outcomes.append((job, Outcome(outputs, console.markdown, code)))
    return outcomes


def apply_mode(runner: Runner, inputs: Inputs, options: ConnectionOptions) -> Outcome:
    from reconciler.execution import stages
    from reconciler.execution.stages import ApplyRequest

    console = GitHubConsole(runner, inputs, "apply")
    given = {"--allow-replace": inputs.allow_replace, "--allow-data-loss": inputs.allow_data_loss}
    console.allowed = tuple(flag for flag, on in given.items() if on)
    saved = saved_plan(runner, inputs)  # input plan-file: exactly that plan, or nothing
    if saved is None:
        wanted = plan_request(inputs, options)
    else:
        saved, wanted = saved_request(runner, saved, inputs, options)
    request = ApplyRequest(
        plan=wanted,
        allow_replace=inputs.allow_replace,
        allow_data_loss=inputs.allow_data_loss,
        approved=True,  # mode: apply in the workflow is the approval
        expected=saved,
    )
    try:
        with console.steps():
            result = asyncio.run(stages.apply_for(request, console))
    except (RefusedPlan, ApplyFailed) as err:
        if console.shown_plan is None:
            raise
        console.show_error(err)  # the plan was made: report it with the failure
        outputs = plan_outputs(runner, inputs, console.shown_plan) | {"summary": f"failed: {err}"}
        return Outcome(outputs, console.markdown, err.exit_code)  # 3: a policy deny
    console.show_result(result)
    outputs = plan_outputs(runner, inputs, result.plan) | {"summary": result_line([result])}
    if not result.ok:
        runner.error("apply interrupted: some steps did not run", title="jetstream-gitops")
    return Outcome(outputs, console.markdown, ExitStatus.OK if result.ok else ExitStatus.ERROR)


def drift_mode(runner: Runner, inputs: Inputs, options: ConnectionOptions) -> Outcome:
    from reconciler.execution import stages
    from reconciler.planning.drift import from_plan
    from reconciler.render.drift_html import render_drift_html
    from reconciler.render.drift_text import headline

    console = GitHubConsole(runner, inputs, "drift")
    wanted = plan_request(inputs, options, prune=False, drift=True)  # docs/capacity.md
    plan = asyncio.run(stages.plan_for(wanted, console))
    report = from_plan(plan)
    console.show_drift(report)
    outputs = plan_outputs(runner, inputs, plan)
    outputs["has-changes"] = "true" if report.has_drift else "false"
    outputs["summary"] = headline(report)
    outputs["report-json"] = write_json(runner, inputs, "drift", report.to_json())
    html = Path(outputs["report-json"]).with_suffix(".html")
    html.write_text(render_drift_html(report), encoding="utf-8")
    outputs["report-html"] = str(html)
    code = ExitStatus.OK
    if report.has_drift and inputs.fail_on_drift:
        runner.error(headline(report), title="jetstream-gitops: drift")
        code = ExitStatus.CHANGES
    code = policy_code(runner, report.policy) or code
    return Outcome(outputs, console.markdown, code)


def policy_code(runner: Runner, findings: Sequence[PolicyFinding]) -> ExitStatus:
    """3 with an ``::error`` naming the rules when a policy deny rule does not hold
    (docs/policy.md), else 0: the step fails; its findings are in the plan shown."""
    from reconciler.planning.policy import refusal

    denied = refusal(findings, applying=False)
    if denied is None:
        return ExitStatus.OK
    runner.error(str(denied), title="jetstream-gitops: policy")
    return denied.exit_code


def backup_mode(runner: Runner, inputs: Inputs, options: ConnectionOptions) -> Outcome:
    """Data snapshots of the streams the specs declare into ``backup-dir`` (relative to
    the workspace), for ``actions/upload-artifact`` to keep (docs/backup.md)."""
    from reconciler.backup.take import Selection, declared_streams, specs_commit, take_backup
    from reconciler.render.markdown import cell, code
    from reconciler.specs.units import approx_size

    workspace = Path(runner.env.get("GITHUB_WORKSPACE") or os.getcwd())
    out = workspace / inputs.backup_dir
    paths = tuple(Path(p) for p in inputs.paths)
    declared = declared_streams(paths, tuple(Path(p) for p in inputs.overlays))
    result = asyncio.run(
        take_backup(
            options,
            out,
            Selection(declared=declared),
            commit=specs_commit(paths),
            on_notice=runner.log,
        )
    )
    manifest = result.manifest
    summary = f"{len(manifest.streams)} stream(s), {approx_size(result.size)} backed up"
    rows = [
        f"| {cell(s.name)} | {s.state.get('messages', 0)} | "
        f"{approx_size(int(s.state.get('bytes') or 0))} | {len(s.consumers)} |"
        for s in manifest.streams
    ]
    rows += [f"| {cell(name)} | not backed up: {cell(why)} | | |" for name, why in manifest.skipped]
    markdown = (
        f"### JetStream backup for {code(inputs.label)}\n\n{summary} to {code(inputs.backup_dir)}"
        " (protect it like the server: it holds every message, KeyValue values included)."
        "\n\n| stream | messages | bytes | consumers |\n|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )
    outputs = {"backup-dir": str(out), "summary": summary}
    return Outcome(outputs, markdown)


# --- saved plans (input plan-file: docs/saved-plans.md) ---------------------------------


def save_plan_mode(runner: Runner, inputs: Inputs, options: ConnectionOptions) -> Outcome:
    """Mode plan with ``plan-file``: the plan shown as mode plan shows it, and saved to
    that file for a later step's mode apply (output ``plan-file``: its absolute path)."""
    from reconciler.execution import stages
    from reconciler.specs.fingerprint import plan_root
    from reconciler.specs.project import PROJECT_FILE

    console = GitHubConsole(runner, inputs, "plan")
    workspace = Path(runner.env.get("GITHUB_WORKSPACE") or os.getcwd())
    project = workspace / (inputs.project or PROJECT_FILE) if inputs.env else None
    the_plan, saved = asyncio.run(
        stages.save_plan_for(
            plan_request(inputs, options),
            MarkdownConsole(runner.log),
            root=plan_root(),
            project=project,
        )
    )
    console.show_plan(the_plan)
    path = Path(runner.input("plan-file")).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(saved.text(), encoding="utf-8")
    outputs = plan_outputs(runner, inputs, the_plan) | {"plan-file": str(path)}
    return Outcome(outputs, console.markdown, policy_code(runner, the_plan.policy))


def saved_plan(runner: Runner, inputs: Inputs) -> SavedPlan | None:
    """The saved plan input ``plan-file`` names for mode apply (None: no input)."""
    from reconciler.planning.saved import SavedPlan

    name = runner.input("plan-file")
    if not name:
        return None
    try:
        text = Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"input 'plan-file': cannot read {name}: {err}") from None
    return SavedPlan.parse(text, source=name)


#: How the Action names the inputs the saved-plan rules talk about.
SPELLED = {
    "env": "input 'environment'",
    "migrate": "input 'migrate'",
    "migration": "input 'migration'",
}


def saved_request(
    runner: Runner, saved: SavedPlan, inputs: Inputs, options: ConnectionOptions
) -> tuple[SavedPlan, PlanRequest]:
    """The saved plan resolved in the workspace, and the request it names, by the rules
    ``apply FILE`` follows (:func:`reconciler.execution.saved_plans.resolve`): this
    step's connection, environment (the plan's), owner and consent, the file's paths
    and flags."""
    from reconciler.execution.saved_plans import Applying, resolve
    from reconciler.execution.stages import Target
    from reconciler.specs.fingerprint import plan_root, relative
    from reconciler.specs.lifecycle import MANAGE
    from reconciler.specs.project import PROJECT_FILE

    root = plan_root()
    target = Target(
        paths=(),
        options=options,
        owner=inputs.owner,
        env=inputs.env or None,
        lifecycle=inputs.lifecycle if inputs.lifecycle is not None else MANAGE,
        ignore=ignore_rules(inputs),
        domains=inputs.domains,
        project=inputs.project_read,
    )
    given = {"migrate": inputs.migrate, "migration": inputs.migration}
    applying = Applying(
        target=target,
        prune=inputs.prune,
        policies=tuple(Path(p) for p in inputs.policies),  # the plan must have been made with
        given=tuple(flag for flag, value in given.items() if value),
        paths=None if inputs.env else tuple(relative(Path(p), root) for p in inputs.paths),
        spelled=SPELLED,
    )
    workspace = Path(runner.env.get("GITHUB_WORKSPACE") or os.getcwd())
    project = workspace / (inputs.project or PROJECT_FILE) if inputs.env else None
    return resolve(saved, applying, root=root, project=project, notice=runner.log)


MODE_RUNNERS = {
    "plan": plan_mode,
    "apply": apply_mode,
    "drift": drift_mode,
    "backup": backup_mode,
}


# --- the step ----------------------------------------------------------------------------


def post_comment(runner: Runner, inputs: Inputs, markdown: str) -> None:
    """The sticky PR comment; a refused comment is a warning, not a failed step."""
    from action.comment import CommentError, GitHubAPI, PullRequest, upsert_comment

    env = runner.env
    pr = PullRequest.from_event(
        event_name=env.get("GITHUB_EVENT_NAME", ""),
        event_path=env.get("GITHUB_EVENT_PATH", ""),
        repository=env.get("GITHUB_REPOSITORY", ""),
    )
    if pr is None:
        runner.log("comment: not a pull_request event; no comment posted")
        return
    try:
        api = GitHubAPI(
            api_url=env.get("GITHUB_API_URL") or "https://api.github.com",
            token=env.get("GITHUB_TOKEN", ""),
        )
        result = upsert_comment(api, pr, path=inputs.label, markdown=markdown)
    except CommentError as err:
        runner.warning(f"could not comment on the pull request: {err}", title="jetstream-gitops")
        return
    runner.log(f"comment {result.action}: {result.url or result.id}")


def run_step(runner: Runner) -> int:
    """Run the action in ``runner``'s environment; returns the exit status."""
    token = runner.env.get("GITHUB_TOKEN", "")
    if token:
        runner.mask(token)
    try:
        inputs = Inputs.read(runner)
    except ReconcileError as err:
        annotate(runner, err)
        return ExitStatus.ERROR
    try:
        planned = jobs(runner, inputs)
    except ReconcileError as err:
        console = GitHubConsole(runner, inputs, inputs.mode)
        console.show_error(err)
        planned = []
        failed = Outcome.failed(err, console.markdown)
    if inputs.mode == "plan" and len(planned) > 1:
        outcomes = plan_all(runner, inputs, planned)
    else:
        outcomes = [(job, run_job(runner, job, options)) for job, options in planned]
    if not planned:
        outcomes = [(inputs, failed)]
    outcome = combined(outcomes)
    for name, value in outcome.outputs.items():
        runner.set_output(name, re.sub(r"\s+", " ", value) if name == "summary" else value)
    if runner.write_summary(outcome.markdown):
        runner.warning("the step summary was truncated to GitHub's 1 MiB limit")
    if inputs.comment:
        for job, result in outcomes:  # one sticky comment per path or environment
            post_comment(runner, job, result.markdown)
    return outcome.code


def plan_all(
    runner: Runner, inputs: Inputs, planned: list[tuple[Inputs, ConnectionOptions]]
) -> list[tuple[Inputs, Outcome]]:
    """Several environments in mode plan; an invalid spec in any fails the step before
    a server is asked."""
    try:
        return plan_jobs(runner, planned)
    except ReconcileError as err:
        console = GitHubConsole(runner, inputs, inputs.mode)
        console.show_error(err)
        return [(inputs, Outcome.failed(err, console.markdown))]


def run_job(runner: Runner, inputs: Inputs, options: ConnectionOptions) -> Outcome:
    try:
        return MODE_RUNNERS[inputs.mode](runner, inputs, options)
    except ReconcileError as err:
        console = GitHubConsole(runner, inputs, inputs.mode)
        console.show_error(err)
        return Outcome.failed(err, console.markdown)


def combined(outcomes: list[tuple[Inputs, Outcome]]) -> Outcome:
    """One environment's outcome as it is; several as one: any change, each summary
    prefixed with its environment, the worst exit status (1 error, then 2 drift)."""
    if len(outcomes) == 1:
        return outcomes[0][1]
    outputs: dict[str, str] = {}
    for job, outcome in outcomes:
        for name, value in outcome.outputs.items():
            if name == "has-changes":
                outputs[name] = "true" if "true" in (value, outputs.get(name)) else "false"
            elif name == "summary":
                line = f"{job.env}: {value}"
                outputs[name] = f"{outputs[name]}; {line}" if name in outputs else line
            else:
                outputs[name] = value  # the last environment's file
    codes = {outcome.code for _, outcome in outcomes}
    code = ExitStatus.ERROR if ExitStatus.ERROR in codes else max(codes)
    markdown = "\n".join([environments_table(outcomes), *(o.markdown for _, o in outcomes)])
    return Outcome(outputs, markdown, code)


def environments_table(outcomes: list[tuple[Inputs, Outcome]]) -> str:
    """The step summary's head when several environments ran: one row each (its name,
    whether it failed, its one-line summary), before each environment's own part."""
    from reconciler.render.markdown import cell, code

    marks: dict[int, str] = {ExitStatus.ERROR: "❌", ExitStatus.POLICY_DENY: "⛔ denied by policy"}
    rows = [
        f"| {code(job.label)} | {marks.get(outcome.code, '✅')} "
        f"| {cell(outcome.outputs.get('summary', ''))} |"
        for job, outcome in outcomes
    ]
    head = ["### Environments", "", "| environment | | summary |", "|---|---|---|"]
    return "\n".join([*head, *rows, ""])


def main() -> int:
    return run_step(Runner())


if __name__ == "__main__":
    sys.exit(main())
