"""What the Spark workers run on each row: the CLI's own normalise, classify and diff.

No rule lives here; every function delegates to the engine (``reconciler.normalize``,
``reconciler.buckets``, ``reconciler.diff``, ``reconciler.drift.redact``) and only
adapts rows (JSON text in, JSON text out). Nothing here imports pyspark, so it is
tested without a JVM and shipped to workers by reference.

Resources are matched the way ``reconciler.plan`` matches them: by the JetStream stream
name and, for consumers, the consumer name. A live stream is called a KeyValue or
ObjectStore bucket by ``reconciler.buckets.classify_stream`` only when no spec declares
it (a declared bucket keeps its declared kind).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from reconciler import defaults
from reconciler.buckets import classify_stream
from reconciler.diff import diff_configs, replace_reasons
from reconciler.drift import redact
from reconciler.normalize import is_managed, live_config
from reconciler.snapshot import BadRecord, SnapshotRecord
from reconciler.state import ServerInfo

#: API level → the first release with it ($JS.API.INFO api.level, JETSTREAM.md).
_RELEASE_OF_LEVEL = {1: "2.11.0", 2: "2.12.0", 3: "2.12.5", 4: "2.14.0"}

LiveRow = tuple[str, str, str, str, dict[str, Any], bool]


def newest_server() -> ServerInfo:
    """The newest semantics the field tables know: used when a snapshot omits the server."""
    tables = (*defaults.STREAM_FIELDS.values(), *defaults.CONSUMER_FIELDS.values())
    since = max(entry.since for entry in tables)
    level = max(entry.api_level for entry in tables)
    return ServerInfo(version=".".join(map(str, since)), api_level=level)


@lru_cache(maxsize=256)
def server_info(version: str | None, api_level: int | None) -> ServerInfo:
    """The server a snapshot was read from (see ``schemas/snapshot.schema.json``)."""
    if version is None and api_level is None:
        return newest_server()
    if version is None:
        known = max((lvl for lvl in _RELEASE_OF_LEVEL if lvl <= (api_level or 0)), default=0)
        version = _RELEASE_OF_LEVEL.get(known, "2.10.0")
    return ServerInfo(version=version, api_level=api_level or 0)


def live_row(record: SnapshotRecord) -> LiveRow:
    """``(stream_name, consumer, kind, name, canonical config, managed)`` of a record.

    ``consumer`` is ``""`` for streams; ``kind``/``name`` are what the resource is called
    when no spec declares it (``KV_x`` → KeyValue ``x``).
    """
    server = server_info(record.server_version, record.api_level)
    try:
        canonical = live_config(record.kind, record.config, server)
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise BadRecord(f"config cannot be normalised: {err}") from None
    managed = is_managed(record.config)
    if record.kind == "Consumer":
        return (record.stream, record.name, "Consumer", record.name, canonical, managed)
    kind, name = classify_stream(record.name, record.config)
    return (record.name, "", kind, name, canonical, managed)


def to_json(value: Any) -> str:
    """Canonical JSON text: sorted keys, compact."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=4096)
def redacted_json(text: str | None) -> str | None:
    """A whole config as JSON text with secret-looking values replaced."""
    return None if text is None else to_json(redact(json.loads(text)))


FieldRow = tuple[str, str, str]


@lru_cache(maxsize=4096)
def compare(
    kind: str, desired: str, live: str, version: str | None, api_level: int | None
) -> tuple[bool, tuple[FieldRow, ...]]:
    """``(replace needed, ((field, desired JSON, live JSON), ...))`` of a matched pair.

    The same ``diff_configs`` / ``replace_reasons`` the plan uses; values redacted as the
    drift report does. Memoised: a resource usually looks the same day after day.
    """
    want: Mapping[str, Any] = json.loads(desired)
    have: Mapping[str, Any] = json.loads(live)
    changes = diff_configs(want, have)
    if not changes:
        return (False, ())
    server = server_info(version, api_level)
    replaced = kind != "Consumer" and bool(replace_reasons(kind, want, have, server))
    rows = tuple(
        (
            c.path,
            to_json(redact(c.after, path=c.path)),
            to_json(redact(c.before, path=c.path)),
        )
        for c in changes
    )
    return (replaced, rows)
