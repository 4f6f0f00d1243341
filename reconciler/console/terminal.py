"""The Console of the ``reconcile`` CLI: results on stdout, everything else on stderr.

On a terminal (stderr is a TTY and ``CI`` is unset) plans are coloured and an apply shows
a progress bar; elsewhere each finished step is one plain line, fit for CI logs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import click

from reconciler.console import Console, StepSink, error_lines, result_line, shown, step_line
from reconciler.model.values import inert_json, printable

if TYPE_CHECKING:
    from reconciler.errors import ApplyReport, ReconcileError
    from reconciler.execution.apply import ApplyResult, StepEvent
    from reconciler.planning.drift import DriftReport
    from reconciler.planning.steps import Plan

PlanFormat = Literal["text", "json", "markdown"]
#: Step lines are written in blocks of at most this many lines ...
LINES_HELD = 64
#: ... and at most this many seconds after the first of a block finished.
LINES_DUE = 0.05
DriftFormat = Literal["text", "json", "markdown", "html"]


class _JsonErrors:
    """Whether an error that ends the run is also written on stdout as JSON, for a
    program reading ``--format json`` (``schemas/error.schema.json``): ``mode`` is
    "document" (``plan``, ``drift``: ``{"error": ...}``, only when no document was
    written) or "line" (``apply``'s JSON Lines: a ``{"type": "error", ...}`` record,
    only when no ``result`` record ended them); None: text output, stderr only."""

    mode: Literal["document", "line"] | None = None
    written = False  # a document, or the result record, is on stdout already


_JSON_ERRORS = _JsonErrors()


def record_line(text: str) -> None:
    """One JSON Lines record on stdout, whole, even when Ctrl-C comes while a slow reader
    keeps its write blocked: CPython's buffered stdout drops the rest of a write a signal
    interrupts (the next record was glued to half a plan). Python's buffers are flushed,
    then the bytes go out with ``os.write`` until all are written, SIGINT held back
    meanwhile (it is delivered right after)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's captured output)
        click.echo(text)
        return
    sys.stdout.flush()
    data = memoryview((text + "\n").encode("utf-8"))  # JSON Lines are UTF-8
    with _sigint_held():
        while data:
            data = data[os.write(fd, data) :]


@contextmanager
def _sigint_held() -> Iterator[None]:
    if sys.platform == "win32" or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def interactive() -> bool:
    """A person at a terminal (progress bars, questions), not CI logs."""
    return sys.stderr.isatty() and not os.environ.get("CI")


def colour() -> bool:
    """Colours on a terminal unless NO_COLOR is set (https://no-color.org)."""
    return interactive() and not os.environ.get("NO_COLOR")


_PLACE = re.compile(r"^(\S+:\d+: )?(warning: )?(.*)$", re.S)


def _painted(line: str) -> str:
    if line.startswith("    "):
        return click.style(line, dim=True)
    match = _PLACE.match(line)
    assert match is not None  # the pattern matches any text
    place, warning, rest = match.groups()
    colour_name = "yellow" if warning else "red"
    return (
        (click.style(place, bold=True) if place else "")
        + (click.style(warning, fg="yellow", bold=True) if warning else "")
        + click.style(rest, fg=colour_name)
    )


def completion_line(event: StepEvent) -> str:
    """``Stream ORDERS: created (0.12 s)``: one line per finished step, for people."""
    done = {
        "create": "created",
        "update": "updated",
        "replace": "replaced",
        "migrate": "migrated",
        "delete": "deleted",
    }
    what = done.get(event.step.action, event.step.action)
    if event.outcome == "failed":
        return printable(f"{event.step.label}: {event.step.action} failed: {event.error}")
    if event.outcome == "skipped":
        return printable(f"{event.step.label}: {event.step.action} not started")
    return printable(f"{event.step.label}: {what} ({event.seconds:.2f} s)")


def discard_typed_ahead(fd: int) -> None:
    """Drop what was typed at the terminal ``fd`` and not read yet (nothing when ``fd``
    is not a terminal)."""
    import termios

    with contextlib.suppress(OSError, termios.error):
        termios.tcflush(fd, termios.TCIFLUSH)


