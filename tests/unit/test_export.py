"""export_state works a consumer's document out once per shape: the result must be exactly
what working out every consumer on its own gives."""

from __future__ import annotations

from typing import Any

from reconciler.model.state import LiveState, ServerInfo
from reconciler.planning.export import _consumer_document, export_state

SERVER = ServerInfo(version="2.12.4", api_level=2)
STREAM = {
    "name": "ORDERS",
    "subjects": ["orders.>"],
    "retention": "limits",
    "storage": "file",
    "num_replicas": 1,
}


def consumer(name: str, **fields: Any) -> dict[str, Any]:
    base = {
        "name": name,
        "durable_name": name,
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "ack_wait": 30_000_000_000,
        "max_deliver": -1,
        "replay_policy": "instant",
        "max_waiting": 512,
        "max_ack_pending": 1000,
        "num_replicas": 0,
    }
    return {**base, **fields}


def test_consumers_sharing_a_shape_export_as_each_would_alone() -> None:
    consumers = {
        "a": consumer("a"),
        "b": consumer("b"),  # a's shape
        "yes": consumer("yes"),  # a name YAML would read as a boolean
        "123": consumer("123"),
        "slow": consumer("slow", ack_wait=60_000_000_000),
        "slow2": consumer("slow2", ack_wait=60_000_000_000),
        "tagged": consumer("tagged", metadata={"team": "x"}, filter_subjects=["orders.a"]),
        "tagged2": consumer("tagged2", metadata={"team": "x"}, filter_subjects=["orders.a"]),
        "ephemeral": {**consumer("ephemeral"), "durable_name": ""},
        "odd": consumer("odd", durable_name="other"),
    }
    live = LiveState(
        server=SERVER,
        streams={"ORDERS": STREAM},
        consumers={("ORDERS", n): c for n, c in consumers.items()},
    )
    (exported,) = export_state(live)
    documents = {doc["name"]: doc for doc in exported.documents[1:]}
    for name, config in consumers.items():
        alone = _consumer_document("ORDERS", name, config, STREAM, SERVER)
        assert documents[name] == alone
        assert list(documents[name]) == list(alone)  # same key order: same YAML text
    assert documents["slow"]["ack_wait"] != documents["a"].get("ack_wait")
    # Documents of one shape are copies: changing one changes no other.
    documents["tagged"]["metadata"]["team"] = "y"
    documents["tagged"]["filter_subjects"].append("orders.b")
    assert documents["tagged2"]["metadata"] == {"team": "x"}
    assert documents["tagged2"]["filter_subjects"] == ["orders.a"]
