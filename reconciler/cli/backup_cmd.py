"""The backup commands: ``backup PATH --out DIR``, ``backup verify DIR``, ``restore DIR``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reconciler.cli.options import (
    connection_options,
    lock_options,
    policy_option,
    project_options,
    resolve_target,
    to_connection_options,
)
from reconciler.console.terminal import TerminalConsole
from reconciler.errors import ExitStatus

if TYPE_CHECKING:
    from reconciler.backup.restore import RestorePlan, RestoreResult
    from reconciler.execution.stages import Target


def _size(size: int) -> str:
    from reconciler.specs.units import approx_size

    return approx_size(size)


class _AsTyped(click.Context):
    """``take`` run as ``reconcile backup PATH --out DIR`` (no name given: it is
    hidden) is named as typed in its usage errors, never ``reconcile backup take``."""

    @property
    def command_path(self) -> str:
        if self.info_name is None and self.parent is not None:
            return self.parent.command_path
        return super().command_path


class _Take(click.Command):
    context_class = _AsTyped


class _BackupGroup(click.Group):
    """``backup verify DIR`` is a sub-command; anything else is ``backup PATH --out DIR``
    (``take``, run without a name of its own: :class:`_AsTyped`)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] in self.commands:
            return super().resolve_command(ctx, args)
        return None, self.commands["take"], args

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[PATHS]... --out DIR [OPTIONS]")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The options of a backup (``take``'s: it is what ``backup`` runs), then the
        sub-commands."""
        params = self.commands["take"].get_params(ctx)
        options = [p for p in params if isinstance(p, click.Option)]
        rows = [row for p in options if (row := p.get_help_record(ctx)) is not None]
        with formatter.section("Options"):
            formatter.write_dl(rows)
        self.format_commands(ctx, formatter)


@click.group(
    cls=_BackupGroup,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
def backup() -> None:
    """Take data snapshots of streams (consumers included) into a folder.

    \b
    reconcile backup PATH --out DIR     the streams the specs declare
    reconcile backup --all --out DIR    every stream on the server
    reconcile backup verify DIR         check digests and completeness (no server)

    The folder follows the nats CLI's layout (DIR/<stream>/backup.json beside
    stream.tar.s2) plus DIR/specs.d/ and DIR/manifest.json, written last. A backup
    replaces only what an earlier backup in the folder wrote. It holds every message,
    KeyValue values included: protect it like the server (docs/backup.md).
    """


@backup.command("take", cls=_Take, hidden=True)
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The backup folder: new, empty, or an earlier backup (only its files are replaced).",
)
@click.option("--all", "everything", is_flag=True, help="Every stream on the server.")
@click.option("--stream", "only", multiple=True, help="Only this stream (repeatable).")
@click.option(
    "--parallel",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Snapshots taken at once (the server holds each stream's config while it runs).",
)
@lock_options("Back up memory streams")
@project_options
@connection_options
@click.pass_context
def take(
    ctx: click.Context,
    /,
    paths: tuple[Path, ...],
    out: Path,
    everything: bool,
    only: tuple[str, ...],
    parallel: int,
    lock_timeout: float,
    no_lock: bool,
    project_file: Path | None,
    env_name: str | None,
    **conn: Any,
) -> int:
    """Back up streams into --out. A memory stream is copied through a temporary file
    mirror, made and deleted under the server's apply lock."""
    from reconciler.backup.take import Selection, declared_streams, specs_commit, take_backup

    console = TerminalConsole()
    observed_at = ""  # where the environment says mode: observe (never written)
    if everything or (only and not paths and env_name is None):
        target_paths: tuple[Path, ...] = ()
        options = to_connection_options(conn)
        if env_name is not None or project_file is not None:
            target = resolve_target(
                ctx, paths=paths, conn=conn, project_file=project_file, env_name=env_name
            )
            options, target_paths = target.options, tuple(Path(p) for p in target.paths)
            observed_at = target.lifecycle.observed_at if target.lifecycle.observe else ""
        selection = Selection(everything=True, only=only)
    else:
        target = resolve_target(
            ctx,
            paths=paths,
            conn=conn,
            project_file=project_file,
            env_name=env_name,
            without_paths="give spec PATHS, or --all for every stream on the server "
            "(or run where a reconcile.yaml is)",
        )
        options, target_paths = target.options, tuple(Path(p) for p in target.paths)
        observed_at = target.lifecycle.observed_at if target.lifecycle.observe else ""
        declared = declared_streams(target_paths, tuple(Path(p) for p in target.overlays))
        selection = Selection(declared=declared, only=only)
    console.notice(
        "while a stream's snapshot runs, the server holds its configuration and message "
        f"expiry as they were (docs/backup.md); at most {parallel} snapshots at once "
        "(--parallel)"
    )
    try:
        with console.transfers():
            result = asyncio.run(
                take_backup(
                    options,
                    out,
                    selection,
                    commit=specs_commit(target_paths),
                    parallel=parallel,
                    observer=console,
                    lock_timeout=None if no_lock else lock_timeout,
                    observed_at=observed_at,
                )
            )
    except KeyboardInterrupt:  # Ctrl-C: the snapshots in flight were cancelled, cleaned up
        if not out.exists():  # before anything was written: the folder it made is gone
            console.notice(f"interrupted before the backup wrote anything: {out} was not made")
            return ExitStatus.INTERRUPTED
        console.notice(
            f"interrupted: the backup in {out} is unfinished (no manifest.json; "
            "`reconcile backup verify` refuses it): run the backup again"
        )
        return ExitStatus.INTERRUPTED
    count = len(result.manifest.streams)
    click.echo(
        f"Backup complete: {count} stream(s), {_size(result.size)} in {result.seconds:.2f} s, "
        f"written to {out}"
    )
    return 0


