"""Hypothesis strategies for valid spec documents (human units and wire integers mixed)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from reconciler.model.state import ServerInfo

SERVERS = [
    ServerInfo(version="2.10.25", api_level=0),
    ServerInfo(version="2.11.4", api_level=1),
    ServerInfo(version="2.12.3", api_level=2),
    ServerInfo(version="2.15.1", api_level=5),
]

stream_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,9}", fullmatch=True)
texts = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FFF, exclude_categories=("Cs",)),
    max_size=30,
)
durations = st.one_of(
    st.integers(min_value=1, max_value=10**6).map(lambda n: f"{n}s"),
    st.sampled_from(["250ms", "1h", "1h30m", "7d", "2w", "90m"]),
    st.integers(min_value=10**9, max_value=10**16),
)
sizes = st.one_of(
    st.just(-1),
    st.integers(min_value=1, max_value=64).map(lambda n: f"{n}MiB"),
    st.sampled_from(["512KiB", "1GB", "10MB"]),
    st.integers(min_value=1024, max_value=2**26),
)
metadata = st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9.-]{0,8}", fullmatch=True), texts, max_size=3
)

STREAM_FIELDS: dict[str, Any] = {
    "description": texts,
    "max_msgs": st.integers(min_value=-1, max_value=10**9),
    "max_bytes": sizes,
    "max_age": durations,
    "max_msg_size": st.one_of(st.just(-1), st.integers(min_value=1, max_value=2**20)),
    "max_msgs_per_subject": st.integers(min_value=-1, max_value=1000),
    "max_consumers": st.integers(min_value=-1, max_value=100),
    "storage": st.sampled_from(["file", "memory"]),
    "retention": st.sampled_from(["limits", "interest", "workqueue"]),
    "discard": st.sampled_from(["old", "new"]),
    "compression": st.sampled_from(["none", "s2"]),
    "allow_direct": st.booleans(),
    "deny_delete": st.booleans(),
    "deny_purge": st.booleans(),
    "allow_rollup_hdrs": st.booleans(),
    "metadata": metadata,
}

CONSUMER_FIELDS: dict[str, Any] = {
    "description": texts,
    "ack_wait": st.integers(min_value=1, max_value=3600).map(lambda n: f"{n}s"),
    "max_deliver": st.one_of(st.just(-1), st.integers(min_value=1, max_value=100)),
    "max_ack_pending": st.integers(min_value=1, max_value=10_000),
    "deliver_policy": st.sampled_from(["all", "last", "new", "last_per_subject"]),
    "replay_policy": st.sampled_from(["instant", "original"]),
    "max_waiting": st.integers(min_value=1, max_value=1000),
    "metadata": metadata,
}


@st.composite
def stream_document(draw: st.DrawFn, name: str | None = None) -> dict[str, Any]:
    stream = name or draw(stream_names)
    body = draw(st.fixed_dictionaries({}, optional=STREAM_FIELDS))
    if body.get("allow_rollup_hdrs") and body.get("deny_purge"):
        body["deny_purge"] = False  # roll-ups purge: the checks refuse both together
    if body.get("storage") == "memory" and body.get("max_bytes") in (None, -1):
        body["max_bytes"] = "8MiB"  # keep memory streams small on a test server
    return {"kind": "Stream", "name": stream, "subjects": [f"{stream.lower()}.>"], **body}


@st.composite
def consumer_document(draw: st.DrawFn, stream: str) -> dict[str, Any]:
    name = draw(st.from_regex(r"[A-Z][A-Z0-9_]{0,9}", fullmatch=True))
    body = draw(st.fixed_dictionaries({}, optional=CONSUMER_FIELDS))
    if body.get("deliver_policy") == "last_per_subject":
        body["filter_subject"] = f"{stream.lower()}.>"
    return {"kind": "Consumer", "stream": stream, "name": name, "ack_policy": "explicit", **body}


@st.composite
def resource_set(draw: st.DrawFn, max_streams: int = 3) -> list[dict[str, Any]]:
    """Streams with distinct names, each with zero or one consumer."""
    names = draw(st.lists(stream_names, min_size=1, max_size=max_streams, unique=True))
    documents: list[dict[str, Any]] = []
    for name in names:
        stream = draw(stream_document(name))
        documents.append(stream)
        if draw(st.booleans()):
            consumer = draw(consumer_document(name))
            if stream.get("retention") == "workqueue":
                consumer.pop("deliver_policy", None)  # a work queue delivers everything
                consumer.pop("filter_subject", None)
            documents.append(consumer)
    return documents
