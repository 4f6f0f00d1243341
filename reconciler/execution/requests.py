"""What a run is asked to do, and who hears about it: the values every front door builds.

A :class:`PlanRequest` says what to read (spec paths, overlays, the environment and its
server) and how to plan it (prune, migrate, the owner); an :class:`ApplyRequest` adds
what the executor may do (the ``allow_*`` flags, approval, dry run, concurrency, the
lock). Both are frozen values: the CLI, the GitHub Action, the Pulumi provider and a
library caller (the agent) build one and hand it to :mod:`reconciler.execution.run`,
so a flag means the same thing whichever door it came through.

An :class:`Observer` hears a run's events: notices and warnings, the plan made (shown
before anything changes), the question (only when :attr:`Observer.asks`), each step
done, the result. It is the one listener interface: the terminal console (text or
JSON), the Markdown/GitHub console, the Pulumi provider and the agent subclass it;
:data:`QUIET`, an ``Observer`` itself, hears nothing. The engine never imports a front
door: the front doors subclass this class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.execution import lock
from reconciler.planning.plan import Ownership
from reconciler.specs.ignore import NO_RULES, IgnoreRules
from reconciler.specs.lifecycle import MANAGE, Lifecycle
from reconciler.specs.project import Project

if TYPE_CHECKING:
    from reconciler.execution.apply import ApplyResult, StepEvent
    from reconciler.execution.environments import Target
    from reconciler.jetstream.connection import ConnectionOptions
    from reconciler.planning.saved import SavedPlan
    from reconciler.planning.steps import Plan
    from reconciler.specs.ahead import ParsedAhead

PathLike = str | Path


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """What to read and how to plan it (reads only)."""

    paths: tuple[Path, ...]
    options: ConnectionOptions
    overlays: tuple[Path, ...] = ()
    env: str | None = None  # the project environment these paths and options come from
    owner: str = "default"
    take_over: bool = False
    prune: bool = False
    strict: bool = False  # spec warnings are errors
    migrate: bool = False
    migration: str | None = None  # resume | rollback | continue (docs/migrate.md)
    #: The environment's lifecycle, merged into every spec's (docs/environments.md).
    lifecycle: Lifecycle = MANAGE
    #: Drift ignore rules: unmanaged notes they hide leave the plan (docs/drift.md).
    ignore: IgnoreRules = NO_RULES
    #: Policy files (docs/policy.md): the project's ``policies:``, then ``--policy``.
    policies: tuple[Path, ...] = ()
    #: A drift report (exit 0/2): what the account has no room for is a capacity
    #: warning on the plan, not an error (docs/capacity.md).
    drift: bool = False
    #: Every environment of the project and its JetStream domain: where a stream's
    #: standby mirrors it from (docs/dr.md).
    domains: tuple[tuple[str, str | None], ...] = ()
    #: The project file read, when the request is an environment's
    #: (docs/dr.md#2-watch-each-pairs-health).
    project: Project | None = field(default=None, compare=False, repr=False)
    #: The spec files of ``paths`` parsed by a child already (:mod:`reconciler.specs.ahead`:
    #: the door forked it before importing the engine); the load takes their documents.
    ahead: ParsedAhead | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(
        cls,
        paths: Sequence[PathLike],
        options: ConnectionOptions,
        *,
        overlays: Sequence[PathLike] = (),
        **flags: Any,
    ) -> PlanRequest:
        """A request from plain paths (strings or paths), as a library caller has them;
        ``flags`` are the other fields."""
        paths_ = tuple(Path(p) for p in paths)
        request = cls(paths=paths_, options=options, overlays=tuple(Path(p) for p in overlays))
        return replace(request, **flags)

    @classmethod
    def for_target(
        cls, target: Target, *, policies: Sequence[Path] = (), **flags: Any
    ) -> PlanRequest:
        """A request for a run's :class:`~reconciler.execution.environments.Target`;
        ``policies`` (``--policy``) come on top of the target's (the project file's)."""
        request = cls(
            paths=target.paths,
            options=target.options,
            overlays=target.overlays,
            env=target.env,
            owner=target.owner,
            lifecycle=target.lifecycle,
            ignore=target.ignore,
            policies=(*target.policies, *policies),
            domains=target.domains,
            project=target.project,
        )
        return replace(request, **flags)

    @property
    def ownership(self) -> Ownership:
        return Ownership(self.owner, self.take_over)


@dataclass(frozen=True, kw_only=True)
class ApplyRequest:
    """A plan request and what the executor may do with the plan."""

    plan: PlanRequest
    allow_replace: bool = False
    allow_data_loss: bool = False
    #: Changes nobody was asked about are made (``--yes``, the Action's ``mode: apply``,
    #: a library call); without it only the embedded server is changed unasked.
    approved: bool = True
    dry_run: bool = False
    concurrency: int = 16
    lock_timeout: float | None = lock.DEFAULT_TIMEOUT  # None: no apply lock
    #: A saved plan (``reconcile apply FILE``): applied only when the specs, the server
    #: and the plan made again are the saved ones (docs/saved-plans.md); it is the
    #: approval, never a flag allowing a destructive step.
    expected: SavedPlan | None = None


class Observer:
    """The one listener interface: hears a run's events (every method may be called
    from the run's event loop). It hears nothing and asks nobody itself (a library
    call: :data:`QUIET`); each front door's listener overrides what it shows: the
    Consoles (``reconciler.console``: the terminal's and the Markdown/GitHub one), the
    Pulumi provider's, the agent's log."""

    #: Whether :meth:`confirm` asks a person (a terminal); else the run relies on
    #: :attr:`ApplyRequest.approved`.
    asks: bool = False

    def notice(self, message: str) -> None:
        """A side remark: which server, waiting for the lock, a spec warning."""

    def show_plan(self, plan: Plan) -> None:
        """The plan an apply made, before anything changes."""

    async def confirm(self, plan: Plan) -> bool:
        """The person's answer to the plan shown (only called when :attr:`asks`)."""
        return False

    def step(self, event: StepEvent) -> None:
        """A step finished: applied, failed or skipped."""

    def show_result(self, result: ApplyResult) -> None:
        """How an apply ended (the summary line)."""

    def progress(self, what: str, done: int, total: int | None) -> None:
        """Bytes moved so far by a transfer (a backup's snapshot, a restore): ``what``
        names it (``backed up ORDERS``), ``total`` is None while the end is not known;
        ``done == total`` says it finished (heard once per transfer)."""


#: The listener that hears nothing (the name library callers and tests subclass).
Quiet = Observer

QUIET: Observer = Observer()
