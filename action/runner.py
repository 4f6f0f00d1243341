"""The GitHub Actions runner as a step sees it: inputs, outputs, summary, workflow commands.

Everything the runner reads from a step goes through here, so the rules live in one place:

- inputs arrive as ``INPUT_<NAME>`` variables (upper case, spaces as ``_``, hyphens kept as
  the runner passes them to JavaScript and container actions; ``_`` accepted too because a
  composite action has to pass them through ``env:`` itself);
- outputs are appended to the ``GITHUB_OUTPUT`` file as ``name<<DELIMITER`` blocks with a
  random delimiter that cannot occur in the value;
- the step summary (``GITHUB_STEP_SUMMARY``) is capped at 1 MiB per step: longer Markdown is
  cut at a line boundary and ends with a note saying so;
- workflow commands (``::error file=F,line=N::message``, ``::add-mask::``) are escaped as the
  runner unescapes them: ``%``, ``\\r``, ``\\n`` in the message, and also ``:`` and ``,`` in
  properties;
- nothing else written to the log starts a workflow command: a log message with a line
  that would (after its leading blanks, ``::``; anywhere in it, the older ``##[``) is
  written between
  ``::stop-commands::<random token>`` and ``::<token>::`` (:func:`inert_log`), on top of
  the escaping every name, value and file name had when it was rendered
  (``reconciler.model.values.printable``).
"""

from __future__ import annotations

import os
import secrets
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from action.flags import as_inputs
from reconciler.errors import ReconcileError
from reconciler.model.values import LEGACY_COMMAND, printable

#: GitHub refuses a step summary above 1 MiB (it is then not shown at all).
SUMMARY_LIMIT = 1024 * 1024

#: Where a cut step summary points for the whole report.
SUMMARY_WHERE = "the step's `plan-json` output file"

_TRUE = ("true", "True", "TRUE")
_FALSE = ("false", "False", "FALSE")


class InputError(ReconcileError):
    """An action input has a value the action cannot use."""


def escape_data(value: str) -> str:
    """Escape a workflow command's message the way the runner unescapes it."""
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    """Escape a workflow command's property value (``file=``, ``title=``, ...)."""
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def workflow_command(command: str, message: str, **properties: str | int | None) -> str:
    """One ``::command key=value,...::message`` line; properties that are None are left out."""
    props = ",".join(
        f"{key}={escape_property(str(value))}"
        for key, value in properties.items()
        if value is not None and value != ""
    )
    head = f"::{command} {props}" if props else f"::{command}"
    return f"{head}::{escape_data(message)}"


def inert_log(message: str) -> str:
    """``message`` for the log, unable to start a workflow command: when one of its lines
    would (``::`` after blanks, or the runner's older ``##[`` anywhere in it), the whole
    is wrapped in ``::stop-commands::TOKEN`` ... ``::TOKEN::`` with a random token the
    message cannot contain."""
    if not any(_commands(line) for line in message.splitlines()):
        return message
    token = secrets.token_hex(16)
    while token in message:
        token = secrets.token_hex(16)
    return f"::stop-commands::{token}\n{message}\n::{token}::"


def _commands(line: str) -> bool:
    """Whether the runner would read a workflow command in ``line``."""
    return line.lstrip().startswith("::") or LEGACY_COMMAND in line


def truncate_summary(markdown: str, *, limit: int = SUMMARY_LIMIT) -> tuple[str, bool]:
    """Markdown that fits in ``limit`` UTF-8 bytes, cut with a note if needed
    (``render.markdown.fit``: never inside a code block, open ``<details>`` closed)."""
    from reconciler.render.markdown import fit

    data = markdown.encode("utf-8")
    if len(data) <= limit:
        return markdown, False
    chars = len(markdown) * limit // len(data)  # as many characters as fit, on average
    while chars > 0:
        text = fit(markdown, chars, where=SUMMARY_WHERE)
        if len(text.encode("utf-8")) <= limit:
            return text, True
        chars = chars * 9 // 10
    return "", True


