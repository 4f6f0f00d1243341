"""The Console of the GitHub Action: job-log lines, and Markdown for people on GitHub.

Everything shown is logged as plain text (the job log) and, where a reviewer should see
it, added to :attr:`MarkdownConsole.markdown` (the step summary and the sticky PR
comment). Hooks (:meth:`on_error`) let the Action add GitHub's own annotations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from reconciler.console import Console, error_lines, result_line, shown
from reconciler.errors import ApplyFailed, ReconcileError, SpecError, UnsupportedField

if TYPE_CHECKING:
    from reconciler.execution.apply import ApplyResult
    from reconciler.planning.drift import DriftReport
    from reconciler.planning.steps import Plan


def failure_markdown(err: ReconcileError) -> str:
    """An error as Markdown: the headline, then each problem or step; their text (names,
    values, file names, the server's words) escaped, never a link or HTML."""
    from reconciler.render.markdown import cell, code

    lines = [f"**Failed:** {cell(err.headline)}"]
    if err.details:  # one line per step refused, say
        lines += ["", *(f"- {cell(line)}" for line in err.details)]
    if isinstance(err, (SpecError, UnsupportedField)):
        lines += ["", *(f"- {code(str(problem))}" for problem in err.problems)]
    if isinstance(err, ApplyFailed):
        report = err.report
        lines += ["", *(f"- applied: {cell(str(s))}" for s in report.applied)]
        lines += [f"- failed: {cell(str(s))}" for s in report.failed]
        lines += [f"- skipped: {cell(str(s))}" for s in report.skipped]
        lines += [f"- removed again: {cell(str(s))}" for s in report.removed]
        lines += [f"- kept: {cell(str(s))}" for s in report.kept]
    return "\n".join(lines) + "\n"


class MarkdownConsole(Console):
    """Log lines through ``log``; Markdown collected in ``markdown``."""

    def __init__(self, log: Callable[[str], None], *, title: str = "") -> None:
        self.log = log
        self.title = title
        self.parts: list[str] = []
        self.allowed: tuple[str, ...] = ()  # the --allow-* flags of this run
        self.full_plan: str | None = None  # Markdown: where the complete plan is kept
        self._titled = False  # a part carries the title itself (drift reports)
        self.shown_plan: Plan | None = None  # the last plan shown

    @property
    def markdown(self) -> str:
        head = f"## {self.title}\n\n" if self.title and not self._titled else ""
        return head + "\n".join(part.rstrip("\n") + "\n" for part in self.parts)

    def notice(self, message: str) -> None:
        self.log(shown(message))

    def progress(self, what: str, done: int, total: int | None) -> None:
        """One log line per transfer when it finishes (``backed up ORDERS: 1.2 KiB``), as
        the CLI writes without a terminal: a backup's job log said nothing before."""
        from reconciler.specs.units import approx_size

        if total is not None and done >= total:
            self.notice(f"{what}: {approx_size(done)}")

    def show_plan(self, plan: Plan) -> None:
        from reconciler.render import render_plan
        from reconciler.render.markdown import render_markdown

        self.shown_plan = plan
        self.log(render_plan(plan, "text", allowed=self.allowed))
        self.parts.append(render_markdown(plan, allowed=self.allowed, full_plan=self.full_plan))

    def show_drift(self, report: DriftReport) -> None:
        from reconciler.render.drift_markdown import render_drift_markdown
        from reconciler.render.drift_text import render_drift_text

        self.log(render_drift_text(report))
        if self.title:
            self._titled = True
            self.parts.append(render_drift_markdown(report, title=self.title))
        else:
            self.parts.append(render_drift_markdown(report))

    def show_error(self, err: ReconcileError) -> None:
        for line in error_lines(err):
            self.log(line)
        self.on_error(err)
        self.parts.insert(0, failure_markdown(err))

    def on_error(self, err: ReconcileError) -> None:
        """Called for every error shown (the Action adds annotations here)."""

    def show_result(self, result: ApplyResult) -> None:
        line = result_line([result])
        self.log(line)
        self.parts.append(f"**{line}**")
