"""``reconcile drift``: where the server differs from the specs (exit 0 in sync, 2 drift)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import click

from reconciler.cli.options import (
    connection_options,
    format_option,
    owner_option,
    project_options,
    resolve_target,
)
from reconciler.console.terminal import DriftFormat, TerminalConsole

FORMAT_NAMES = ["text", "json", "markdown", "html"]


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@format_option(FORMAT_NAMES, "report")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the report to FILE instead of standard output.",
)
@owner_option
@project_options
@connection_options
@click.pass_context
def drift(
    ctx: click.Context,
    /,
    paths: tuple[Path, ...],
    fmt: str,
    out: Path | None,
    owner: str,
    project_file: Path | None,
    env_name: str | None,
    **conn: Any,
) -> int:
    """Report where the server differs from the specs.

    Exit status: 0 when everything is in sync, 2 when drift is found, 1 on error.
    """
    from reconciler.execution import run
    from reconciler.execution.requests import PlanRequest
    from reconciler.planning import drift as drift_report
    from reconciler.render.drift_text import headline

    target = resolve_target(
        ctx, paths=paths, conn=conn, owner=owner, project_file=project_file, env_name=env_name
    )
    console = TerminalConsole(drift_format=cast(DriftFormat, fmt))
    plan = asyncio.run(run.plan_for(PlanRequest.for_target(target), console))
    report = drift_report.from_plan(plan)
    if out is None:
        console.show_drift(report)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(console.drift_text(report), encoding="utf-8")
        console.notice(f"{headline(report)} Report written to {out}.")
    return 2 if report.has_drift else 0
