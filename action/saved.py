"""Saved plans in the Action (input ``plan-file``: docs/saved-plans.md)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

from action.console import (
    GitHubConsole,
    plan_outputs,
    policy_code,
)
from action.inputs import Inputs, Outcome
from action.jobs import ignore_rules, plan_request
from action.runner import InputError, Runner
from reconciler.console.markdown import MarkdownConsole
from reconciler.specs.files import write_renamed

if TYPE_CHECKING:
    from reconciler.execution.stages import PlanRequest
    from reconciler.jetstream import ConnectionOptions
    from reconciler.planning.saved import SavedPlan


def save_plan_mode(runner: Runner, inputs: Inputs, options: ConnectionOptions) -> Outcome:
    """Mode plan with ``plan-file``: the plan shown as mode plan shows it, and saved to
    that file for a later step's mode apply (output ``plan-file``: its absolute path)."""
    from reconciler.execution import stages
    from reconciler.execution.saved_plans import spec_folder_holding
    from reconciler.specs.fingerprint import plan_root
    from reconciler.specs.project import PROJECT_FILE

    console = GitHubConsole(runner, inputs, "plan")
    workspace = Path(runner.env.get("GITHUB_WORKSPACE") or os.getcwd())
    project = workspace / (inputs.project or PROJECT_FILE) if inputs.env else None
    request = plan_request(inputs, options)
    path = Path(runner.input("plan-file"))
    inside = spec_folder_holding(path, request)  # the next run would read it as a spec
    if inside is not None:
        raise InputError(f"input 'plan-file': {path} is inside the spec folder {inside}")
    the_plan, saved = asyncio.run(
        stages.save_plan_for(
            request,
            MarkdownConsole(runner.log),
            root=plan_root(),
            project=project,
        )
    )
    console.show_plan(the_plan)
    path = _write_plan_file(path, saved.text(), workspace)
    outputs = plan_outputs(runner, inputs, the_plan) | {"plan-file": str(path)}
    return Outcome(outputs, console.markdown, policy_code(runner, the_plan.policy))


def _write_plan_file(path: Path, text: str, workspace: Path) -> Path:
    """Write the saved plan to ``path`` (relative to the step's working folder) whole,
    and return its absolute path. The workspace holds the pull request's files, and a
    pull request can hold symlinks: a folder of the path that is a symlink is refused
    (``plans -> ~/.ssh`` would have the plan written outside the workspace, over a file
    of the runner's), and the file is written beside its place and renamed over it, so
    a symlink at the path itself is replaced, never followed."""
    path = Path(os.path.abspath(path))
    refuse_symlinked_folders(path.parent, workspace, "plan-file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_renamed(path, lambda file: file.write(text))
    except OSError as err:
        raise InputError(f"input 'plan-file': cannot write {path}: {err.strerror or err}") from None
    return path


def refuse_symlinked_folders(folder: Path, workspace: Path, name: str) -> None:
    """Refuse ``folder`` (input ``name`` writes in it) when it, or a folder above it
    inside the workspace, is a symlink: the workspace holds the pull request's files,
    and ``plans -> ~/.ssh`` would have the Action write outside it. The workspace itself
    (the runner made it) and folders outside it (RUNNER_TEMP) are taken as they are."""
    workspace = Path(os.path.abspath(workspace))
    folder = Path(os.path.abspath(folder))
    while folder != workspace and folder.is_relative_to(workspace):
        if folder.is_symlink():
            raise InputError(
                f"input '{name}': {folder} is a symlink; the Action never writes through "
                "one (name a path in the workspace or under RUNNER_TEMP)"
            )
        folder = folder.parent


def saved_plan(runner: Runner, inputs: Inputs) -> SavedPlan | None:
    """The saved plan input ``plan-file`` names for mode apply (None: no input)."""
    from reconciler.execution.saved_plans import read_saved

    name = runner.input("plan-file")
    if not name:
        return None
    return read_saved(Path(name))  # a device, pipe or too large a file refused unread


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
