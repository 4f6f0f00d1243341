"""What a Pulumi user reads when the provider refuses: the error, not a traceback.

Pulumi's dynamic provider host (``python -m pulumi.dynamic``) answers an exception from a
provider method with ``traceback.format_exc()`` as the gRPC error's details, which the
engine prints under the resource: a refused plan showed a Python traceback before its
reason. The provider runs inside that host, so when its module is loaded its
``traceback`` is given a stand-in: for this tool's own errors (:class:`ReconcileError`,
free of secrets) ``format_exc`` gives the error's message alone, escaped as the CLI
prints it; anything else (a bug) keeps the traceback, as the CLI shows one.
``RECONCILE_DEBUG`` set keeps every traceback. A host without that module (another
Pulumi version) is left as it is.
"""

from __future__ import annotations

import os
import sys
import traceback
from types import ModuleType
from typing import Any

from reconciler.console import shown
from reconciler.errors import ReconcileError

#: The module of Pulumi's dynamic provider host that formats a provider's exceptions.
HOST_MODULE = "pulumi.dynamic.__main__"


class _Plain:
    """``traceback``, except that this tool's errors format as their message."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real

    def format_exc(self, *args: Any, **kwargs: Any) -> str:
        error = sys.exc_info()[1]
        if isinstance(error, ReconcileError) and not os.environ.get("RECONCILE_DEBUG"):
            return message(error)
        return str(self._real.format_exc(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def message(error: ReconcileError) -> str:
    """The error as the Pulumi CLI prints it: each line escaped as the CLI escapes its
    error lines (``reconciler.console.shown``): a name a lock holder, a live resource's
    metadata or a server wrote (an ESC sequence, an OSC 8 link, U+202E) stays text."""
    return "\n".join(shown(line) for line in str(error).split("\n"))


def _host() -> ModuleType | None:
    """The host's module: ``__main__`` when run as ``python -m pulumi.dynamic``."""
    for module in (sys.modules.get("__main__"), sys.modules.get(HOST_MODULE)):
        spec = getattr(module, "__spec__", None)
        if module is not None and getattr(spec, "name", module.__name__) == HOST_MODULE:
            return module
    return None


def plain_errors_in_host() -> None:
    """Make the loaded provider host format this tool's errors as their message."""
    host = _host()
    if host is not None and getattr(host, "traceback", None) is traceback:
        host.traceback = _Plain(traceback)  # type: ignore[attr-defined]
