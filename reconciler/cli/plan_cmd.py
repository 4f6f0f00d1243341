"""``reconcile plan`` and ``reconcile apply``."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reconciler.cli.options import (
    connection_options,
    format_option,
    full_option,
    lock_options,
    owner_option,
    policy_option,
    project_options,
    project_target,
    required_project,
    resolve_target,
    strict_option,
    take_over_option,
)
from reconciler.errors import ExitStatus, changes_status
from reconciler.model.migration import CHOICES as MIGRATION_CHOICES
from reconciler.specs.ahead import parse_ahead

if TYPE_CHECKING:
    from reconciler.console.terminal import PlanFormat, TerminalConsole
    from reconciler.execution.stages import PlanRequest, Target
    from reconciler.planning.saved import SavedPlan
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
    from reconciler.console.terminal import TerminalConsole

    formats: dict[str, PlanFormat] = {"text": "text", "json": "json", "markdown": "markdown"}
    return TerminalConsole(fmt=formats[fmt], full=full, json_lines=json_lines)


@click.command()
@paths_argument
@click.option(
    "--prune",
    is_flag=True,
    help="Plan deletes of managed resources no spec declares (this --owner's only).",
)
@migrate_option
@migration_option
@owner_option
@take_over_option
@strict_option
@policy_option
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
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also save the plan to FILE (JSON: the spec files' digests and commit, the server, "
    "the steps and the live configs they were planned against; no secret) for `reconcile "
    "apply FILE`, which applies exactly those steps or refuses (docs/saved-plans.md). "
    "--format still prints to standard output.",
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
    policies: tuple[Path, ...],
    fmt: str,
    full: bool,
    detailed_exitcode: bool,
    all_envs: bool,
    out: Path | None,
    project_file: Path | None,
    env_name: str | None,
    **conn: Any,
) -> int:
    """Show what apply would change; changes nothing."""
    if all_envs and out is not None:
        raise click.UsageError("--out saves one plan: name one environment, not --all-envs")
    # The spec files parsed in a child while the engine is imported (specs.ahead); a
    # saved plan reads each file once, to digest what it planned: not ahead.
    ahead = parse_ahead(paths) if out is None and not all_envs else None
    try:
        from reconciler.execution.stages import PlanRequest

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
                policies=policies,
            )
        target = resolve_target(
            ctx, paths=paths, conn=conn, owner=owner, project_file=project_file, env_name=env_name
        )
        request = PlanRequest.for_target(
            target,
            take_over=take_over,
            prune=prune,
            migrate=migrate,
            migration=migration,
            strict=strict,
            policies=policies,
            ahead=ahead,
        )
        if out is not None:
            project = _project_read(target.env, project_file)
            the_plan = _plan_and_save(console, request, out, project)
            console.notice(
                f"saved the plan to {out}; apply exactly it with: {_apply(ctx, request, out)}"
            )
        else:
            the_plan = _plan_and_show(console, request)
        _check_policy(the_plan)
        return changes_status(the_plan.has_changes, detailed=detailed_exitcode)

    finally:
        if ahead is not None:
            ahead.close()


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
    policies: tuple[Path, ...] = (),
) -> int:
    """``plan --all-envs``: each environment's plan, then one line per environment.

    Every environment is validated before any is planned (a broken overlay anywhere stops
    the run before a server is asked). An environment that cannot be planned (its server
    unreachable, say) is reported and the others still are; the exit status is 1 then,
    else 2 with ``--detailed-exitcode`` when any plan has changes, else 0.
    """
    import asyncio

    from reconciler.execution import stages
    from reconciler.execution.stages import PlanRequest
    from reconciler.render.text import summary_line

    if paths or env_name:
        raise click.UsageError("--all-envs plans every environment: no PATHS and no --env")
    project = required_project(project_file, "--all-envs needs a project file")
    requests = [
        PlanRequest.for_target(
            project_target(ctx, project, paths=(), conn=conn, owner=owner, env_name=name),
            take_over=take_over,
            prune=prune,
            migrate=migrate,
            migration=migration,
            strict=strict,
            policies=policies,
        )
        for name in project.environments
    ]

    def begin(request: PlanRequest) -> None:
        where = request.options.display_servers or "embedded nats-server"
        console.heading(f"Environment {request.env} ({where})")

    async def plan_all() -> list[stages.EnvironmentPlan]:
        done = []
        async for planned in stages.plan_environments(requests, console, begin=begin):
            if planned.error is not None:  # in the environments' document below
                console.show_error(planned.error, ends_run=False)
            elif console.fmt != "json":
                assert planned.plan is not None
                console.show_plan(planned.plan)
            done.append(planned)
        return done

    from reconciler.render.json import error_record

    lines, failed, changed = [], False, False
    denied = False
    documents: dict[str, Any] = {}
    for planned in asyncio.run(plan_all()):
        env = str(planned.request.env)
        if planned.plan is None:
            assert planned.error is not None  # an environment not planned says why
            lines.append(f"{env}: failed: {planned.error}")
            documents[env] = {"error": error_record(planned.error)}
            failed = True
            continue
        changed = changed or planned.plan.has_changes
        denied = denied or bool(planned.plan.denied)  # a policy deny rule: exit 3
        lines.append(f"{env}: {_denied_by(planned.plan)}{summary_line(planned.plan)}")
        documents[env] = planned.plan.to_json()
    if console.fmt == "json":
        import json

        from reconciler.model.values import inert_json

        click.echo(inert_json(json.dumps({"environments": documents}, indent=2)))
        console.wrote_document()
    else:
        from reconciler.model.values import printable

        console.heading("All environments")
        for line in lines:
            click.echo(printable(line))
    if failed:  # an unplanned environment may hold anything: 1 wins over a deny's 3
        return ExitStatus.ERROR
    if denied:
        return ExitStatus.POLICY_DENY
    return changes_status(changed, detailed=detailed_exitcode)


def _denied_by(plan: Plan) -> str:
    """``denied by policy (RULES): `` for a plan a deny rule refuses (the recap of
    ``--all-envs`` names it, also when another environment's error makes the exit 1)."""
    rules = sorted({finding.rule for finding in plan.denied})
    return f"denied by policy ({', '.join(rules)}): " if rules else ""


def _project_read(env: str | None, project_file: Path | None) -> Path | None:
    """The project file a run with environment ``env`` read (its digest is saved)."""
    from reconciler.specs.project import find_project

    return (project_file or find_project()) if env else project_file


def _plan_and_save(
    console: TerminalConsole, request: PlanRequest, out: Path, project: Path | None
) -> Plan:
    """``plan --out FILE``: plan, show, and write the saved plan (docs/saved-plans.md)."""
    import asyncio

    from reconciler.execution import stages
    from reconciler.execution.saved_plans import spec_folder_holding
    from reconciler.specs.fingerprint import plan_root

    inside = spec_folder_holding(out, request)
    if inside is not None:
        said = f"--out {out} is inside the spec folder {inside}: write it elsewhere"
        raise click.UsageError(said)
    the_plan, saved = asyncio.run(
        stages.save_plan_for(request, console, root=plan_root(), project=project)
    )
    console.show_plan(the_plan)
    _write(out, saved.text())
    return the_plan


def _apply(ctx: click.Context, request: PlanRequest, out: Path) -> str:
    """The apply of the plan saved in ``out``, as a person types it: what the apply must
    give as the plan was made (docs/saved-plans.md: its environment, the project file
    named, the owner given, ``--prune``, ``--take-over``), and the connection flags this
    plan was given, by name only (never a value: it may be a secret). A flag given by its
    variable (``RECONCILE_OWNER``, ``RECONCILE_PROJECT``, ``NATS_URL``, ...) is named as
    one typed: the command also applies the plan in a shell without that variable."""
    import shlex

    from click.core import ParameterSource

    from reconciler.cli.options import CONNECTION_PARAMS, ENVIRONMENT_PARAMS

    def typed(name: str) -> bool:
        source = ctx.get_parameter_source(name)
        if source == ParameterSource.ENVIRONMENT:  # an environment's own connection wins
            return request.env is None or name not in ENVIRONMENT_PARAMS
        return source == ParameterSource.COMMANDLINE

    words = ["reconcile", "apply", str(out)]
    if request.env is not None:
        words += ["--env", request.env]
    project = ctx.params.get("project_file")
    if project is not None and typed("project_file"):
        words += ["--project", str(project)]
    if typed("owner"):
        words += ["--owner", request.owner]
    words += ["--prune"] * request.prune + ["--take-over"] * request.take_over
    command = shlex.join(words)
    given = ["--" + name.replace("_", "-") for name in CONNECTION_PARAMS if typed(name)]
    return command + (f" (with this plan's {', '.join(given)})" if given else "")


def _write(out: Path, text: str) -> None:
    """The saved plan written whole (:func:`reconciler.cli.output.write_whole`); the plan
    is shown on standard output already, so a device there is refused."""
    from reconciler.cli.output import write_whole

    write_whole(out, lambda file: file.write(text), what="--out (the plan is on standard output)")


def _check_policy(the_plan: Plan) -> None:
    """A plan a policy deny rule does not hold for: PolicyDenied (exit 3), after the
    plan and its findings were shown (docs/policy.md)."""
    from reconciler.planning.policy import check_policy

    check_policy(the_plan.policy, applying=False)


def _plan_and_show(console: TerminalConsole, request: PlanRequest) -> Plan:
    """Validate, plan (reads only) and show the plan: `plan` and `apply --dry-run`."""
    import asyncio

    from reconciler.execution import stages

    the_plan = asyncio.run(stages.plan_for(request, console))
    console.show_plan(the_plan)
    return the_plan


@click.command()
@paths_argument
@click.option("--dry-run", is_flag=True, help="Plan only; the same as `reconcile plan`.")
@click.option(
    "--prune",
    is_flag=True,
    help="Delete managed resources no spec declares (this --owner's only).",
)
@migrate_option
@migration_option
@owner_option
@take_over_option
@strict_option
@policy_option
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
@lock_options("Apply")
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
    policies: tuple[Path, ...],
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
    """Change the server to match the specs (validates everything first).

    Given a saved plan (`reconcile plan --out FILE`) instead of PATHS, apply exactly its
    steps: refused, with nothing changed, when the files, the server or the plan made
    again differ from the saved ones (docs/saved-plans.md)."""
    import asyncio

    # The spec files parsed in a child while the engine is imported (specs.ahead).
    ahead = parse_ahead(paths)
    try:
        from reconciler.errors import ApplyFailed
        from reconciler.execution import stages
        from reconciler.execution.stages import ApplyRequest, PlanRequest

        saved = _saved_plan_in(paths)  # `apply FILE`: a saved plan, by its marker
        if saved is not None and ahead is not None:
            ahead.close()  # a saved plan's files are read once, to digest them: not ahead
            ahead = None
        target = (
            _saved_target(ctx, saved, conn, project_file, env_name, owner)
            if saved is not None
            else resolve_target(
                ctx,
                paths=paths,
                conn=conn,
                owner=owner,
                project_file=project_file,
                env_name=env_name,
            )
        )
        console = _console(fmt, full=full, json_lines=True)
        flags = {"--allow-replace": allow_replace, "--allow-data-loss": allow_data_loss}
        console.allowed = tuple(flag for flag, given in flags.items() if given)
        console.asks = asks_for_yes(console, auto_approve) and fmt == "text" and saved is None
        wanted = PlanRequest.for_target(
            target,
            take_over=take_over,
            prune=prune,
            migrate=migrate,
            migration=migration,
            strict=strict,
            policies=policies,
            ahead=ahead,
        )
        if saved is not None:  # its flags and paths; the connection is this run's
            consent = (policies, take_over, prune)  # what the applier requires and allows
            saved, wanted = _saved_request(ctx, console, saved, target, project_file, consent)
        request = ApplyRequest(
            plan=wanted,
            allow_replace=allow_replace,
            allow_data_loss=allow_data_loss,
            concurrency=concurrency,
            approved=auto_approve or saved is not None,  # the saved plan was the review
            dry_run=dry_run,
            lock_timeout=None if no_lock else lock_timeout,
            expected=saved,
        )

        async def go() -> Any:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGINT, stop.set)
            loop.add_signal_handler(signal.SIGTERM, stop.set)
            with console.steps():
                return await stages.apply_for(request, console, stop=stop)

        if dry_run and saved is None:
            the_plan = _plan_and_show(console, wanted)
            _check_policy(the_plan)
            return changes_status(the_plan.has_changes, detailed=detailed_exitcode)
        try:
            result = asyncio.run(go())
        except ApplyFailed as err:
            console.show_failed_apply(err.report)  # JSON Lines end with the result
            raise
        console.show_result(result)
        if result.cancelled and result.interrupted:  # Ctrl-C at the question
            console.notice("interrupted: nothing was changed")
            return ExitStatus.INTERRUPTED
        if result.cancelled:
            return ExitStatus.ERROR
        if result.interrupted:
            skipped = len(result.skipped)
            console.notice(
                f"interrupted: {skipped} step(s) not started; re-run apply to converge"
                if skipped
                else "interrupted, but every step had started and has ended as shown above: "
                "none is left to apply"
            )
            return ExitStatus.INTERRUPTED
        return ExitStatus.OK

    finally:
        if ahead is not None:
            ahead.close()


