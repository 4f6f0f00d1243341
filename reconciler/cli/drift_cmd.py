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
    to_connection_options,
)
from reconciler.console.terminal import DriftFormat, TerminalConsole

FORMAT_NAMES = ["text", "json", "markdown", "html"]


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@format_option(FORMAT_NAMES, "report")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the report to FILE instead of standard output.",
)
@owner_option
@connection_options
def drift(paths: tuple[Path, ...], fmt: str, out: Path | None, owner: str, **conn: Any) -> int:
    """Report where the server differs from the specs.

    Exit status: 0 when everything is in sync, 2 when drift is found, 1 on error.
    """
    from reconciler.execution import run
    from reconciler.planning import drift as drift_report
    from reconciler.planning.plan import Ownership
    from reconciler.render.drift_text import headline

    options = to_connection_options(conn)
    console = TerminalConsole(drift_format=cast(DriftFormat, fmt))
    ownership = Ownership(owner)
    plan = asyncio.run(
        run.plan(paths, options, prune=False, ownership=ownership, on_notice=console.notice)
    )
    report = drift_report.from_plan(plan)
    if out is None:
        console.show_drift(report)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(console.drift_text(report), encoding="utf-8")
        console.notice(f"{headline(report)} Report written to {out}.")
    return 2 if report.has_drift else 0
