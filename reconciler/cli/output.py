"""Where the CLI's words go: through the terminal Console (``reconciler.console``)."""

from __future__ import annotations

from reconciler.console.terminal import TerminalConsole, interactive

__all__ = ["interactive", "notice"]


def notice(message: str) -> None:
    """A notice on stderr (the terminal Console's)."""
    TerminalConsole().notice(message)
