"""The ``nats`` CLI's context files: named connection settings in JSON.

A context ``NAME`` lives in ``$XDG_CONFIG_HOME/nats/context/NAME.json`` (default
``~/.config/nats/context``). Like the ``nats`` CLI we read the fields ``url``, ``user``,
``password``, ``token``, ``creds``, ``nkey`` (path to a seed file), ``cert``, ``key``, ``ca``,
``jetstream_domain`` and ``jetstream_api_prefix``; ``~`` and ``$VARS`` in paths are expanded.

A context is used only when asked for (``--context NAME`` or ``NATS_CONTEXT``): the context
the ``nats`` CLI has *selected* (``context.txt``) is deliberately not picked up on its own, so
a plan never silently runs against whatever server the shell last pointed at.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from reconciler.errors import ConnectError

_PATH_FIELDS = ("creds", "nkey", "cert", "key", "ca")


@dataclass(frozen=True, repr=False)
class NatsContext:
    """The connection settings of one context file (empty strings mean unset)."""

    name: str
    path: Path
    url: str = ""
    user: str = ""
    password: str = ""
    token: str = ""
    creds: str = ""
    nkey: str = ""
    cert: str = ""
    key: str = ""
    ca: str = ""
    jetstream_domain: str = ""
    jetstream_api_prefix: str = ""

    def __repr__(self) -> str:
        return f"NatsContext(name={self.name!r}, path={str(self.path)!r}, url={self.url!r})"


def context_dir(env: dict[str, str] | None = None) -> Path:
    """Where context files live: ``$XDG_CONFIG_HOME/nats/context`` or ``~/.config/...``."""
    environ = os.environ if env is None else env
    parent = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(parent) / "nats" / "context"


def _valid_name(name: str) -> bool:
    return bool(name) and ".." not in name and "/" not in name and os.sep not in name


def _expand(value: str) -> str:
    return os.path.expandvars(os.path.expanduser(value)) if value else value


def load_context(name: str, *, directory: Path | None = None) -> NatsContext:
    """Read context ``name``; a missing or malformed file is a :class:`ConnectError`."""
    if not _valid_name(name):
        raise ConnectError(f"invalid nats context name {name!r}")
    path = (directory or context_dir()) / f"{name}.json"
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConnectError(f"unknown nats context {name!r} (no {path})") from None
    except (OSError, ValueError) as err:
        raise ConnectError(f"cannot read nats context {path}: {err}") from None
    if not isinstance(data, dict):
        raise ConnectError(f"cannot read nats context {path}: not a JSON object")
    known = {f.name for f in fields(NatsContext)} - {"name", "path"}
    values = {k: str(v) for k, v in data.items() if k in known and v not in (None, "")}
    for key in _PATH_FIELDS:
        if key in values:
            values[key] = _expand(values[key])
    return NatsContext(name=name, path=path, **values)