def output_block(name: str, value: str) -> str:
    """A ``GITHUB_OUTPUT`` entry: ``name<<DELIM\\nvalue\\nDELIM\\n`` with a fresh delimiter."""
    if "\n" in name or "\r" in name:
        raise InputError(f"output name {name!r} may not span lines")
    while True:
        delimiter = f"ghadelimiter_{uuid.uuid4()}"
        if delimiter not in value and delimiter not in name:
            return f"{name}<<{delimiter}\n{value}\n{delimiter}\n"


@dataclass
class Runner:
    """The environment of one step: its variables and the stream workflow commands go to."""

    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    stdout: TextIO = field(default_factory=lambda: sys.stdout)

    # inputs -------------------------------------------------------------------------
    def input(self, name: str, *, default: str = "") -> str:
        """The trimmed value of input ``name`` (``default`` when unset or empty)."""
        base = name.replace(" ", "_").upper()
        for key in (f"INPUT_{base}", f"INPUT_{base.replace('-', '_')}"):
            value = self.env.get(key, "").strip()
            if value:
                return value
        return default

    def flag(self, name: str, *, default: bool) -> bool:
        """A boolean input, read with the YAML 1.2 core schema words GitHub accepts."""
        value = self.input(name)
        if not value:
            return default
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise InputError(f"input {name!r} must be true or false, not {value!r}")

    # outputs ------------------------------------------------------------------------
    def set_output(self, name: str, value: str) -> None:
        """Append an output; without ``GITHUB_OUTPUT`` (a local run) nothing is written.
        The ``summary`` output names Action inputs, not CLI flags."""
        target = self.env.get("GITHUB_OUTPUT")
        if not target:
            return
        value = as_inputs(value) if name == "summary" else value
        with Path(target).open("a", encoding="utf-8") as out:
            out.write(output_block(name, value))

    def write_summary(self, markdown: str) -> bool:
        """Append Markdown to the step summary, within the 1 MiB cap; True if truncated."""
        target = self.env.get("GITHUB_STEP_SUMMARY")
        if not target:
            return False
        path = Path(target)
        used = path.stat().st_size if path.exists() else 0
        limit = max(SUMMARY_LIMIT - used, 0)
        text, truncated = truncate_summary(as_inputs(markdown), limit=limit)
        with path.open("a", encoding="utf-8") as out:
            out.write(text)
        return truncated

    # workflow commands ---------------------------------------------------------------
    def command(self, command: str, message: str, **properties: str | int | None) -> None:
        self.stdout.write(workflow_command(command, message, **properties) + "\n")
        self.stdout.flush()

    def error(
        self, message: str, *, file: str | None = None, line: int | None = None, title: str = ""
    ) -> None:
        """An error annotation, attached to ``file``/``line`` when known; the message's
        names, values and file names escaped (``printable``), and ``file`` too (a name
        from the repository or a saved plan: an ESC, or the runner's ``##[``, stays inert)."""
        text = printable(as_inputs(message))
        where = printable(file) if file else None
        self.command("error", text, file=where, line=line, title=title or None)

    def warning(self, message: str, *, title: str = "") -> None:
        self.command("warning", printable(as_inputs(message)), title=title or None)

    def mask(self, secret: str) -> None:
        """Ask the runner to hide ``secret`` (and each of its lines) in every later log line."""
        parts = {secret.strip(), *(line.strip() for line in secret.splitlines())}
        for part in sorted(p for p in parts if p):
            self.command("add-mask", part)

    def log(self, message: str) -> None:
        """A message for the job log, never a workflow command (:func:`inert_log`); CLI
        flags named as the Action inputs that set them (:func:`action.flags.as_inputs`)."""
        self.stdout.write(inert_log(as_inputs(message)) + "\n")
        self.stdout.flush()
