"""KeyValue and ObjectStore buckets are streams: the mapping both ways.

``kv_stream_config`` / ``object_stream_config`` turn a bucket spec (the client libraries'
bucket fields) into the stream config the Go client (nats.go ``jetstream/kv.go``,
``jetstream/object.go``; the nats CLI creates buckets through it) would create;
``bucket_config`` reads a ``KV_``/``OBJ_`` stream config back as bucket fields (for
export); ``classify_stream`` tells what a live stream is (the names themselves live in
``reconciler.identity``).

Other clients set a few stream fields of a bucket differently (:data:`CLIENT_FIELDS`):
nats-py leaves ``allow_direct`` off unless asked (``direct=True``) and turns
``allow_msg_ttl`` on for every KeyValue bucket (nats-py 2.11+); the JavaScript client
(nats.js 3.x) leaves ``deny_delete`` off; older Go clients made buckets without direct
gets. A bucket spec may declare those fields under their stream names, so such a bucket
is still a bucket, exported and planned without a difference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from reconciler.identity import (
    KV_PREFIX,
    Kind,
    ResourceRef,
    kv_subject,
    object_subjects,
    stream_of,
)
from reconciler.model.defaults import default_duplicate_window

#: Bucket fields copied to the stream under the same name.
_SHARED: Final = ("description", "storage", "placement", "metadata")
#: Stream fields a bucket spec may declare (under the stream's own names) because some
#: client sets them differently from the Go client, by kind.
CLIENT_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    "KeyValue": ("allow_direct", "allow_msg_ttl", "discard", "deny_delete"),
    "ObjectStore": ("allow_direct", "discard"),
}


def _compression(value: Any) -> str:
    if value is True or value == "s2":
        return "s2"
    return "none"


def _unlimited(value: Any) -> int:
    return -1 if not value else int(value)


def _common(bucket: Mapping[str, Any]) -> dict[str, Any]:
    config = {key: bucket[key] for key in _SHARED if bucket.get(key) is not None}
    config["num_replicas"] = int(bucket.get("replicas") or 1)
    config["max_bytes"] = _unlimited(bucket.get("max_bytes"))
    config["max_age"] = int(bucket.get("ttl") or 0)
    config["compression"] = _compression(bucket.get("compression"))
    config["discard"] = bucket.get("discard") or "new"
    config["allow_rollup_hdrs"] = True
    config["allow_direct"] = bucket.get("allow_direct") is not False
    return config


def kv_stream_config(name: str, bucket: Mapping[str, Any]) -> dict[str, Any]:
    """The ``KV_<name>`` stream config of a KeyValue bucket spec."""
    config = _common(bucket)
    config.update(
        name=stream_of("KeyValue", name),
        subjects=[kv_subject(name)],
        max_msgs_per_subject=int(bucket.get("history") or 1),
        max_msg_size=_unlimited(bucket.get("max_value_size")),
        max_msgs=-1,
        max_consumers=-1,
        deny_delete=bucket.get("deny_delete") is not False,
        duplicate_window=default_duplicate_window(config["max_age"]),
    )
    if bucket.get("republish") is not None:
        config["republish"] = bucket["republish"]
    if bucket.get("mirror"):
        # A mirror takes no writes of its own: no subjects, and direct gets answered for
        # the origin's subjects (nats.go jetstream/kv.go).
        del config["subjects"]
        config["mirror"] = _kv_source(bucket["mirror"], name, mirror=True)
        config["mirror_direct"] = True
    elif bucket.get("sources"):
        config["sources"] = [_kv_source(source, name) for source in bucket["sources"]]
    if bucket.get("allow_msg_ttl"):
        config["allow_msg_ttl"] = True
    if bucket.get("limit_marker_ttl"):
        config["allow_msg_ttl"] = True
        config["subject_delete_marker_ttl"] = int(bucket["limit_marker_ttl"])
    return config


_DOMAIN_API = re.compile(r"^\$JS\.([^.]+)\.API\Z")


def _kv_source(source: Mapping[str, Any], bucket: str, *, mirror: bool = False) -> dict[str, Any]:
    """A bucket source as the stream source the clients make of it: the ``KV_`` stream,
    a domain as its API prefix, and (sources) the origin's key subjects moved into this
    bucket's, unless it is the same bucket in another account."""
    wire = {k: v for k, v in source.items() if k not in ("name", "domain")}
    origin = str(source["name"]).removeprefix(KV_PREFIX)
    wire["name"] = stream_of("KeyValue", origin)
    if source.get("domain"):
        wire["external"] = {"api": f"$JS.{source['domain']}.API"}
    if not mirror and (source.get("external") is None or origin != bucket):
        wire["subject_transforms"] = [{"src": kv_subject(origin), "dest": kv_subject(bucket)}]
    return wire


