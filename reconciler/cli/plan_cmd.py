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
    owner_option,
    strict_option,
    take_over_option,
    to_connection_options,
)
from reconciler.console.terminal import TerminalConsole

if TYPE_CHECKING:
    from reconciler.console.terminal import PlanFormat
    from reconciler.planning.plan import Ownership
    from reconciler.planning.steps import Plan

FORMAT_NAMES = ["text", "json", "markdown"]
paths_argument = click.argument(
    "paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path)
)


def _console(fmt: str) -> TerminalConsole:
    formats: dict[str, PlanFormat] = {"text": "text", "json": "json", "markdown": "markdown"}
    return TerminalConsole(fmt=formats[fmt])


@click.command()
@paths_argument
@click.option("--prune", is_flag=True, help="Plan deletes of managed resources no spec declares.")
@owner_option
@take_over_option
@strict_option
@format_option(FORMAT_NAMES, "plan")
@click.option(
    "--detailed-exitcode", is_flag=True, help="Exit 2 when the plan has changes (0 when none)."
)
@connection_options
def plan(
    paths: tuple[Path, ...],
    prune: bool,
    owner: str,
    take_over: bool,
    strict: bool,
    fmt: str,
    detailed_exitcode: bool,
    **conn: Any,
) -> int:
    """Show what apply would change; changes nothing."""
    from reconciler.planning.plan import Ownership

    console = _console(fmt)
    the_plan = _plan_and_show(
        console, paths, conn, prune=prune, ownership=Ownership(owner, take_over), strict=strict
    )
    return 2 if detailed_exitcode and the_plan.has_changes else 0


def _plan_and_show(
    console: TerminalConsole,
    paths: tuple[Path, ...],
    conn: dict[str, Any],
    *,
    prune: bool,
    ownership: Ownership,
    strict: bool,
) -> Plan:
    """Validate, plan (reads only) and show the plan: `plan` and `apply --dry-run`."""
    from reconciler.execution import run

    options = to_connection_options(conn)
    the_plan = asyncio.run(
        run.plan(
            paths,
            options,
            prune=prune,
            ownership=ownership,
            strict=strict,
            on_notice=console.notice,
        )
    )
    console.show_plan(the_plan)
    return the_plan


@click.command()
@paths_argument
@click.option("--dry-run", is_flag=True, help="Plan only; the same as `reconcile plan`.")
@click.option("--prune", is_flag=True, help="Delete managed resources no spec declares.")
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
    "--auto-approve",
    "-y",
    is_flag=True,
    help="Apply without asking. On a terminal apply shows the plan and asks for 'yes'; "
    "without a terminal (CI) it never asks.",
)
@connection_options
def apply(
    paths: tuple[Path, ...],
    dry_run: bool,
    prune: bool,
    owner: str,
    take_over: bool,
    strict: bool,
    allow_replace: bool,
    allow_data_loss: bool,
    fmt: str,
    detailed_exitcode: bool,
    concurrency: int,
    lock_timeout: float,
    no_lock: bool,
    auto_approve: bool,
    **conn: Any,
) -> int:
    """Change the server to match the specs (validates everything first)."""
    from reconciler.execution import run
    from reconciler.planning.plan import Ownership

    options = to_connection_options(conn)
    console = _console(fmt)
    flags = {"--allow-replace": allow_replace, "--allow-data-loss": allow_data_loss}
    console.allowed = tuple(flag for flag, given in flags.items() if given)
    ownership = Ownership(owner, take_over)
    asks = console.interactive and sys.stdin.isatty() and fmt == "text"

    async def go() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        with console.steps() as on_step:
            return await run.apply(
                paths,
                options,
                prune=prune,
                ownership=ownership,
                strict=strict,
                allow_replace=allow_replace,
                allow_data_loss=allow_data_loss,
                dry_run=False,
                concurrency=concurrency,
                on_notice=console.notice,
                on_step=on_step if fmt == "text" else None,
                on_plan=console.show_plan,
                confirm=None if auto_approve or not asks else console.confirm,
                stop=stop,
                lock_timeout=None if no_lock else lock_timeout,
            )

    if dry_run:
        the_plan = _plan_and_show(
            console, paths, conn, prune=prune, ownership=ownership, strict=strict
        )
        return 2 if detailed_exitcode and the_plan.has_changes else 0
    result = asyncio.run(go())
    console.show_result(result)
    if result.cancelled:
        return 1
    if result.interrupted:
        skipped = len(result.skipped)
        console.notice(f"interrupted: {skipped} step(s) not started; re-run apply to converge")
        return 130
    return 0
