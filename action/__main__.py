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

import re
import sys
from typing import TYPE_CHECKING

from action.console import (
    GitHubConsole,
    annotate,
)
from action.inputs import Inputs, Outcome
from action.jobs import jobs
from action.modes import MODE_RUNNERS, plan_jobs
from action.runner import Runner
from reconciler.errors import (
    ExitStatus,
    ReconcileError,
    unforeseen,
)

if TYPE_CHECKING:
    from reconciler.jetstream import ConnectionOptions


__all__ = ["GitHubConsole", "Inputs", "Outcome", "environments_table", "main", "run_step"]


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
    """Run the action in ``runner``'s environment; returns the exit status. An error no
    check foresaw (a reply no NATS server sends, which on an account without JetStream
    any client may send; or a bug) fails the step in one annotation saying its type and
    place (:func:`~reconciler.errors.unforeseen`, the CLI's words), never a traceback:
    the error's text may quote that reply, and the runner reads ``##[error]`` anywhere
    in a log line."""
    try:
        return _run_step(runner)
    except Exception as err:  # the CLI's rule (reconciler.cli.main): type and place only
        runner.error(unforeseen(err), title="jetstream-gitops")
        return ExitStatus.ERROR


def _run_step(runner: Runner) -> int:
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
