"""Snapshot records: live state as JSON Lines, the input of the fleet drift pipeline.

One record per live stream and consumer, the tool's own left out
(``schemas/snapshot.schema.json``)::

    {"env": "eu-prod", "captured_at": "2026-11-22T02:00:00Z", "kind": "Stream",
     "stream": "ORDERS", "name": "ORDERS", "config": {...},
     "server_version": "2.12.3", "api_level": 3}

``config`` is the server's own config object, verbatim: KeyValue and ObjectStore buckets
appear as their ``KV_``/``OBJ_`` streams with kind ``Stream``. ``stream`` is the stream
the resource is or lives in (for a stream, its own name). ``server_version`` and
``api_level`` are optional: snapshots from other tools may leave them out, and the
pipeline then normalises with the newest semantics it knows.

Pure: the caller passes the clock reading; nothing here does I/O beyond writing to a
text stream it is given.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import lru_cache
from typing import Any, TextIO

import orjson

from reconciler.identity import tools_own
from reconciler.model.state import LiveState
from reconciler.model.timestamps import rfc3339
from reconciler.specs.document import MAX_DEPTH

#: Record kinds: buckets are snapshotted as their streams.
RECORD_KINDS = ("Stream", "Consumer")


class BadRecord(ValueError):
    """A snapshot line that is not a valid record; the message says why."""


@dataclass(frozen=True)
class SnapshotRecord:
    """One parsed snapshot line."""

    env: str
    captured_at: datetime  # timezone-aware, UTC
    kind: str  # "Stream" | "Consumer"
    stream: str
    name: str
    config: Mapping[str, Any]
    server_version: str | None = None
    api_level: int | None = None

    @property
    def day(self) -> date:
        """The UTC day of the capture: snapshots are grouped per environment and day."""
        return self.captured_at.date()


def snapshot_records(live: LiveState, *, env: str, captured_at: datetime) -> list[dict[str, Any]]:
    """Every stream and consumer of ``live`` as snapshot records, streams first, sorted;
    never the tool's own (:func:`~reconciler.identity.tools_own`: its apply lock's bucket,
    a backup's temporary mirror, and their consumers), as a backup leaves them out."""
    stamp = rfc3339(captured_at)
    common = {"env": env, "captured_at": stamp}
    server = {"server_version": live.server.version, "api_level": live.server.api_level}
    records = [
        {**common, "kind": "Stream", "stream": name, "name": name, "config": dict(config)} | server
        for name, config in sorted(live.streams.items())
        if not tools_own(name)
    ]
    records += [
        {**common, "kind": "Consumer", "stream": stream, "name": name, "config": dict(config)}
        | server
        for (stream, name), config in sorted(live.consumers.items())
        if not tools_own(stream)
    ]
    return records


def write_jsonl(records: Iterable[Mapping[str, Any]], out: TextIO) -> int:
    """Write one compact JSON object per line; returns the number of lines."""
    count = 0
    for record in records:
        out.write(json.dumps(record, separators=(",", ":"), sort_keys=False))
        out.write("\n")
        count += 1
    return count


#: The fields of a record, checked, in :class:`SnapshotRecord`'s order: what
#: :func:`parse_fields` returns for readers that make no object per line (the fleet job).
Fields = tuple[str, datetime, str, str, str, dict[str, Any], str | None, int | None]
_REQUIRED = ("env", "captured_at", "kind", "name", "config")
_REQUIRED_SET = frozenset(_REQUIRED)


#: A server's config nests a few levels (a source's subject transforms: four); a record
#: nesting deeper is refused as a spec is (``specs.document.MAX_DEPTH``). The planner,
#: normalising and comparing configs, recurses: a record of 600 levels raised
#: RecursionError in the fleet's read, which stopped the job where a bad line is skipped.
NESTED_TOO_DEEP = f"nesting deeper than {MAX_DEPTH} levels"


def _deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` nests deeper than ``limit`` levels (itself the first), walked
    without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        inner = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in inner:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _no_constant(name: str) -> Any:
    """``NaN``, ``Infinity``, ``-Infinity``: no JSON (no server sends them, nor does a
    snapshot written here); taken, they reached summary.json, which was JSON no more."""
    raise BadRecord(f"not valid JSON: {name} is no JSON value")


def parse_record(line: str) -> SnapshotRecord:
    """Parse and check one JSON line; raises :class:`BadRecord` saying what is wrong."""
    return SnapshotRecord(*parse_fields(line))


def parse_fields(line: str) -> Fields:
    """:func:`parse_record`'s fields as a tuple (the same checks, the same errors)."""
    try:
        body = orjson.loads(line)
    except orjson.JSONDecodeError:  # say why the standard way (which also reads what
        try:  # orjson does not: integers beyond 64 bits)
            body = json.loads(line, parse_constant=_no_constant)
        except json.JSONDecodeError as err:
            raise BadRecord(f"not valid JSON: {err.msg} (column {err.colno})") from None
        except RecursionError:  # past orjson's 1,024 levels: the interpreter's stack
            raise BadRecord(NESTED_TOO_DEEP) from None
    if not isinstance(body, dict):
        raise BadRecord(f"a record must be a JSON object, not {type(body).__name__}")
    if line.count("{") + line.count("[") > MAX_DEPTH and _deeper(body, MAX_DEPTH):
        raise BadRecord(NESTED_TOO_DEEP)
    return record_fields(body)


def record_from_json(body: Mapping[str, Any]) -> SnapshotRecord:
    """Check the shape of a decoded record (see ``schemas/snapshot.schema.json``)."""
    return SnapshotRecord(*record_fields(body))


def record_fields(body: Mapping[str, Any]) -> Fields:
    """:func:`record_from_json`'s fields as a tuple."""
    if not _REQUIRED_SET.issubset(body.keys()):
        missing = [k for k in _REQUIRED if k not in body]
        raise BadRecord(f"missing field(s): {', '.join(missing)}")
    env, kind, name = _text(body, "env"), _text(body, "kind"), _text(body, "name")
    if kind not in RECORD_KINDS:
        raise BadRecord(
            f"unknown kind {kind!r} (expected Stream or Consumer; buckets are their streams)"
        )
    stream = name if kind == "Stream" else _text(body, "stream")
    config = body["config"]
    if not isinstance(config, dict):
        raise BadRecord("config must be a JSON object")
    return (
        env,
        _timestamp(body["captured_at"]),
        kind,
        stream,
        name,
        config,
        _optional_version(body.get("server_version")),
        _optional_level(body.get("api_level")),
    )


def _text(body: Mapping[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise BadRecord(f"{key} must be a non-empty string")
    return value


def _timestamp(value: Any) -> datetime:
    if not isinstance(value, str):
        raise BadRecord("captured_at must be an RFC 3339 timestamp string")
    return _moment(value)


@lru_cache(maxsize=1024)
def _moment(value: str) -> datetime:
    """A capture time in UTC (remembered: a snapshot's records share theirs)."""
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:  # no offset given: read as UTC
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)  # OverflowError: out of years 1-9999 in UTC
    except (ValueError, OverflowError):
        raise BadRecord(f"captured_at {value!r} is not an RFC 3339 timestamp") from None


def _optional_version(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value[:1].isdigit():
        raise BadRecord(f"server_version must be a version string like '2.12.3', not {value!r}")
    return value


def _optional_level(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRecord(f"api_level must be a non-negative integer, not {value!r}")
    return value
