"""The desired side: one folder of spec files per environment, validated on the driver.

Each sub-folder of the fleet folder is an environment (hidden folders are skipped).
Its specs are loaded with ``reconciler.specs.validate.load_specs``, exactly as
``reconcile plan`` does, and grouped by stream for the planner
(``reconciler.planning.plan.group_streams``). An environment whose folder does not
validate is skipped: its problems (``FILE:LINE``) go to the summary and stderr, the
other environments are still processed, and the job exits 1.

What the plan refuses on a given day (a field the day's server does not know, an
external stream that is not there) is checked here, per environment and day, with the
planner's own checks, so the workers only ever plan what the plan accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from reconciler.errors import Problem, ReconcileError, SpecError
from reconciler.model.normalize import unsupported_fields
from reconciler.model.state import LiveState, ServerInfo
from reconciler.planning.plan import (
    DEFAULT_OWNERSHIP,
    Ownership,
    StreamGroup,
    group_streams,
    stream_problems,
)
from reconciler.planning.standby import for_environment
from reconciler.specs.cache import cache_folder
from reconciler.specs.project import load_project
from reconciler.specs.spec import DEFAULT_OWNER, Spec
from reconciler.specs.validate import load_specs


@dataclass(frozen=True)
class EnvSpecs:
    """The validated specs of one environment, or why its folder is invalid."""

    env: str
    folder: Path
    specs: tuple[Spec, ...] = ()
    problems: tuple[Problem, ...] = ()
    #: whose resources the environment's plans manage: the project's owner, or --owner
    ownership: Ownership = DEFAULT_OWNERSHIP

    @property
    def valid(self) -> bool:
        return not self.problems

    def declared_streams(self) -> set[str]:
        """Streams the specs declare (buckets as their streams, external ones included)."""
        return {s.stream_name for s in self.specs if s.kind != "Consumer"}

    def groups(self) -> list[StreamGroup]:
        """The declared specs grouped by stream, as the planner groups them."""
        return group_streams(self.specs, LiveState(server=ServerInfo("0.0.0", 0)))

    def by_stream(self) -> dict[str, tuple[Spec | None, tuple[Spec, ...]]]:
        """stream name → (the declared stream or bucket, its declared consumers), as the
        workers plan them: without each field's location (the driver reports every
        problem a location is for; at 100,000 specs they were half of what every worker
        unpickles)."""
        return {
            g.name: (
                None if g.declared is None else replace(g.declared, locations={}),
                tuple(replace(c, locations={}) for c in g.consumers),
            )
            for g in self.groups()
        }

    def problems_on(self, server: ServerInfo, present: Callable[[str], bool]) -> list[Problem]:
        """What the plan refuses against ``server`` when ``present(stream)`` tells which
        of :meth:`needed_streams` exist: unknown fields, missing streams."""
        problems = unsupported_fields(self.specs, server)
        for group in self.groups():
            problems += stream_problems(group, live_present=present(group.name))
        return problems

    def needed_streams(self) -> tuple[str, ...]:
        """Live streams whose config the desired side reads (external, or undeclared)."""
        managed = {s.stream_name for s in self.specs if s.kind != "Consumer" and not s.external}
        external = {s.stream_name for s in self.specs if s.external}
        used = {s.stream for s in self.specs if s.kind == "Consumer" and s.stream}
        return tuple(sorted(external | (used - managed)))


def env_folders(fleet_dir: Path) -> list[tuple[str, Path]]:
    """``(env, folder)`` for each sub-folder of the fleet folder, sorted by name."""
    if not fleet_dir.is_dir():
        raise ReconcileError(f"{fleet_dir}: not a folder (expected one sub-folder per env)")
    found = sorted(
        (p.name, p) for p in fleet_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
    )
    if not found:
        raise ReconcileError(f"{fleet_dir}: no environment sub-folders")
    return found


def load_fleet(fleet_dir: Path, *, owner: str | None = None) -> list[EnvSpecs]:
    """Every environment's specs; invalid folders carry their problems instead.

    ``fleet_dir`` is a folder with one sub-folder per environment, or a project file
    (``reconcile.yaml``): then each of its environments is its shared specs with its own
    overlays and resources merged in, exactly what ``reconcile plan --env`` validates.
    ``owner`` (``--owner``) is whose resources the plans manage; a project file's own
    ``owner`` comes first (as ``reconcile plan --env`` takes it), then the default.
    """
    if fleet_dir.is_file():
        return load_project_fleet(fleet_dir, owner=owner)
    loaded = []
    cache = cache_folder()
    ownership = Ownership(owner or DEFAULT_OWNER)
    for env, folder in env_folders(fleet_dir):
        try:
            specs = load_specs([folder], cache=cache)
        except SpecError as err:
            loaded.append(EnvSpecs(env, folder, problems=tuple(err.problems)))
            continue
        loaded.append(EnvSpecs(env, folder, specs=tuple(specs), ownership=ownership))
    return loaded


def load_project_fleet(project_file: Path, *, owner: str | None = None) -> list[EnvSpecs]:
    """Every environment of a project file, its overlays merged into the shared specs,
    planned as the project's owner (else ``owner``, else the default)."""
    project = load_project(project_file)  # a broken project file stops the job
    ownership = Ownership(project.owner or owner or DEFAULT_OWNER)
    loaded = []
    domains = {env.name: env.domain for env in project.environments.values()}
    for name, environment in sorted(project.environments.items()):
        try:
            specs = project.load_specs(environment)
            specs = for_environment(specs, name, domains).specs  # standbys: docs/dr.md
        except SpecError as err:
            loaded.append(EnvSpecs(name, project.root, problems=tuple(err.problems)))
            continue
        loaded.append(EnvSpecs(name, project.root, specs=tuple(specs), ownership=ownership))
    return loaded