@backup.command("verify")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--stream", "only", multiple=True, help="Only this stream (repeatable).")
def verify(folder: Path, only: tuple[str, ...]) -> int:
    """Check digests and completeness; no server.

    Every file's size and SHA-256 against manifest.json, the manifest's own completeness,
    and each snapshot's S2 framing (a truncated file is caught)."""
    from reconciler.backup.layout import BackupError
    from reconciler.backup.restore import check_folder

    contents, selected = check_folder(folder, only)
    if contents.manifest is None:
        raise BackupError(
            f"{folder}: no manifest.json (a nats CLI backup, or an interrupted one): the "
            "snapshots' framing is whole, but there are no digests to check"
        )
    from reconciler.backup.specs import spec_problems
    from reconciler.model.values import printable

    if problems := spec_problems(contents):
        raise BackupError(
            "the backup's spec files are not the manifest's:\n"
            + "\n".join(f"    {p}" for p in problems)
        )
    size = sum(f.size for s in selected for f in s.files.values())
    specs = len(contents.manifest.specs)
    click.echo(
        f"Backup verified: {len(selected)} stream(s), {specs} spec file(s), {_size(size)}, "
        "every digest matches."
    )
    for name, why in contents.manifest.skipped:
        click.echo(printable(f"Not in this backup: {name} ({why})"))
    return 0


#: A stream holding the backup's messages, fenced by a failover: not restored, not over.
_FENCED = (
    "holds the backup's messages but is fenced by a failover (its subjects moved aside): "
    "left as it is, the failover rules own it (docs/dr.md)"
)


