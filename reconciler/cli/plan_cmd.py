"""``reconcile plan`` and ``reconcile apply``."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reconciler.cli.options import (
    Seconds,
    connection_options,
    format_option,
    full_option,
    owner_option,
    project_options,
    project_target,
    resolve_target,
    strict_option,
    take_over_option,
)
from reconciler.console.terminal import TerminalConsole
from reconciler.model.migration import CHOICES as MIGRATION_CHOICES

if TYPE_CHECKING:
    from reconciler.console.terminal import PlanFormat
    from reconciler.execution.requests import PlanRequest
    from reconciler.planning.steps import Plan

FORMAT_NAMES = ["text", "json", "markdown"]
paths_argument = click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
migrate_option = click.option(
    "--migrate",
    is_flag=True,
    help="Change what an update cannot (a stream's storage, retention to or from workqueue, "
    "sealed or deny_delete back to false, ...) by migrating the messages to the new stream "
    "instead of replacing it: nothing is lost (docs/migrate.md).",
)
migration_option = click.option(
    "--migration",
    type=click.Choice(MIGRATION_CHOICES),
    default=None,
    help="An interrupted migration whose specs changed since it stopped (with --migrate): "
    "resume (finish to its recorded target), rollback (back to the old config, every "
    "message kept) or continue (on to the declared config). docs/migrate.md.",
)


def asks_for_yes(console: TerminalConsole, auto_approve: bool) -> bool:
    """Whether a change is asked about at the terminal (``apply``, ``restore``): a person
    is there (stderr and stdin are terminals, not CI) and ``--yes`` was not given."""
    return console.interactive and sys.stdin.isatty() and not auto_approve


def _console(fmt: str, *, full: bool = False, json_lines: bool = False) -> TerminalConsole:
    """The terminal Console for ``--format``; ``json_lines``: apply's JSON (the plan, each
    step's outcome, the result: one JSON document a line)."""
    formats: dict[str, PlanFormat] = {"text": "text", "json": "json", "markdown": "markdown"}
    return TerminalConsole(fmt=formats[fmt], full=full, json_lines=json_lines)


@click.command()
@paths_argument
@click.option("--prune", is_flag=True, help="Plan deletes of managed resources no spec declares.")
@migrate_option
@migration_option
@owner_option
@take_over_option
@strict_option
@format_option(FORMAT_NAMES, "plan")
@full_option
@click.option(
    "--detailed-exitcode", is_flag=True, help="Exit 2 when the plan has changes (0 when none)."
)
@click.option(
    "--all-envs",
    is_flag=True,
    help="Plan every environment of the project file, one after the other, then a summary.",
)
@project_options
@connection_options
@click.pass_context
def plan(
    ctx: click.Context,
    /,
    paths: tuple[Path, ...],
    prune: bool,
    migrate: bool,
    migration: str | None,
    owner: str,
    take_over: bool,
    strict: bool,
    fmt: str,
    full: bool,
    detailed_exitcode: bool,
    all_envs: bool,
    project_file: Path | None,
    env_name: str | None,
    **conn: Any,
) -> int:
    """Show what apply would change; changes nothing."""
    from reconciler.execution.requests import PlanRequest

    console = _console(fmt, full=full)
    if all_envs:
        return _plan_all(
            ctx,
            console,
            paths,
            conn,
            project_file,
            env_name,
            owner,
            take_over,
            prune=prune,
            migrate=migrate,
            migration=migration,
            strict=strict,
            detailed_exitcode=detailed_exitcode,
        )
    target = resolve_target(
        ctx, paths=paths, conn=conn, owner=owner, project_file=project_file, env_name=env_name
    )
    the_plan = _plan_and_show(
        console,
        PlanRequest.for_target(
            target,
            take_over=take_over,
            prune=prune,
            migrate=migrate,
            migration=migration,
            strict=strict,
        ),
    )
    return 2 if detailed_exitcode and the_plan.has_changes else 0


def _plan_all(
    ctx: click.Context,
    console: TerminalConsole,
    paths: tuple[Path, ...],
    conn: dict[str, Any],
    project_file: Path | None,
    env_name: str | None,
    owner: str,
    take_over: bool,
    *,
    prune: bool,
    migrate: bool,
    migration: str | None,
    strict: bool,
    detailed_exitcode: bool,
) -> int:
    """``plan --all-envs``: each environment's plan, then one line per environment.

    Every environment is validated before any is planned (a broken overlay anywhere stops
    the run before a server is asked). An environment that cannot be planned (its server
    unreachable, say) is reported and the others still are; the exit status is 1 then,
    else 2 with ``--detailed-exitcode`` when any plan has changes, else 0.
    """
    from reconciler.execution import run
    from reconciler.execution.requests import PlanRequest
    from reconciler.render.text import summary_line
    from reconciler.specs.project import find_project, load_project

    if paths or env_name:
        raise click.UsageError("--all-envs plans every environment: no PATHS and no --env")
    found = project_file or find_project()
    if found is None:
        raise click.UsageError("--all-envs needs a project file: reconcile.yaml or --project")
    project = load_project(found)
    requests = [
        PlanRequest.for_target(
            project_target(ctx, project, paths=(), conn=conn, owner=owner, env_name=name),
            take_over=take_over,
            prune=prune,
            migrate=migrate,
            migration=migration,
            strict=strict,
        )
        for name in project.environments
    ]

    def begin(request: PlanRequest) -> None:
        where = request.options.display_servers or "embedded nats-server"
        console.heading(f"Environment {request.env} ({where})")

    async def plan_all() -> list[run.EnvironmentPlan]:
        done = []
        async for planned in run.plan_environments(requests, console, begin=begin):
            if planned.error is not None:
                console.show_error(planned.error)
            elif console.fmt != "json":
                assert planned.plan is not None
                console.show_plan(planned.plan)
            done.append(planned)
        return done

    lines, failed, changed = [], False, False
    documents: dict[str, Any] = {}
    for planned in asyncio.run(plan_all()):
        env = str(planned.request.env)
        if planned.plan is None:
            lines.append(f"{env}: failed: {planned.error}")
            documents[env] = {"error": str(planned.error)}
            failed = True
            continue
        changed = changed or planned.plan.has_changes
        lines.append(f"{env}: {summary_line(planned.plan)}")
        documents[env] = planned.plan.to_json()
    if console.fmt == "json":
        import json

        from reconciler.model.values import inert_json

        click.echo(inert_json(json.dumps({"environments": documents}, indent=2)))
    else:
        from reconciler.model.values import printable

        console.heading("All environments")
        for line in lines:
            click.echo(printable(line))
    if failed:
        return 1
    return 2 if detailed_exitcode and changed else 0


