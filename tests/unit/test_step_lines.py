"""Step lines without a terminal are written in blocks (``TerminalConsole.steps``): the
same lines, in the same order, each out within ``LINES_DUE`` seconds of its step (a
timer on the event loop), before any other line written after it, and all of them when
the steps end, however they end."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from reconciler.console import terminal
from reconciler.console.terminal import LINES_DUE, LINES_HELD, TerminalConsole
from reconciler.execution.apply import StepEvent
from reconciler.identity import ResourceRef
from reconciler.locations import Location
from reconciler.planning.steps import Create


class Stderr:
    """sys.stderr as the console sees it: each write kept apart."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    @property
    def text(self) -> str:
        return "".join(self.writes)


@pytest.fixture
def stderr(monkeypatch: pytest.MonkeyPatch) -> Stderr:
    """The fake, in place from the test's first line (pytest puts its own sys.stderr back
    between a fixture's setup and the test)."""
    fake = Stderr()
    monkeypatch.setattr(terminal, "interactive", lambda: False)
    monkeypatch.setattr(terminal, "colour", lambda: False)
    monkeypatch.setattr(terminal, "sys", _Sys(fake))
    return fake


class _Sys:
    """The ``sys`` module as terminal.py sees it, with ``stderr`` the fake."""

    def __init__(self, stderr: Stderr) -> None:
        self.stderr = stderr

    def __getattr__(self, name: str) -> Any:
        return getattr(sys, name)


def event(index: int, total: int) -> StepEvent:
    ref = ResourceRef("Stream", f"S{index}")
    step = Create(ref=ref, config={"name": f"S{index}"}, source=Location("s.yaml", index + 1))
    return StepEvent(step, "applied", done=index + 1, total=total)


def lines(total: int) -> str:
    return "".join(f"[{i + 1}/{total}] applied create Stream S{i}\n" for i in range(total))


def test_the_lines_are_the_same_in_fewer_writes(stderr: Stderr) -> None:
    console, total = TerminalConsole(), LINES_HELD * 3 + 5

    async def apply() -> None:
        with console.steps() as sink:
            for index in range(total):
                sink(event(index, total))

    asyncio.run(apply())
    assert stderr.text == lines(total)
    assert len(stderr.writes) == 4  # three full blocks, the rest when the steps end


def test_a_line_is_out_within_the_due_time_while_the_next_step_runs(stderr: Stderr) -> None:
    console = TerminalConsole()
    seen: list[str] = []

    async def apply() -> None:
        with console.steps() as sink:
            sink(event(0, 2))
            assert stderr.text == ""  # held
            await asyncio.sleep(LINES_DUE * 4)  # a slow step
            seen.append(stderr.text)
            sink(event(1, 2))

    asyncio.run(apply())
    assert seen == [lines(2).splitlines(keepends=True)[0]]
    assert stderr.text == lines(2)


def test_a_notice_an_error_and_the_summary_come_after_the_lines_before_them(
    stderr: Stderr, capsys: pytest.CaptureFixture[str]
) -> None:
    console = TerminalConsole()
    order: list[Any] = []

    async def apply() -> None:
        with console.steps() as sink:
            sink(event(0, 2))
            console.notice("lock refreshed")
            order.append(stderr.text)
            sink(event(1, 2))
            raise RuntimeError("a step failed")

    with pytest.raises(RuntimeError):
        asyncio.run(apply())
    first, second = lines(2).splitlines(keepends=True)
    assert order == [first]  # the notice itself goes through click, after the line
    assert stderr.text == first + second  # written when the steps ended, by an error


def test_outside_an_event_loop_each_line_is_written_at_once(stderr: Stderr) -> None:
    console = TerminalConsole()
    with console.steps() as sink:
        sink(event(0, 1))
        assert stderr.text == lines(1)
