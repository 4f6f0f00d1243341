"""Live state → spec documents that plan empty against the server they came from.

Each resource is written with the fewest fields that reproduce its canonical config: a
field is left out when leaving it out gives the same desired config (so defaults, derived
defaults and the managed marker do not clutter the files). Durations and sizes come out
in the shortest exact human unit; buckets come out as KeyValue / ObjectStore documents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.errors import Location
from reconciler.identity import INTERNAL_STREAMS
from reconciler.model.buckets import bucket_config, classify_stream
from reconciler.model.normalize import desired_config, live_config
from reconciler.model.state import LiveState, ServerInfo
from reconciler.specs.spec import MANAGED_KEY, SERVER_OWNED_METADATA, Kind, Spec
from reconciler.specs.units import to_human

_LIVE = Location("<live>", 0)
_KEEP = frozenset({"name"})


@dataclass(frozen=True)
class ExportedFile:
    """One file of the export: a stream (or bucket) and its consumers."""

    name: str  # file name, e.g. "stream-ORDERS.yaml"
    documents: tuple[dict[str, Any], ...]


def export_state(live: LiveState) -> list[ExportedFile]:
    """Spec documents for every stream, bucket and consumer on the server."""
    files: list[ExportedFile] = []
    for stream in sorted(live.streams):
        if stream in INTERNAL_STREAMS:
            continue  # the tool's own apply lock
        config = live.streams[stream]
        kind, name = classify_stream(stream, config)
        docs = [_stream_document(kind, name, config, live.server)]
        for (owner, consumer), consumer_config in sorted(live.consumers.items()):
            if owner == stream:
                docs.append(
                    _consumer_document(owner, consumer, consumer_config, config, live.server)
                )
        prefix = {"Stream": "stream", "KeyValue": "kv", "ObjectStore": "objectstore"}[kind]
        files.append(ExportedFile(name=f"{prefix}-{_safe(name)}.yaml", documents=tuple(docs)))
    return files


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def _clean_metadata(config: dict[str, Any]) -> None:
    metadata = {
        k: v
        for k, v in (config.get("metadata") or {}).items()
        if k != MANAGED_KEY and k not in SERVER_OWNED_METADATA
    }
    if metadata:
        config["metadata"] = metadata
    else:
        config.pop("metadata", None)


def _stream_document(
    kind: Kind, name: str, config: Mapping[str, Any], server: ServerInfo
) -> dict[str, Any]:
    if kind != "Stream":
        body = bucket_config(kind, name, config)
    else:
        body = live_config("Stream", config, server)
    _clean_metadata(body)
    body = minimal(kind, name, body, server)
    return {"kind": kind, **to_human(kind, body)}


def _consumer_document(
    stream: str,
    name: str,
    config: Mapping[str, Any],
    stream_config: Mapping[str, Any],
    server: ServerInfo,
) -> dict[str, Any]:
    body = live_config("Consumer", config, server, stream_config=stream_config)
    _clean_metadata(body)
    body.pop("durable_name", None)
    body = minimal("Consumer", name, body, server, stream=stream, stream_config=stream_config)
    body["name"] = name
    return {"kind": "Consumer", "stream": stream, **to_human("Consumer", body)}


def minimal(
    kind: Kind,
    name: str,
    config: Mapping[str, Any],
    server: ServerInfo,
    *,
    stream: str | None = None,
    stream_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``config`` without the fields whose absence yields the same desired config."""

    def desired(body: Mapping[str, Any]) -> dict[str, Any]:
        spec = Spec(kind=kind, name=name, config=dict(body), source=_LIVE, stream=stream)
        return desired_config(spec, server, stream_config=stream_config)

    target = desired(config)
    kept = dict(config)
    for key in list(config):
        if key in _KEEP:
            continue
        trial = {k: v for k, v in kept.items() if k != key}
        if desired(trial) == target:
            kept = trial
    return {"name": name, **{k: v for k, v in kept.items() if k != "name"}}