# --- apply FILE: a saved plan -----------------------------------------------------------

#: How ``apply FILE`` names the flags the saved-plan rules talk about.
SPELLED = {"env": "--env", "strict": "--strict", "migrate": "--migrate", "migration": "--migration"}


def _saved_plan_in(paths: tuple[Path, ...]) -> SavedPlan | None:
    """The saved plan ``apply FILE`` names (recognised by its marker, whatever the file
    is called); None when ``paths`` are spec paths."""
    from reconciler.errors import ReconcileError
    from reconciler.execution.saved_plans import read_saved
    from reconciler.planning.saved import FORMAT

    found = []
    for path in paths:
        try:
            if path.is_file():
                with path.open("rb") as file:
                    head = file.read(4096)
                if FORMAT.encode() in head:
                    found.append(path)
                elif _printed_plan(head):
                    raise ReconcileError(
                        f"{path}: the output of plan --format json, not a saved plan (which "
                        f"apply reads): save one with reconcile plan ... --out FILE, then "
                        f"reconcile apply FILE; nothing was changed"
                    )
        except OSError as err:
            raise ReconcileError(f"cannot read {path}: {err.strerror or err}") from None
    if not found:
        return None
    if len(paths) > 1:
        raise click.UsageError(f"{found[0]} is a saved plan: apply it alone, without PATHS")
    return read_saved(found[0])


