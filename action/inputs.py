"""The step's inputs (``INPUT_*``, checked) and what a mode produced."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from action.runner import InputError, Runner
from reconciler.errors import (
    ExitStatus,
    ReconcileError,
)
from reconciler.model.migration import CHOICES as MIGRATION_CHOICES

if TYPE_CHECKING:
    from reconciler.specs.ignore import IgnoreRules


MODES = ("plan", "apply", "drift", "backup")
BACKUP_DIR = "jetstream-backup"


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
            # one URL or several, by commas or on lines of their own (as 'path' takes
            # its folders); a URL holds no blank: one percent-encoded is not one
            server=",".join(runner.input("server").replace(",", " ").split()),
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
