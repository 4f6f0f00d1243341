"""The Console of the ``reconcile`` CLI: results on stdout, everything else on stderr.

On a terminal (stderr is a TTY and ``CI`` is unset) plans are coloured and an apply shows
a progress bar; elsewhere each finished step is one plain line, fit for CI logs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

import click

from reconciler.console import Console, StepSink, error_lines, result_line

if TYPE_CHECKING:
    from reconciler.errors import ReconcileError
    from reconciler.execution.apply import ApplyResult, StepEvent
    from reconciler.planning.drift import DriftReport
    from reconciler.planning.steps import Plan

PlanFormat = Literal["text", "json", "markdown"]
DriftFormat = Literal["text", "json", "markdown", "html"]


def interactive() -> bool:
    """A person at a terminal (colour, progress bars), not CI logs."""
    return sys.stderr.isatty() and not os.environ.get("CI")


class TerminalConsole(Console):
    """Text for people at a terminal, or for CI logs."""

    def __init__(
        self,
        *,
        fmt: PlanFormat = "text",
        drift_format: DriftFormat = "text",
        allowed: tuple[str, ...] = (),
    ) -> None:
        self.fmt = fmt
        self.drift_format = drift_format
        self.interactive = interactive()
        self.allowed = allowed  # the --allow-* flags of this run

    def notice(self, message: str) -> None:
        click.echo(message, err=True)

    def show_plan(self, plan: Plan) -> None:
        from reconciler.render import render_plan

        color = self.fmt == "text" and self.interactive
        click.echo(render_plan(plan, self.fmt, color=color, allowed=self.allowed))

    def show_drift(self, report: DriftReport) -> None:
        click.echo(self.drift_text(report), nl=False)

    def drift_text(self, report: DriftReport) -> str:
        if self.drift_format == "json":
            import json

            return json.dumps(report.to_json(), indent=2) + "\n"
        if self.drift_format == "markdown":
            from reconciler.render.drift_markdown import render_drift_markdown

            return render_drift_markdown(report)
        if self.drift_format == "html":
            from reconciler.render.drift_html import render_drift_html

            return render_drift_html(report)
        from reconciler.render.drift_text import render_drift_text

        return render_drift_text(report)

    def show_error(self, err: ReconcileError) -> None:
        for line in error_lines(err):
            click.echo(line, err=True)

    def show_result(self, result: ApplyResult) -> None:
        if self.fmt == "text":
            click.echo(result_line([result]))

    @contextmanager
    def steps(self) -> Iterator[StepSink]:
        if self.fmt != "text" or not self.interactive:
            with super().steps() as sink:
                yield sink
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(
            TextColumn("[bold]applying"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            transient=True,
        ) as bar:
            task = bar.add_task("", total=None)

            def advance(event: StepEvent) -> None:
                label = f"{event.step.action} {event.step.label}"
                bar.update(task, total=event.total, completed=event.done, description=label)
                if event.error:
                    bar.console.print(f"[red]failed[/] {label}: {event.error}")

            yield advance
