"""The one pseudo-terminal driver of the tests: ``reconcile`` as a person meets it at a real
terminal (the pty is its controlling terminal, so a question can be asked and Ctrl-C is a
signal of its own session), with what it prints and what is typed at it."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: What apply prints when it asks.
QUESTION = b"Only 'yes' will be accepted"

#: Started in a new session, the child makes its stdin (the pty) its controlling
#: terminal, then becomes ``reconcile``.
TAKE_TERMINAL = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.executable, [sys.executable, '-m', 'reconciler', *sys.argv[1:]])"
)


class Terminal:
    """``reconcile ARGS`` on a pseudo-terminal 120 columns wide; no colours unless
    ``colour``; no NATS_/RECONCILE_ variable of the test's own environment leaks in."""

    def __init__(
        self,
        *args: str,
        cwd: Path = REPO,
        env: dict[str, str] | None = None,
        colour: bool = False,
    ) -> None:
        primary, secondary = pty.openpty()
        environ = {
            k: v
            for k, v in os.environ.items()
            if k not in ("CI", "NO_COLOR") and not k.startswith(("NATS_", "RECONCILE_"))
        }
        environ.update({"PYTHONPATH": str(REPO), "TERM": "xterm", "COLUMNS": "120"})
        if not colour:
            environ["NO_COLOR"] = "1"
        environ.update(env or {})
        self.process = subprocess.Popen(
            [sys.executable, "-c", TAKE_TERMINAL, *args],
            stdin=secondary, stdout=secondary, stderr=secondary, env=environ, cwd=cwd,
            start_new_session=True,
        )  # fmt: skip
        os.close(secondary)
        self.primary = primary
        self.output = b""

    def read_until(self, wanted: bytes, seconds: float = 60.0) -> bool:
        """Read what it prints until ``wanted`` appears (True), it exits or time is up."""
        deadline = time.monotonic() + seconds
        while wanted not in self.output and time.monotonic() < deadline:
            ready, _, _ = select.select([self.primary], [], [], 0.1)
            if ready:
                try:
                    self.output += os.read(self.primary, 65536)
                except OSError:
                    break
            elif self.process.poll() is not None:
                break
        return wanted in self.output

    def type(self, text: bytes) -> None:
        os.write(self.primary, text)

    def finish(self, seconds: float = 60.0) -> int:
        """Read until it exits; its exit status."""
        deadline = time.monotonic() + seconds
        while self.process.poll() is None and time.monotonic() < deadline:
            self.read_until(b"\x00never", 0.2)
        self.read_until(b"\x00never", 0.2)
        os.close(self.primary)
        return self.process.wait(timeout=10)

    def answer(self, text: bytes, seconds: float = 60.0) -> int:
        """Type ``text`` at the question, then :meth:`finish`."""
        self.type(text)
        return self.finish(seconds)

    @property
    def text(self) -> str:
        return self.output.decode(errors="replace")

    def after_question(self) -> str:
        return self.text.split(QUESTION.decode() + ": ", 1)[1]
