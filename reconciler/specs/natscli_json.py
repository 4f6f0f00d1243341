"""The nats CLI's JSON read as specs: a stream or consumer config or info
(``nats stream info -j``, its ``{"config": ...}`` envelope) and the entries of a
``nats backup`` folder (``{type, configuration (base64), checksum}``, the checksum
verified) get the ``kind`` their content shows (:func:`wire_kind`).

This is a spec input wherever specs are read (docs/spec-format.md), so it lives with the
loader; ``reconcile import --from nats-cli`` (:mod:`reconciler.importers.natscli`) is
this loader.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from pathlib import Path
from typing import Any

from reconciler.errors import Problem
from reconciler.locations import Location
from reconciler.specs.document import Document

_BACKUP_KEYS = frozenset({"type", "configuration", "checksum"})
#: A StreamInfo / ConsumerInfo (``nats ... info --json``), or just its ``config`` envelope
#: (``{"config": {...}}``, which the nats CLI reads too).
_INFO_KEYS = frozenset({"created", "state", "delivered", "ack_floor", "num_pending"})
_ENVELOPE_KEYS = frozenset({"config", "stream_name", "name", "ts", "cluster"})
_STREAM_HINTS = frozenset({"retention", "storage", "max_msgs", "discard", "num_replicas"})
_CONSUMER_HINTS = frozenset({"ack_policy", "deliver_policy", "durable_name", "replay_policy"})


def wire_kind(document: Document, name: str, problems: list[Problem]) -> Document:
    """Give a JSON document that is a wire config (nats CLI output, backup file) its
    ``kind``; others unchanged."""
    body = document.body
    if "kind" in body:
        return document
    if body.keys() >= _BACKUP_KEYS:
        return _from_backup(document, name, problems)
    config = body.get("config")
    if isinstance(config, dict) and (body.keys() & _INFO_KEYS or body.keys() <= _ENVELOPE_KEYS):
        stream = body.get("stream_name") if "stream_name" in body else None
        unwrapped = _sub_document(document, "config", config)
        if not stream:
            _consumers_left_in_archive(body, name, document.source, problems)
        return _as_kind(unwrapped, "Consumer" if stream else "Stream", stream, problems)
    if body.keys() & _CONSUMER_HINTS:
        stream = body.get("stream_name")
        rest = {k: v for k, v in body.items() if k != "stream_name"}
        return _as_kind(_replace_body(document, rest), "Consumer", stream, problems)
    if body.keys() & _STREAM_HINTS:
        return _as_kind(document, "Stream", None, problems)
    return document


def _consumers_left_in_archive(
    info: dict[str, Any], name: str, where: Location, problems: list[Problem]
) -> None:
    """``nats account backup`` keeps a stream's consumers inside ``stream.tar.s2`` (an
    S2-compressed archive this tool does not read): say how many were not read, so a
    restore from the specs does not silently lose them."""
    state = info.get("state")
    count = state.get("consumer_count") if isinstance(state, dict) else None
    archive = Path(name).with_name("stream.tar.s2")
    if not isinstance(count, int) or count <= 0 or not archive.exists():
        return
    stream = (info.get("config") or {}).get("name", "?")
    message = (
        f"stream {stream} has {count} consumer(s) inside {archive.name}, which is not read: "
        "declare them as Consumer specs (or export them from a server the backup was "
        "restored to)"
    )
    problems.append(Problem(where, "", message, warning=True))


def _as_kind(document: Document, kind: str, stream: Any, problems: list[Problem]) -> Document:
    head: dict[str, Any] = {"kind": kind}
    if kind == "Consumer":
        if not isinstance(stream, str) or not stream:
            message = "a consumer config does not name its stream: add `stream: STREAM_NAME`"
            problems.append(Problem(document.source, "", message))
        else:
            head["stream"] = stream
    return _replace_body(document, {**head, **document.body})


def _replace_body(document: Document, body: dict[str, Any]) -> Document:
    return Document(body=body, source=document.source, locations=document.locations)


def _sub_document(document: Document, key: str, value: dict[str, Any]) -> Document:
    prefix = key + "."
    locations = {
        path[len(prefix) :]: where
        for path, where in document.locations.items()
        if path.startswith(prefix)
    }
    return Document(body=value, source=document.where(key), locations=locations)


def _from_backup(document: Document, name: str, problems: list[Problem]) -> Document:
    body = document.body
    where = document.where("configuration")
    try:
        raw = base64.b64decode(str(body["configuration"]), validate=True)
        if hashlib.sha256(raw).hexdigest() != body["checksum"]:
            raise ValueError("checksum mismatch: the backup file is damaged")
        inner = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError) as err:
        problems.append(Problem(where, "configuration", f"unreadable backup file: {err}"))
        return document
    flat = Document(body={}, source=where, locations={})
    if body["type"] == "stream" and isinstance(inner, dict):
        return _as_kind(_replace_body(flat, inner), "Stream", None, problems)
    if body["type"] == "consumer" and isinstance(inner, dict):
        config = inner.get("config")
        if isinstance(config, dict):
            return _as_kind(_replace_body(flat, config), "Consumer", inner.get("stream"), problems)
    problems.append(Problem(where, "type", f"unsupported backup entry type {body['type']!r}"))
    return document
