"""Snapshot records as the planner reads them: the server a record came from, and a row.

No rule lives here; every function delegates to the engine. A record keeps its config
verbatim (the planner normalises it, as it does a server's answer); it is normalised
once here only to refuse, with its file and line, a config the engine cannot read.
Nothing here imports pyspark, so it is tested without a JVM.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import orjson

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


_LONG_NUMBER = re.compile(r"\d{19}")

#: How many readable configs a worker remembers (digests: 16 bytes each).
READABLE_MEMO = 200_000
_readable: set[bytes] = set()


def config_text(config: Mapping[str, Any]) -> str:
    """A record's config as compact JSON: the form rows carry and memos compare."""
    try:
        return orjson.dumps(config).decode()
    except orjson.JSONEncodeError:  # an integer beyond 64 bits: the slow, exact way
        return json.dumps(config, separators=(",", ":"))


def config_from_text(text: str) -> dict[str, Any]:
    """A config back from :func:`config_text`'s form: what ``json.loads`` gives, faster
    (orjson), but the standard way where orjson would differ: a number of 19 digits or
    more (orjson reads an integer beyond 64 bits as a float), NaN (orjson refuses it)."""
    if _LONG_NUMBER.search(text) is None:
        try:
            config = orjson.loads(text)
        except orjson.JSONDecodeError:
            config = json.loads(text)
    else:
        config = json.loads(text)
    assert isinstance(config, dict)
    return config


def live_row(record: SnapshotRecord, text: str | None = None) -> LiveRow:
    """``(stream_name, consumer, kind, name, config verbatim, managed)`` of a record.

    ``consumer`` is ``""`` for streams; ``kind``/``name`` are what the resource is called
    when no spec declares it (``KV_x`` → KeyValue ``x``). ``text``: the config as
    :func:`config_text` writes it; a config already found readable on the same server
    (the same resource on another day, nearly always) is not normalised again.
    """
    server = server_info(record.server_version, record.api_level)
    text = config_text(record.config) if text is None else text
    readable(record.kind, record.config, server, text)
    managed = is_managed(record.config)
    stream_name, consumer = placed(record.kind, record.stream, record.name)
    if record.kind == "Consumer":
        return (stream_name, consumer, "Consumer", record.name, record.config, managed)
    ref = ResourceRef.of_stream(record.name, record.config)
    return (stream_name, consumer, ref.kind, ref.name, record.config, managed)


def placed(kind: str, stream: str, name: str) -> tuple[str, str]:
    """``(stream_name, consumer)`` of a record: the stream it is or lives in, and the
    consumer's name (``""`` for a stream)."""
    return (stream, name) if kind == "Consumer" else (name, "")


def readable(kind: str, config: Mapping[str, Any], server: ServerInfo, text: str) -> None:
    """Refuse (:class:`BadRecord`) a config the engine cannot normalise on ``server``;
    ``text`` is the config as :func:`config_text` writes it: a config found readable
    once is remembered (by digest) and not normalised again."""
    digest = hashlib.blake2b(
        f"{kind}\0{server.version}\0{server.api_level}\0{text}".encode(), digest_size=16
    ).digest()
    if digest in _readable:
        return
    try:
        live_config(kind, config, server)
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise BadRecord(f"config cannot be normalised: {err}") from None
    if len(_readable) >= READABLE_MEMO:
        _readable.clear()
    _readable.add(digest)