def _bucket_source(wire: Mapping[str, Any], bucket: str) -> dict[str, Any]:
    """A ``KV_`` stream's source read back as the bucket source that makes it."""
    source = {k: v for k, v in wire.items() if k not in ("name", "external", "subject_transforms")}
    origin = str(wire.get("name", "")).removeprefix(KV_PREFIX)
    source = {"name": origin, **source}
    external = wire.get("external") or {}
    match = _DOMAIN_API.match(str(external.get("api", "")))
    if match and not external.get("deliver"):
        source["domain"] = match.group(1)
    elif external:
        source["external"] = dict(external)
    made = [{"src": kv_subject(origin), "dest": kv_subject(bucket)}]
    transforms = wire.get("subject_transforms")
    if transforms and transforms != made:
        source["subject_transforms"] = transforms
    return source


def object_stream_config(name: str, bucket: Mapping[str, Any]) -> dict[str, Any]:
    """The ``OBJ_<name>`` stream config of an ObjectStore bucket spec."""
    config = _common(bucket)
    config.update(name=stream_of("ObjectStore", name), subjects=object_subjects(name))
    return config


def bucket_stream_config(kind: Kind, name: str, bucket: Mapping[str, Any]) -> dict[str, Any]:
    if kind == "KeyValue":
        return kv_stream_config(name, bucket)
    return object_stream_config(name, bucket)


#: Which bucket field needs which stream field (for version checks of bucket specs).
BUCKET_FIELD_NEEDS: Final[Mapping[str, str]] = {"limit_marker_ttl": "allow_msg_ttl"}


def classify_stream(name: str, config: Mapping[str, Any]) -> tuple[Kind, str]:
    """What a live stream is: ``("KeyValue", bucket)``, ``("ObjectStore", bucket)`` or a Stream."""
    ref = ResourceRef.of_stream(name, config)
    return (ref.kind, ref.name)


def _positive(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    return int(value) if isinstance(value, int) and value > 0 else None


def _client_fields(kind: Kind, stream: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`CLIENT_FIELDS` of a bucket's stream that differ from what the Go client
    sets (``allow_msg_ttl`` only where ``limit_marker_ttl`` does not imply it)."""
    fields: dict[str, Any] = {}
    if stream.get("allow_direct") is False:
        fields["allow_direct"] = False
    if stream.get("discard", "new") != "new":
        fields["discard"] = stream["discard"]
    if stream.get("allow_msg_ttl") and not stream.get("subject_delete_marker_ttl"):
        fields["allow_msg_ttl"] = True
    if not stream.get("deny_delete", False):  # nats.js 3.x: the Go client sets it true
        fields["deny_delete"] = False
    return {key: value for key, value in fields.items() if key in CLIENT_FIELDS[kind]}


def bucket_config(kind: Kind, name: str, stream: Mapping[str, Any]) -> dict[str, Any]:
    """Bucket fields (wire units) of a ``KV_``/``OBJ_`` stream config, defaults left out."""
    bucket: dict[str, Any] = {"name": name}
    if stream.get("description"):
        bucket["description"] = stream["description"]
    if kind == "KeyValue":
        history = _positive(stream, "max_msgs_per_subject")
        if history and history > 1:
            bucket["history"] = history
    optional = {
        "ttl": _positive(stream, "max_age"),
        "max_bytes": _positive(stream, "max_bytes"),
        "max_value_size": _positive(stream, "max_msg_size") if kind == "KeyValue" else None,
    }
    bucket.update({key: value for key, value in optional.items() if value is not None})
    if stream.get("storage", "file") != "file":
        bucket["storage"] = stream["storage"]
    if int(stream.get("num_replicas") or 1) > 1:
        bucket["replicas"] = int(stream["num_replicas"])
    if stream.get("compression", "none") != "none":
        bucket["compression"] = True
    for key in ("placement", "metadata", *(("republish",) if kind == "KeyValue" else ())):
        if stream.get(key):
            bucket[key] = stream[key]
    if kind == "KeyValue" and stream.get("subject_delete_marker_ttl"):
        bucket["limit_marker_ttl"] = stream["subject_delete_marker_ttl"]
    bucket.update(_client_fields(kind, stream))
    if kind == "KeyValue" and stream.get("mirror"):
        bucket["mirror"] = _bucket_source(stream["mirror"], name)
    if kind == "KeyValue" and stream.get("sources"):
        bucket["sources"] = [_bucket_source(s, name) for s in stream["sources"]]
    return bucket