async def read_line(fd: int) -> str:
    """One line typed at the terminal ``fd`` (without its end), read when the event loop
    sees it ready; "" at end of input."""
    import asyncio

    loop = asyncio.get_running_loop()
    line: asyncio.Future[str] = loop.create_future()
    typed: list[bytes] = []

    def readable() -> None:
        try:
            chunk = os.read(fd, 4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        typed.append(chunk)
        if (not chunk or b"\n" in chunk) and not line.done():
            text = b"".join(typed).decode(errors="replace")
            line.set_result(text.split("\n", 1)[0])

    loop.add_reader(fd, readable)
    try:
        return await line
    finally:
        loop.remove_reader(fd)


class TerminalConsole(Console):
    """Text for people at a terminal, or for CI logs."""

    def __init__(
        self,
        *,
        fmt: PlanFormat = "text",
        drift_format: DriftFormat = "text",
        allowed: tuple[str, ...] = (),
        full: bool = False,
        json_lines: bool = False,
    ) -> None:
        self.fmt = fmt
        self.drift_format = drift_format
        self.full = full  # --full: every step of a long plan in full
        #: ``apply --format json``: JSON Lines (the plan, each step's outcome, the result)
        self.json_lines = json_lines and fmt == "json"
        if fmt == "json" or drift_format == "json":
            _JSON_ERRORS.mode = "line" if self.json_lines else "document"
        self.interactive = interactive()
        self.allowed = allowed  # the --allow-* flags of this run
        self.asks = False  # the CLI sets it: a person at the terminal, no --yes
        self._bar: Any = None  # the progress display while an apply runs
        self._advance: StepSink | None = None  # the progress bar's sink, in steps()
        self._transfers: dict[str, tuple[float, Any]] = {}  # what: (started, bar task)
        self._transfer_bar: Any = None  # the bars of transfers(), once the first is shown
        #: Step lines not written yet, inside :meth:`steps` without a bar (None: outside)
        self._lines: list[str] | None = None
        self._due: Any = None  # the event loop's timer that writes them

    def notice(self, message: str) -> None:
        self.write_lines()  # the steps before it, first
        message = shown(message)  # names, file names, the server's words: escaped
        if self._bar is not None:  # above the bar, never glued to it
            self._bar.console.print(message, markup=False, highlight=False)
        else:
            click.echo(message, err=True)

    def heading(self, title: str) -> None:
        """A section title on standard output, between plans (``plan --all-envs``)."""
        if self.fmt == "json":
            return
        if self.fmt == "markdown":
            from reconciler.render.markdown import cell

            click.echo(f"## {cell(title)}\n")  # a server's URL from a variable: escaped
            return
        title = printable(title)
        click.echo(click.style(f"== {title}", bold=True) if colour() else f"== {title}")

    async def confirm(self, plan: Plan) -> bool:
        """Ask the person at the terminal to type ``yes``; anything else (or end of input)
        changes nothing. What was typed before the question (a ``yes`` pasted with the
        command) is discarded: only an answer given after the plan was shown counts.
        The answer is read by the event loop, not by a thread: the apply
        lock keeps being refreshed meanwhile, and Ctrl-C (the caller cancels the question)
        leaves no thread blocked on the terminal (one ended the process with "Fatal Python
        error" at exit)."""
        import asyncio

        question = "Do you want to apply these changes? Only 'yes' will be accepted: "
        discard_typed_ahead(sys.stdin.fileno())
        click.echo(question, err=True, nl=False)
        try:
            given = await read_line(sys.stdin.fileno())
        except asyncio.CancelledError:
            click.echo(err=True)  # after the ^C the terminal echoed
            raise
        if given.strip() != "yes":
            self.notice("Apply cancelled: nothing was changed.")
            return False
        return True

    def show_plan(self, plan: Plan) -> None:
        from reconciler.render import render_plan

        if self.json_lines:
            from reconciler.render.json import json_line, plan_record

            record_line(json_line(plan_record(plan)))
            return
        _JSON_ERRORS.written = True
        color = self.fmt == "text" and colour()
        click.echo(render_plan(plan, self.fmt, color=color, allowed=self.allowed, full=self.full))

    def wrote_document(self) -> None:
        """The command wrote its JSON document on stdout itself: an error after it goes
        to stderr only (stdout stays one document)."""
        _JSON_ERRORS.written = True

    def show_drift(self, report: DriftReport) -> None:
        _JSON_ERRORS.written = True
        click.echo(self.drift_text(report), nl=False)

    def drift_text(self, report: DriftReport) -> str:
        if self.drift_format == "json":
            return inert_json(json.dumps(report.to_json(), indent=2)) + "\n"
        if self.drift_format == "markdown":
            from reconciler.render.drift_markdown import render_drift_markdown

            return render_drift_markdown(report)
        if self.drift_format == "html":
            from reconciler.render.drift_html import render_drift_html

            return render_drift_html(report)
        from reconciler.render.drift_text import render_drift_text

        return render_drift_text(report)

    def show_error(self, err: ReconcileError, *, ends_run: bool = True) -> None:
        """The error's lines on stderr; with ``--format json``, when it ends the run
        (``ends_run``; not one environment's of several), also the error as JSON on
        stdout (:class:`_JsonErrors`)."""
        for line in error_lines(err):
            self.problem(line)
        if not ends_run or _JSON_ERRORS.mode is None or _JSON_ERRORS.written:
            return
        from reconciler.render.json import error_record, json_line

        if _JSON_ERRORS.mode == "line":
            record_line(json_line({"type": "error", **error_record(err)}))
        else:
            click.echo(inert_json(json.dumps({"error": error_record(err)}, indent=2)))
        _JSON_ERRORS.written = True

    def problem(self, line: str) -> None:
        """One error or warning line on stderr; on a terminal the place is bold, an error
        red, a warning yellow, and a quoted source line dim; escaped (:func:`shown`)."""
        self.write_lines()
        line = shown(line)
        if not colour():
            click.echo(line, err=True)
            return
        for part in line.split("\n"):
            click.echo(_painted(part), err=True)

    def show_result(self, result: ApplyResult) -> None:
        self.write_lines()
        if self.json_lines:
            from reconciler.render.json import json_line, result_record

            record = result_record(
                applied=len(result.applied),
                failed=len(result.failed),
                skipped=len(result.skipped),
                dry_run=result.dry_run,
                interrupted=result.interrupted,
                cancelled=result.cancelled,
            )
            record_line(json_line(record))
            _JSON_ERRORS.written = True
        if self.fmt == "text" and not result.cancelled:
            click.echo(result_line([result]))

    def show_failed_apply(self, report: ApplyReport) -> None:
        """An apply that stopped on a failed step (the error itself goes to stderr): with
        :attr:`json_lines`, the ``result`` record that ends the lines; nothing otherwise."""
        if not self.json_lines:
            return
        from reconciler.render.json import json_line, result_record

        record = result_record(
            applied=len(report.applied),
            failed=len(report.failed),
            skipped=len(report.skipped),
            dry_run=False,
            interrupted=False,
            cancelled=False,
        )
        record_line(json_line(record))
        _JSON_ERRORS.written = True

    def step(self, event: StepEvent) -> None:
        """A step line (text only: JSON and Markdown output is the plan alone), on the
        progress bar inside :meth:`steps`; with :attr:`json_lines`, one JSON line)."""
        if self.json_lines:
            from reconciler.render.json import json_line, step_record

            record_line(json_line(step_record(event.step, event.outcome, event.error)))
            return
        if self.fmt != "text":
            return
        if self._advance is not None:
            self._advance(event)
        elif self._bar is None and sys.stderr is not None:
            # The line of :meth:`notice`, written straight (an apply writes one per
            # step: 21,000 of them spent a tenth of its time in click.echo and in
            # escaping again a line step_line already escaped; shown() of printable
            # text is that text)
            line = step_line(event) + "\n"
            if self._lines is None:
                sys.stderr.write(line)
            else:
                self._hold(line)
        else:
            super().step(event)

    def _hold(self, line: str) -> None:
        """Keep a step line for the next block: written within ``LINES_DUE`` seconds
        (a timer on the event loop), at ``LINES_HELD`` lines, before any other line and
        when the steps end. stderr is line-buffered: a write per step was a system
        call per step."""
        assert self._lines is not None
        self._lines.append(line)
        if len(self._lines) >= LINES_HELD:
            self.write_lines()
        elif self._due is None:
            import asyncio

            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on an event loop: nothing would write it later
                self.write_lines()
                return
            self._due = loop.call_later(LINES_DUE, self.write_lines)

    def write_lines(self) -> None:
        """Write the step lines held (:meth:`_hold`), in one write."""
        if self._due is not None:
            self._due.cancel()
            self._due = None
        if self._lines:
            sys.stderr.write("".join(self._lines))
            self._lines.clear()

    def progress(self, what: str, done: int, total: int | None) -> None:
        """A bar per transfer on a terminal (bytes so far, inside :meth:`transfers`);
        elsewhere one line when it finishes (``backed up ORDERS: 1.2 KiB in 0.03 s``);
        nothing in JSON Lines."""
        import time

        from reconciler.specs.units import approx_size

        if self.json_lines:
            return
        finished = total is not None and done >= total
        started, task = self._transfers.setdefault(what, (time.monotonic(), None))
        if not self.interactive:
            if finished:
                del self._transfers[what]
                seconds = time.monotonic() - started
                self.notice(f"{what}: {approx_size(done)} in {seconds:.2f} s")
            return
        bar = self._transfer_bar
        if bar is None:  # the plan and the question come first, on their own lines
            from rich.console import Console as RichConsole
            from rich.progress import DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            screen = RichConsole(stderr=True)
            columns = (TextColumn("{task.description}"), DownloadColumn(), TransferSpeedColumn())
            bar = Progress(*columns, console=screen, transient=True)
            bar.start()
            self._transfer_bar = bar
            if self._bar is None:  # notices go above it
                self._bar = bar
        if task is None:
            task = bar.add_task(printable(what), total=None)
            self._transfers[what] = (started, task)
        bar.update(task, completed=done)
        if finished:
            bar.console.print(printable(f"{what}: {approx_size(done)}"), markup=False)
            bar.remove_task(task)
            del self._transfers[what]

    @contextmanager
    def transfers(self) -> Iterator[None]:
        """The span of :meth:`progress`'s bars: they are gone when it ends, however."""
        try:
            yield
        finally:
            bar, self._transfer_bar = self._transfer_bar, None
            self._transfers.clear()
            if bar is not None:
                bar.stop()
                if self._bar is bar:
                    self._bar = None

    @contextmanager
    def steps(self) -> Iterator[StepSink]:
        if self.fmt != "text" or not self.interactive:
            self._lines = []
            try:
                with super().steps() as sink:
                    yield sink
            finally:
                self.write_lines()
                self._lines = None
            return
        from rich.console import Console as RichConsole
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        screen = RichConsole(stderr=True, no_color=not colour())
        columns = (
            TextColumn("[bold]applying"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
        )
        # The bar starts with the first step: the plan and the question come before it,
        # on their own lines.
        bar = Progress(*columns, transient=True, console=screen)
        task = bar.add_task("", total=None)

        def advance(event: StepEvent) -> None:
            if self._bar is None:
                bar.start()
                self._bar = bar
            label = printable(f"{event.step.action} {event.step.label}")
            bar.update(task, total=event.total, completed=event.done, description=label)
            style = "red" if event.outcome == "failed" else None
            line = completion_line(event)
            bar.console.print(line, style=style, markup=False, highlight=False)

        self._advance = advance
        try:
            yield advance
        finally:
            self._advance = None
            if self._bar is not None:
                bar.stop()
                self._bar = None
