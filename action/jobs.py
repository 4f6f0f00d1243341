"""What the step runs: the connection (secrets masked, a creds file written), one job per
path list or environment, and each job's plan request, built from its target as the
CLI builds it (``PlanRequest.for_target``)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from action.inputs import Inputs
from action.runner import Runner

if TYPE_CHECKING:
    from reconciler.execution.stages import PlanRequest, Target
    from reconciler.jetstream import ConnectionOptions
    from reconciler.specs.ignore import IgnoreRules


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


def target(inputs: Inputs, options: ConnectionOptions) -> Target:
    """The job's target, as the CLI resolves one: its paths, connection, owner,
    overlays, environment, lifecycle and ignore rules (the policy files stay the
    step's: ``inputs.policies`` holds the project's first, see :func:`jobs`)."""
    from reconciler.execution.stages import Target
    from reconciler.specs.lifecycle import MANAGE

    return Target(
        paths=tuple(Path(p) for p in inputs.paths),
        options=options,
        owner=inputs.owner,
        overlays=tuple(Path(p) for p in inputs.overlays),
        env=inputs.env or None,
        lifecycle=MANAGE if inputs.lifecycle is None else inputs.lifecycle,
        ignore=ignore_rules(inputs),
        domains=inputs.domains,
        project=inputs.project_read,
    )


def plan_request(inputs: Inputs, options: ConnectionOptions, **flags: Any) -> PlanRequest:
    """What the engine reads for one path list or environment: the request the CLI
    builds from a target (``PlanRequest.for_target``), with the step's flags."""
    from reconciler.execution.stages import PlanRequest

    steps = {"prune": inputs.prune, "migrate": inputs.migrate, "migration": inputs.migration}
    policies = tuple(Path(p) for p in inputs.policies)
    return PlanRequest.for_target(target(inputs, options), policies=policies, **(steps | flags))


def ignore_rules(inputs: Inputs) -> IgnoreRules:
    """The job's drift ignore rules: an environment's come from the project file
    (``jobs``); for paths, the ``.reconcileignore`` in their folders (the CLI's rule)."""
    if inputs.ignore is not None:
        return inputs.ignore
    from reconciler.specs.ignore import rules_next_to

    return rules_next_to(Path(p) for p in inputs.paths)
