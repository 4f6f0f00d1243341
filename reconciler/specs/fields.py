"""Which fields of each kind hold durations and sizes, and how to reach them; which
field names hold secrets (:func:`is_secret`).

Paths are dotted; ``*`` stands for every item of a list (``backoff.*``). The tables cover
every duration and size field a 2.12+ server (or the client libraries, for buckets)
accepts; validation converts human units found there to wire integers, and export turns
the integers back into human units.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Literal

Unit = Literal["duration", "size"]

#: A field (or metadata key) whose name says it holds a secret: its value is never shown.
_SECRET_NAME = re.compile(r"pass(word)?|secret|token|seed|creds?|jwt|nkey|private", re.I)


def is_secret(path: str) -> bool:
    """Whether the last part of a dotted field path names a secret."""
    last = path.rpartition(".")[2]
    return bool(last) and bool(_SECRET_NAME.search(last))


#: Why a value (or a line holding one) is not quoted in an error.
MAY_BE_SECRET = "it may hold a secret"


#: A URL carrying a user and password or a token (``nats://alice:s3cret@host``).
_URL_CREDENTIALS = re.compile(r"://[^\s/@]+@")


def mentions_secret(text: str) -> bool:
    """Whether a text (a file's) names a secret anywhere (``password:``, ``secret: true``,
    a URL with credentials): none of its lines is quoted in an error, whose value could
    be the secret."""
    return bool(_SECRET_NAME.search(text) or _URL_CREDENTIALS.search(text))


INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1

#: kind -> {path pattern: unit}
UNIT_FIELDS: Mapping[str, Mapping[str, Unit]] = {
    "Stream": {
        "max_age": "duration",
        "duplicate_window": "duration",
        "subject_delete_marker_ttl": "duration",
        "consumer_limits.inactive_threshold": "duration",
        "max_bytes": "size",
        "max_msg_size": "size",
    },
    "Consumer": {
        "ack_wait": "duration",
        "backoff.*": "duration",
        "idle_heartbeat": "duration",
        "inactive_threshold": "duration",
        "max_expires": "duration",
        "priority_timeout": "duration",
        "max_bytes": "size",
    },
    "KeyValue": {
        "ttl": "duration",
        "limit_marker_ttl": "duration",
        "max_value_size": "size",
        "max_bytes": "size",
    },
    "ObjectStore": {
        "ttl": "duration",
        "max_bytes": "size",
    },
}

#: Fields whose wire type is a 32-bit integer (kind-independent names).
INT32_FIELDS = frozenset({"max_msg_size", "max_value_size"})


def field_limit(path: str) -> int:
    """The largest wire value a unit field may hold."""
    return INT32_MAX if path in INT32_FIELDS else INT64_MAX


def unit_paths(
    kind: str, body: MutableMapping[str, Any]
) -> Iterator[tuple[str, Unit, MutableMapping[str, Any] | list[Any], str | int]]:
    """Every unit field present in ``body``: (dotted path, unit, container, key)."""
    for parts, unit in _PATTERNS.get(kind, ()):
        if len(parts) == 1:  # a top-level field: the common case, looked up directly
            if parts[0] in body:
                yield parts[0], unit, body, parts[0]
            continue
        for path, container, key in _expand(body, list(parts), ""):
            yield path, unit, container, key


#: UNIT_FIELDS with each pattern split once.
_PATTERNS: Mapping[str, tuple[tuple[tuple[str, ...], Unit], ...]] = {
    kind: tuple((tuple(pattern.split(".")), unit) for pattern, unit in fields.items())
    for kind, fields in UNIT_FIELDS.items()
}


def _expand(
    node: Any, parts: list[str], prefix: str
) -> Iterator[tuple[str, MutableMapping[str, Any] | list[Any], str | int]]:
    head, rest = parts[0], parts[1:]
    if head == "*":
        if not isinstance(node, list):
            return
        keys: list[str | int] = list(range(len(node)))
    elif isinstance(node, dict) and head in node:
        keys = [head]
    else:
        return
    for key in keys:
        path = f"{prefix}{key}"
        child = node[key]
        if rest:
            yield from _expand(child, rest, path + ".")
        else:
            yield path, node, key
