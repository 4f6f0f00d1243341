"""``reconcile drift``: where the server differs from the specs (exit 0 in sync, 2 drift)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reconciler.cli.options import connection_options, to_connection_options
from reconciler.cli.output import notice

if TYPE_CHECKING:
    from reconciler.planning.drift import DriftReport

FORMATS = click.Choice(["text", "json", "markdown", "html"])


def render_drift(report: DriftReport, fmt: str) -> str:
    """The report in one of the four formats."""
    if fmt == "json":
        return json.dumps(report.to_json(), indent=2, sort_keys=False) + "\n"
    if fmt == "markdown":
        from reconciler.render.drift_markdown import render_drift_markdown

        return render_drift_markdown(report)
    if fmt == "html":
        from reconciler.render.drift_html import render_drift_html

        return render_drift_html(report)
    from reconciler.render.drift_text import render_drift_text

    return render_drift_text(report)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the report to FILE instead of standard output.",
)
@connection_options
def drift(paths: tuple[Path, ...], fmt: str, out: Path | None, **conn: Any) -> int:
    """Report where the server differs from the specs.

    Exit status: 0 when everything is in sync, 2 when drift is found, 1 on error.
    """
    from reconciler.execution import run
    from reconciler.planning import drift as drift_report
    from reconciler.render.drift_text import headline

    options = to_connection_options(conn)
    plan = asyncio.run(run.plan(paths, options, prune=False, on_notice=notice))
    report = drift_report.from_plan(plan)
    text = render_drift(report, fmt)
    if out is None:
        click.echo(text, nl=False)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        notice(f"{headline(report)} Report written to {out}.")
    return 2 if report.has_drift else 0
