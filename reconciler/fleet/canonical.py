"""Snapshot records as the planner reads them: the server a record came from, and a row.

No rule lives here; every function delegates to the engine. A record keeps its config
verbatim (the planner normalises it, as it does a server's answer); it is normalised
once here only to refuse, with its file and line, a config the engine cannot read.
Nothing here imports pyspark, so it is tested without a JVM.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from reconciler.identity import ResourceRef
from reconciler.model.defaults import newest_server
from reconciler.model.normalize import is_managed, live_config
from reconciler.model.state import ServerInfo
from reconciler.planning.snapshot import BadRecord, SnapshotRecord

#: API level → the first release with it ($JS.API.INFO api.level, JETSTREAM.md).
_RELEASE_OF_LEVEL = {1: "2.11.0", 2: "2.12.0", 3: "2.12.5", 4: "2.14.0"}

LiveRow = tuple[str, str, str, str, Mapping[str, Any], bool]


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
    """``(stream_name, consumer, kind, name, config verbatim, managed)`` of a record.

    ``consumer`` is ``""`` for streams; ``kind``/``name`` are what the resource is called
    when no spec declares it (``KV_x`` → KeyValue ``x``).
    """
    server = server_info(record.server_version, record.api_level)
    try:
        live_config(record.kind, record.config, server)
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise BadRecord(f"config cannot be normalised: {err}") from None
    managed = is_managed(record.config)
    if record.kind == "Consumer":
        return (record.stream, record.name, "Consumer", record.name, record.config, managed)
    ref = ResourceRef.of_stream(record.name, record.config)
    return (record.name, "", ref.kind, ref.name, record.config, managed)
