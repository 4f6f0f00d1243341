"""Where the CLI's words go: through the terminal Console (``reconciler.console``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from reconciler.console.terminal import TerminalConsole, interactive
from reconciler.errors import ReconcileError
from reconciler.specs.files import write_renamed

__all__ = ["interactive", "notice", "write_whole"]


def notice(message: str) -> None:
    """A notice on stderr (the terminal Console's)."""
    TerminalConsole().notice(message)


def write_whole(out: Path, write: Callable[[TextIO], object], *, what: str) -> None:
    """Write ``out`` whole or not at all: ``write`` fills a temporary file beside it that
    is then renamed over the file a symlink names (never over the link). A device, pipe
    or folder is refused: the rename would replace it (``/dev/stdout`` run as root
    became a regular file). ``what`` names the output in the refusal; the refusal names
    the path as given (``/dev/stdout``, not the terminal it leads to) and, for a path
    under a file, that file."""
    given, out = out, Path(os.path.realpath(out))
    if out.exists() and not out.is_file():
        raise ReconcileError(
            f"cannot write {given}: not a regular file (a device, pipe or folder); "
            f"give {what} a file"
        )
    under = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if under is not None:
        raise ReconcileError(f"cannot write {given}: {under} is a file, not a folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_renamed(out, write)
    except OSError as err:
        raise ReconcileError(f"cannot write {given}: {err.strerror or err}") from None
