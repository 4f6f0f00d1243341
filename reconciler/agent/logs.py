"""The agent's log: one line per cycle and one per change, as text or JSON lines.

Text (the default): ``2026-11-25T16:00:00Z cycle commit=ab12cd3 in_sync=4 drifted=1 ...``;
``--log-format json``: one JSON object per line with ``time``, ``event`` and the same
fields. Untrusted text (names, advisory fields, server messages) is escaped for the
medium (``model.values.printable`` for text, ``inert_json`` for JSON). Only field
paths, never spec values, are logged. An agent serving project environments logs through
:meth:`Log.bound` (``env=NAME`` on every line of that environment); each environment's
lines name files as the user knows them (:meth:`Log.showing`: with ``--git``, a
checked-out tree's path as the repository's, with the commit).
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Callable
from typing import Any, Literal, TextIO

from reconciler.model.timestamps import rfc3339
from reconciler.model.values import inert_json, printable

LogFormat = Literal["text", "json"]


class Log:
    def __init__(
        self,
        fmt: LogFormat = "text",
        out: TextIO | None = None,
        *,
        shown: Callable[[str], str] | None = None,
        **bound: Any,
    ) -> None:
        self.fmt = fmt
        self.out = out or sys.stderr
        self._shown = shown
        self._bound = {k: v for k, v in bound.items() if v is not None}

    def bound(self, **fields: Any) -> Log:
        """The same log, with ``fields`` (``env=NAME``) first on every line (None: left out)."""
        joined = {**self._bound, **fields}
        return self._copy(_bound={k: v for k, v in joined.items() if v is not None})

    def showing(self, shown: Callable[[str], str]) -> Log:
        """The same log, its message and text fields said through ``shown`` (an
        environment's source: a git tree's paths as the repository's, with the commit)."""
        return self._copy(_shown=shown)

    def _copy(self, **changed: Any) -> Log:
        """This log with ``changed`` attributes: of its own class and sharing the rest (a
        program's log, a subclass that keeps what it is told, keeps being told)."""
        other = copy.copy(self)
        other.__dict__.update(changed)
        return other

    def event(self, event: str, message: str = "", **fields: Any) -> None:
        """One line: ``event`` (cycle, change, notice, error, ...), a sentence, fields."""
        now = rfc3339(time.time())
        fields = {**self._bound, **fields}
        if self._shown is not None:
            said = self._shown
            message = said(message)
            fields = {k: said(v) if isinstance(v, str) else v for k, v in fields.items()}
        if self.fmt == "json":
            record = {"time": now, "event": event, "message": message or None, **fields}
            line = inert_json(json.dumps(record, default=str, ensure_ascii=True))
        else:
            shown = " ".join(f"{k}={_text(v)}" for k, v in fields.items() if v not in (None, ""))
            line = " ".join(p for p in (now, event, printable(message), shown) if p)
        try:
            self.out.write(line + "\n")
            self.out.flush()
        except (OSError, ValueError):
            pass  # a closed log stream never stops the agent


def _text(value: Any) -> str:
    if isinstance(value, dict | list):
        return printable(json.dumps(value, default=str, ensure_ascii=False))
    text = printable(str(value))
    return json.dumps(text) if (" " in text or not text) else text