def _printed_plan(head: bytes) -> bool:
    """Whether a file's first bytes are a plan's JSON (``plan --format json > FILE``, the
    plan schema's first keys), which a user may take for a saved plan."""
    start = head.lstrip()
    return start.startswith(b"{") and all(
        key in start for key in (b'"format_version"', b'"server"', b'"summary"')
    )


def _saved_target(
    ctx: click.Context,
    saved: SavedPlan,
    conn: dict[str, Any],
    project_file: Path | None,
    env_name: str | None,
    owner: str,
) -> Target:
    """Where a saved plan is applied: the connection and owner of this command line (or
    of the environment it names with --env, which must be the plan's; a plan of PATHS
    with --project: the project's owner, ignore rules and policies, as ``plan --project
    FILE PATHS`` read them), never the file's (the rules:
    :func:`reconciler.execution.saved_plans.refuse_given`)."""
    from reconciler.cli.options import project_owner, to_connection_options
    from reconciler.execution.saved_plans import refuse_given
    from reconciler.execution.stages import Target, paths_target
    from reconciler.specs.project import load_project

    refuse_given(saved, env=env_name, given=_given(ctx), spelled=SPELLED)
    if saved.request.env is None and project_file is not None:
        project = load_project(project_file)
        owner = project_owner(ctx, project, owner)
        return paths_target(project, (), to_connection_options(conn), owner)
    if saved.request.env is None:
        return Target((), to_connection_options(conn), owner)
    return resolve_target(
        ctx,
        paths=(),
        conn=conn,
        owner=owner,
        project_file=project_file,
        env_name=env_name,
        needs_paths=False,
    )