def _plan_text(plan: RestorePlan) -> str:
    from reconciler.model.values import printable

    marks = {"restore": "+", "replace": "-/+", "restored": "=", "resume": "~"}
    said = {
        "restored": "already restored",
        "resume": "left part-restored by an interrupted restore: deleted and restored again",
    }
    lines = [printable(f"Restore plan for {plan.contents.root}:")]
    manifest = plan.contents.manifest
    if manifest is not None:
        server = manifest.server
        lines.append(
            printable(
                f"  backup of {server.get('name', 'a server')} (nats-server "
                f"{server.get('version', '?')}) taken {manifest.created}"
            )
        )
    for step in plan.steps:
        state, record = step.record.state, step.record
        what = _FENCED if step.fenced else said.get(step.action, step.action)
        lines.append(
            printable(
                f"  {marks[step.action]} {record.name}: {what}, "
                f"{state.get('messages', '?')} messages, {_size(int(state.get('bytes') or 0))}, "
                f"{record.consumer_count} consumer(s), "
                f"snapshot {_size(step.size)}"
            )
        )
    for finding in plan.plan.policy:  # the policy rules' findings, as apply shows them
        lines.append(printable(f"  policy {finding.line}"))
    counts = {a: sum(s.action == a and not s.fenced for s in plan.steps) for a in marks}
    fenced = sum(s.fenced for s in plan.steps)
    lines.append(
        f"Plan: {counts['restore']} to restore, {counts['replace']} to replace, "
        f"{counts['restored']} already restored"
        + (f", {fenced} fenced by a failover, left as they are" if fenced else "")
        + (f", {counts['resume']} to finish (interrupted before)." if counts["resume"] else ".")
    )
    return "\n".join(lines)


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--stream", "only", multiple=True, help="Only this stream (repeatable).")
@click.option(
    "--replace-existing",
    is_flag=True,
    help="Delete and restore a stream of the same name that differs from the backup "
    "(destructive: needs --allow-replace or --allow-data-loss too).",
)
@click.option("--allow-replace", is_flag=True, help="Allow replacing existing streams.")
@click.option("--allow-data-loss", is_flag=True, help="Allow every step that destroys data.")
@click.option(
    "--parallel",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Streams restored at once (more than one crashed nats-server 2.15.1: docs/backup.md).",
)
@policy_option
@lock_options("Restore")
@click.option(
    "--yes",
    "-y",
    "auto_approve",
    is_flag=True,
    help="Restore without asking (as apply: needed without a terminal, but for the "
    "embedded server).",
)
@project_options
@connection_options
@click.pass_context
def restore(
    ctx: click.Context,
    /,
    folder: Path,
    only: tuple[str, ...],
    replace_existing: bool,
    allow_replace: bool,
    allow_data_loss: bool,
    parallel: int,
    policies: tuple[Path, ...],
    lock_timeout: float,
    no_lock: bool,
    auto_approve: bool,
    project_file: Path | None,
    env_name: str | None,
    **conn: Any,
) -> int:
    """Restore a backup folder (ours or the nats CLI's): plan, ask, restore, verify.

    Under the server's apply lock, with apply's rules: the policies (the project's with
    --env, then --policy; a deny exits 3) and lifecycle prevent_destroy (the
    environment's, and what the server records) refuse before anything changes."""
    from reconciler.backup.restore import Flags
    from reconciler.backup.restore import restore as run_restore
    from reconciler.cli.plan_cmd import asks_for_yes
    from reconciler.execution.stages import PlanRequest

    console = TerminalConsole()
    console.asks = asks_for_yes(console, auto_approve)
    target = _restore_target(ctx, conn, project_file, env_name)
    flags = Flags(
        replace_existing,
        allow_replace,
        allow_data_loss,
        only,
        lifecycle=target.lifecycle,
        policies=(*target.policies, *policies),
        environment=target.env,
        lock_timeout=None if no_lock else lock_timeout,
        # an environment's specs judge what may be restored into it (its standbys)
        declared=PlanRequest.for_target(target) if target.env is not None else None,
    )

    shown: list[RestorePlan] = []

    def show(plan: RestorePlan) -> None:
        shown.append(plan)
        click.echo(_plan_text(plan))

    try:
        with console.transfers():
            result = asyncio.run(
                run_restore(
                    target.options,
                    folder,
                    flags,
                    parallel=parallel,
                    observer=console,
                    approved=auto_approve,
                    on_plan=show,
                )
            )
    except KeyboardInterrupt:
        if shown:
            raise  # during the question or the restore: said as before ("aborted")
        # Ctrl-C while waiting for the apply lock, or while the server was read
        console.notice("interrupted before the restore plan was made: nothing was changed")
        return ExitStatus.INTERRUPTED
    return _outcome(result)


def _restore_target(
    ctx: click.Context, conn: dict[str, Any], project_file: Path | None, env_name: str | None
) -> Target:
    """The connection flags, or with --env (or --project) the environment's server,
    lifecycle, policies and specs (read for the streams they declare a standby there)."""
    from reconciler.cli.options import _unread_policies
    from reconciler.execution.stages import Target

    if env_name is None and project_file is None:
        _unread_policies(ctx)  # the project file's policies are not read: said, as apply does
        return Target((), to_connection_options(conn), "default")
    return resolve_target(
        ctx, paths=(), conn=conn, project_file=project_file, env_name=env_name, needs_paths=False
    )


def _outcome(result: RestoreResult) -> int:
    """The last line, counting every stream (exit 1 on any difference or failure)."""
    from reconciler.errors import ReconcileError

    if result.cancelled:
        return 1
    done = sum(s.action == "restored" and not s.fenced for s in result.plan.steps)
    fenced = sum(s.fenced for s in result.plan.steps)
    already = (f"; {done} already restored" if done else "") + (
        f"; {fenced} fenced by a failover, left as they are" if fenced else ""
    )
    if result.problems or result.not_started:
        lines = "\n".join(f"    {p}" for p in result.problems)
        left = f", {len(result.not_started)} not started" if result.not_started else ""
        raise ReconcileError(
            f"restore incomplete: {len(result.attempted)} stream(s) restored, "
            f"{len(result.restored)} of them verified{left}{already}; run restore again "
            f"after fixing:\n{lines}"
        )
    if not result.attempted:
        parts = (
            [f"{done} stream(s) already restored, as the backup holds"]
            if done or not fenced
            else []
        )
        parts += [f"{fenced} fenced by a failover, left as they are"] if fenced else []
        click.echo(f"Nothing to restore: {'; '.join(parts)}.")
        return 0
    click.echo(
        f"Restore complete: {len(result.restored)} stream(s) restored and verified"
        f"{already} in {result.seconds:.2f} s."
    )
    return 0