def _plan_and_show(console: TerminalConsole, request: PlanRequest) -> Plan:
    """Validate, plan (reads only) and show the plan: `plan` and `apply --dry-run`."""
    from reconciler.execution import run

    the_plan = asyncio.run(run.plan_for(request, console))
    console.show_plan(the_plan)
    return the_plan


@click.command()
@paths_argument
@click.option("--dry-run", is_flag=True, help="Plan only; the same as `reconcile plan`.")
@click.option("--prune", is_flag=True, help="Delete managed resources no spec declares.")
@migrate_option
@migration_option
@owner_option
@take_over_option
@strict_option
@click.option(
    "--allow-replace",
    is_flag=True,
    help="Allow steps that destroy messages (replacing a stream or consumer, deleting a stream).",
)
@click.option(
    "--allow-data-loss",
    is_flag=True,
    help="Allow every step that destroys data: replaces, deletes, and updates that delete "
    "stored messages in place (a tighter max_msgs, max_bytes, max_age, history or ttl on a "
    "stream holding messages; retention limits to interest).",
)
@format_option(FORMAT_NAMES, "plan")
@full_option
@click.option("--detailed-exitcode", is_flag=True, help="With --dry-run: exit 2 on changes.")
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=16,
    show_default=True,
    help="How many independent steps run at once.",
)
@click.option(
    "--lock-timeout",
    type=Seconds(),
    default=60.0,
    show_default=True,
    help="How long to wait for another apply's lock: seconds or a duration (2m).",
)
@click.option("--no-lock", is_flag=True, help="Apply without taking the server's apply lock.")
@click.option(
    "--yes",
    "-y",
    "--auto-approve",
    "auto_approve",
    is_flag=True,
    help="Apply without asking. On a terminal apply shows the plan and asks for 'yes', "
    "then reads the server again and refuses if the plan changed meanwhile; without a "
    "terminal an apply to a server you named (--server, NATS_URL, --context, --env) "
    "changes nothing without this flag. The embedded server needs none.",
)
@project_options
@connection_options
@click.pass_context
def apply(
    ctx: click.Context,
    /,
    paths: tuple[Path, ...],
    dry_run: bool,
    prune: bool,
    migrate: bool,
    migration: str | None,
    owner: str,
    take_over: bool,
    strict: bool,
    allow_replace: bool,
    allow_data_loss: bool,
    fmt: str,
    full: bool,
    detailed_exitcode: bool,
    concurrency: int,
    lock_timeout: float,
    no_lock: bool,
    auto_approve: bool,
    project_file: Path | None,
    env_name: str | None,
    **conn: Any,
) -> int:
    """Change the server to match the specs (validates everything first)."""
    from reconciler.execution import run
    from reconciler.execution.requests import ApplyRequest, PlanRequest

    target = resolve_target(
        ctx, paths=paths, conn=conn, owner=owner, project_file=project_file, env_name=env_name
    )
    console = _console(fmt, full=full, json_lines=True)
    flags = {"--allow-replace": allow_replace, "--allow-data-loss": allow_data_loss}
    console.allowed = tuple(flag for flag, given in flags.items() if given)
    console.asks = asks_for_yes(console, auto_approve) and fmt == "text"
    wanted = PlanRequest.for_target(
        target,
        take_over=take_over,
        prune=prune,
        migrate=migrate,
        migration=migration,
        strict=strict,
    )
    request = ApplyRequest(
        plan=wanted,
        allow_replace=allow_replace,
        allow_data_loss=allow_data_loss,
        concurrency=concurrency,
        approved=auto_approve,
        lock_timeout=None if no_lock else lock_timeout,
    )

    async def go() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        with console.steps():
            return await run.apply_for(request, console, stop=stop)

    if dry_run:
        the_plan = _plan_and_show(console, wanted)
        return 2 if detailed_exitcode and the_plan.has_changes else 0
    result = asyncio.run(go())
    console.show_result(result)
    if result.cancelled and result.interrupted:  # Ctrl-C at the question
        console.notice("interrupted: nothing was changed")
        return 130
    if result.cancelled:
        return 1
    if result.interrupted:
        skipped = len(result.skipped)
        console.notice(f"interrupted: {skipped} step(s) not started; re-run apply to converge")
        return 130
    return 0
