"""Where the CLI's words go: notices and progress on stderr, results on stdout."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from reconciler.execution.apply import StepEvent


def notice(message: str) -> None:
    click.echo(message, err=True)


def interactive() -> bool:
    """A person at a terminal (colour, progress bars), not CI logs."""
    return sys.stderr.isatty() and not os.environ.get("CI")


@contextmanager
def progress(*, enabled: bool) -> Iterator[Callable[[StepEvent], None]]:
    """A progress bar on a terminal; one plain line per step otherwise."""
    from reconciler.execution.apply import describe

    if not enabled:

        def line(event: StepEvent) -> None:
            suffix = f": {event.error}" if event.error else ""
            notice(f"[{event.done}/{event.total}] {event.outcome} {describe(event.step)}{suffix}")

        yield line
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
            bar.update(
                task, total=event.total, completed=event.done, description=describe(event.step)
            )
            if event.error:
                bar.console.print(f"[red]failed[/] {describe(event.step)}: {event.error}")

        yield advance
