"""A run's target: the spec paths it reads, the overlays merged in, the server, the owner.

Every front door (the CLI's ``--env``, the GitHub Action's ``environment`` input) turns a
project environment into a :class:`Target` here, so an environment means the same thing
everywhere: its connection (variables read when it is used), the shared specs plus its
own resources, its overlays, the project's owner, and for an environment without a
server its own embedded server (state in ``<store>/<environment>``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from reconciler.jetstream.connection import ConnectionOptions
from reconciler.specs.ignore import NO_RULES, IgnoreRules
from reconciler.specs.lifecycle import MANAGE, Lifecycle
from reconciler.specs.project import Project


@dataclass(frozen=True)
class Target:
    """What one run reads and where it goes: spec paths, overlays, server, owner."""

    paths: tuple[Path, ...]
    options: ConnectionOptions
    owner: str
    overlays: tuple[Path, ...] = ()
    env: str | None = None
    lifecycle: Lifecycle = MANAGE  # the environment's (docs/environments.md#lifecycle)
    ignore: IgnoreRules = NO_RULES  # drift ignore rules (docs/drift.md#ignore-rules)
    policies: tuple[Path, ...] = ()  # the project's policy files (docs/policy.md)
    #: Every environment of the project and its JetStream domain (standby pairs: docs/dr.md).
    domains: tuple[tuple[str, str | None], ...] = ()
    #: The project file read (the other side of a standby pair:
    #: docs/dr.md#2-watch-each-pairs-health).
    project: Project | None = field(default=None, compare=False, repr=False)


def environment_target(project: Project, name: str, base: ConnectionOptions, owner: str) -> Target:
    """One environment of ``project`` as a Target (variables read now). ``base`` gives
    what an environment does not set (timeouts, the embedded server's store)."""
    values = project.environment(name).connection()
    settings: dict[str, Any] = {field: values.get(field) for field in _OPTION_FIELDS}
    options = replace(base, **settings)
    if not options.is_configured:
        options = replace(options, store=base.store / name)  # each its own embedded server
    return environment_scope(project, name, options, owner)


def environment_scope(
    project: Project, name: str, options: ConnectionOptions, owner: str
) -> Target:
    """What one environment of ``project`` plans, wherever it connects (``options`` as
    given, its connection's variables not read: a door with a connection of its own,
    Pulumi's ``JetStreamSpecs``): its spec paths, overlays, lifecycle, the project's
    ignore rules and policies."""
    environment = project.environment(name)
    return Target(
        paths=tuple(project.spec_paths(environment)),
        options=options,
        owner=owner,
        overlays=environment.overlays,
        env=name,
        lifecycle=environment.lifecycle,
        ignore=project.ignore,
        policies=project.policies,
        domains=project.domains,
        project=project,
    )


def paths_target(
    project: Project, paths: tuple[Path, ...], options: ConnectionOptions, owner: str
) -> Target:
    """Spec ``paths`` read with ``project`` but no environment (``--project FILE PATHS``):
    the project's ignore rules and policies, no environment's lifecycle; the project
    read kept (a running agent reads the file again when it changes)."""
    return Target(
        paths, options, owner, ignore=project.ignore, policies=project.policies, project=project
    )


#: ConnectionOptions fields an environment may set: all but the run's own settings.
_OPTION_FIELDS = tuple(
    f.name
    for f in fields(ConnectionOptions)
    if f.name not in ("api_prefix", "timeout", "connect_timeout", "store")
)