def _given(ctx: click.Context) -> tuple[str, ...]:
    """The flags a saved plan decides that this command line gives (each refused)."""
    from click.core import ParameterSource

    from reconciler.execution.saved_plans import PLAN_DECIDES

    typed = ParameterSource.COMMANDLINE
    return tuple(n for n in PLAN_DECIDES if ctx.get_parameter_source(n) == typed)


def _saved_request(
    ctx: click.Context,
    console: TerminalConsole,
    saved: SavedPlan,
    target: Target,
    project_file: Path | None,
    consent: tuple[tuple[Path, ...], bool, bool],
) -> tuple[SavedPlan, PlanRequest]:
    """The saved plan resolved in this repository, and the request it names (``consent``:
    the --policy files it must have been made with, --take-over and --prune given), by
    the rules the Action's plan-file follows too (:func:`saved_plans.resolve`)."""
    from reconciler.execution.saved_plans import Applying, resolve
    from reconciler.specs.fingerprint import plan_root

    policies, take_over, prune = consent
    applying = Applying(
        target=target,
        take_over=take_over,
        prune=prune,
        policies=tuple(policies),
        given=_given(ctx),
        spelled=SPELLED,
    )
    project = _project_read(target.env, project_file)
    return resolve(saved, applying, root=plan_root(), project=project, notice=console.notice)
