"""The modes: plan (one or several environments), apply, drift, backup."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

from action.console import (
    GitHubConsole,
    plan_outputs,
    policy_code,
    write_json,
)
from action.inputs import Inputs, Outcome
from action.jobs import plan_request
from action.runner import Runner
from action.saved import refuse_symlinked_folders, save_plan_mode, saved_plan, saved_request
from reconciler.console import result_line
from reconciler.console.markdown import MarkdownConsole
from reconciler.errors import (
    ApplyFailed,
    ExitStatus,
    RefusedPlan,
)

if TYPE_CHECKING:
    from reconciler.jetstream import ConnectionOptions


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


def backup_mode(runner: Runner, inputs: Inputs, options: ConnectionOptions) -> Outcome:
    """Data snapshots of the streams the specs declare into ``backup-dir`` (relative to
    the workspace), for ``actions/upload-artifact`` to keep (docs/backup.md)."""
    from reconciler.backup.take import Selection, declared_streams, specs_commit, take_backup
    from reconciler.render.markdown import cell, code
    from reconciler.specs.units import approx_size

    workspace = Path(runner.env.get("GITHUB_WORKSPACE") or os.getcwd())
    out = workspace / inputs.backup_dir
    refuse_symlinked_folders(out, workspace, "backup-dir")
    paths = tuple(Path(p) for p in inputs.paths)
    declared = declared_streams(paths, tuple(Path(p) for p in inputs.overlays))
    result = asyncio.run(
        take_backup(
            options,
            out,
            Selection(declared=declared),
            commit=specs_commit(paths),
            observer=GitHubConsole(runner, inputs, "backup"),  # its notices, escaped
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


MODE_RUNNERS = {
    "plan": plan_mode,
    "apply": apply_mode,
    "drift": drift_mode,
    "backup": backup_mode,
}
