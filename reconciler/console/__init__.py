"""Where people see a run: one :class:`Console` interface, two places it can be shown.

Front doors report plans, drift reports, step events, errors and the result of an apply
through a Console and never format those themselves:

- :class:`~reconciler.console.terminal.TerminalConsole` (the ``reconcile`` CLI): text on
  stdout, notices and progress on stderr, colour and a progress bar on a terminal;
- :class:`~reconciler.console.markdown.MarkdownConsole` (the GitHub Action): plain log
  lines for the job log and GitHub-flavoured Markdown collected for the step summary and
  the pull-request comment.

The words they share (an error's lines, a step's line, an apply's summary) are made here,
once.
"""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from reconciler.errors import ApplyFailed, ReconcileError, SpecError, UnsupportedField
from reconciler.execution.requests import Observer

if TYPE_CHECKING:
    from reconciler.execution.apply import ApplyResult, StepEvent
    from reconciler.planning.drift import DriftReport
    from reconciler.planning.steps import Plan, Step

__all__ = ["Console", "error_lines", "result_line", "shown", "step_line"]

StepSink = Callable[["StepEvent"], None]


def error_lines(err: ReconcileError) -> list[str]:
    """The lines of an error: one per problem, ``FILE:LINE: field: message``; file
    names, names and values in them escaped (:func:`~reconciler.model.values.printable`;
    a message's own line breaks, before a quoted source line, are kept)."""
    return [shown(line) for line in _error_lines(err)]


def shown(text: str) -> str:
    """``text`` escaped but for the line breaks before an indented, quoted source line
    (``invalid YAML ...\\n    <the line>\\n    ^``): those lines are escaped apart, and
    a caret under a quoted line still points at the same character."""
    from reconciler.model.values import printable

    parts = re.split(r"\n(?=    )", text)
    out = [printable(part) for part in parts]
    for index in range(1, len(parts)):
        part, quoted = parts[index], parts[index - 1]
        if part.strip() == "^" and out[index - 1] != quoted:  # the quoted line grew
            out[index] = " " * len(printable(quoted[: part.index("^")])) + "^"
    return "\n".join(out)


def _error_lines(err: ReconcileError) -> list[str]:
    if isinstance(err, (SpecError, UnsupportedField)):
        return [str(p) for p in err.problems]
    if isinstance(err, ApplyFailed):
        report = err.report
        lines = [f"error: {err}"]
        lines += [f"  applied: {s}" for s in report.applied]
        lines += [f"  failed:  {s}" for s in report.failed]
        lines += [f"  skipped: {s}" for s in report.skipped]
        lines += [
            f"  removed again (created by this apply, still empty): {s}" for s in report.removed
        ]
        lines += [f"  kept (created by this apply): {s}" for s in report.kept]
        lines.append("re-run apply to converge")
        return lines
    return [f"error: {err.headline}", *(f"  {line}" for line in err.details)]


def step_line(event: StepEvent) -> str:
    """``[3/10] applied update Consumer ORDERS/NEW`` (and the error of a failed step),
    escaped (:func:`~reconciler.model.values.printable`)."""
    describe, printable = _line_words()
    suffix = f": {event.error}" if event.error else ""
    return printable(f"[{event.done}/{event.total}] {event.outcome} {describe(event.step)}{suffix}")


@functools.cache
def _line_words() -> tuple[Callable[[Step], str], Callable[[str], str]]:
    """What :func:`step_line` writes with, imported on its first line (not when a
    command that shows no step loads the console), then kept: two import statements
    on each of 21,000 lines were a third of the line's time."""
    from reconciler.execution.apply import describe
    from reconciler.model.values import printable

    return describe, printable


def result_line(results: Sequence[ApplyResult]) -> str:
    """One line for the end of an apply."""
    applied = sum(len(r.applied) for r in results)
    failed = sum(len(r.failed) for r in results)
    skipped = sum(len(r.skipped) for r in results)
    return f"Apply complete: {applied} applied, {failed} failed, {skipped} skipped."


class Console(Observer, ABC):
    """What a front door shows people; each method is one kind of event. A Console is
    the run's listener (:class:`~reconciler.execution.requests.Observer`, the one
    interface): the engine calls ``notice``, ``show_plan``, ``confirm`` (when it
    ``asks``) and ``step``; a front door adds drift reports and errors."""

    @abstractmethod
    def notice(self, message: str) -> None:
        """A side remark (which server, waiting for the lock, ...)."""

    @abstractmethod
    def show_plan(self, plan: Plan) -> None:
        """The plan, before anything changes."""

    @abstractmethod
    def show_drift(self, report: DriftReport) -> None:
        """A drift report."""

    @abstractmethod
    def show_error(self, err: ReconcileError) -> None:
        """An error the tool reports on purpose (never a traceback)."""

    @abstractmethod
    def show_result(self, result: ApplyResult) -> None:
        """How an apply ended."""

    def step(self, event: StepEvent) -> None:
        """A step finished (applied, failed or skipped)."""
        self.notice(step_line(event))

    @contextmanager
    def steps(self) -> Iterator[StepSink]:
        """A sink for step events for the duration of an apply."""
        yield self.step
