"""export_state works a stream's and a consumer's document out once per shape: the result
must be exactly what working out every resource on its own gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import SERVERS, consumer_document, stream_document

from reconciler.locations import Location
from reconciler.model.normalize import desired_config
from reconciler.model.state import LiveState, ServerInfo
from reconciler.planning.export import (
    _consumer_document,
    _stream_document,
    export_state,
    import_files,
    minimal,
)
from reconciler.planning.export_text import _Dumper, _inert, dump
from reconciler.specs.document import Document
from reconciler.specs.spec import CLAIM_KEY, MANAGED_KEY, MANAGED_VALUE, Spec
from reconciler.specs.units import to_human
from reconciler.specs.validate import validate_documents

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


# Streams beyond the random strategy's fields: the settings whose defaults other fields
# decide (sources, sealing, TTL markers, republish) and inherited consumer limits.
STREAM_EXTRAS: list[dict[str, Any]] = [
    {},
    {"consumer_limits": {"max_ack_pending": 7, "inactive_threshold": "1h"}},
    {"sources": [{"name": "UPSTREAM"}], "max_age": "1h"},
    {"sealed": True},
    {"subject_delete_marker_ttl": "5m", "allow_msg_ttl": True},
    {"republish": {"dest": "copy.>"}, "duplicate_window": 0},
]


def _wire(documents: list[dict[str, Any]]) -> list[Spec]:
    """Valid specs; the cross-resource checks (work-queue filters, sources' streams) are
    not what these tests are about."""
    return validate_documents(
        [Document(body=d, source=Location("t.yaml", i + 1)) for i, d in enumerate(documents)],
        cross_checks=False,
    )


def _shaped_cases(test: Callable[..., None]) -> Callable[..., None]:
    """``test`` given random streams, consumers, stream settings and a server (the
    shape tests' cases)."""
    cases = given(
        st.lists(stream_document("S"), min_size=1, max_size=3),
        st.lists(consumer_document("S"), min_size=1, max_size=2),
        st.sampled_from(STREAM_EXTRAS),
        st.sampled_from(SERVERS),
    )
    chosen = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    return chosen(cases(test))


def _shaped(
    streams: list[dict[str, Any]], consumers: list[dict[str, Any]], extra: dict[str, Any]
) -> list[dict[str, Any]]:
    """Documents sharing shapes: each random stream four times, twice with subjects of
    its own (one shape, each described in its own words), once listening on its own name
    (never shared), and once without the extra settings (another shape; with other
    consumer limits, its consumers are another shape too); under each, a consumer with
    its limits set explicitly and every random consumer as twins, alike and each
    filtering and described alone."""
    documents: list[dict[str, Any]] = []
    for i, stream in enumerate(streams):
        for copy in ("A", "B", "C", "D"):
            name = f"S{i}{copy}"
            body = {**stream, "name": name, "subjects": [f"s{i}{copy.lower()}.>"]}
            if copy != "D":
                body.update(extra)
            if copy in ("A", "B"):  # one shape, each described in its own words
                body["description"] = f"the {copy} stream"
            if copy == "C":
                del body["subjects"]
            documents.append(body)
            # The limits' values set explicitly: the same raw config under each stream,
            # but left out of the document only where the stream's limits imply them.
            explicit = {"ack_policy": "explicit", "inactive_threshold": "1h", "max_ack_pending": 7}
            documents.append({"kind": "Consumer", **explicit, "stream": name, "name": "L"})
            for j, consumer in enumerate(consumers):
                shape = {k: v for k, v in consumer.items() if k != "filter_subject"}
                if body.get("retention") == "workqueue":
                    shape.pop("deliver_policy", None)
                for twin in ("x", "y"):
                    documents.append({**shape, "stream": name, "name": f"C{j}{twin}"})
                for twin in ("f", "g"):  # of one shape, each filtering and described alone
                    own = {"filter_subject": f"s{i}.{twin}", "description": f"about {twin}"}
                    documents.append({**shape, **own, "stream": name, "name": f"C{j}{twin}"})
    return documents


@_shaped_cases
def test_streams_and_consumers_sharing_a_shape_export_as_each_would_alone(
    streams: list[dict[str, Any]],
    consumers: list[dict[str, Any]],
    extra: dict[str, Any],
    server: ServerInfo,
) -> None:
    """export_state works a stream's document out once per shape (its config less name
    and subjects) and a consumer's once per shape and inherited limits, across streams:
    every document must be exactly what working it out alone gives, in the same key
    order (the same YAML text). Each random stream comes four times: twice with
    subjects of its own (one shape), once listening on its own name (never shared), and
    once without the extra settings (another shape; with other consumer limits, its
    consumers are another shape too)."""
    specs = _wire(_shaped(streams, consumers, extra))
    live_streams = {s.name: desired_config(s, server) for s in specs if s.kind == "Stream"}
    live_consumers = {
        (s.stream_name, s.name): desired_config(
            s, server, stream_config=live_streams[s.stream_name]
        )
        for s in specs
        if s.kind == "Consumer"
    }
    live = LiveState(server=server, streams=live_streams, consumers=live_consumers)
    exported = {f.name: f.documents for f in export_state(live)}
    assert len(exported) == len(live_streams)
    for name, config in live_streams.items():
        head, *rest = exported[f"stream-{name}.yaml"]
        alone = _stream_document("Stream", name, config, server)
        assert (head, list(head)) == (alone, list(alone))
        for doc in rest:
            raw = live_consumers[(name, doc["name"])]
            by_itself = _consumer_document(name, doc["name"], raw, config, server)
            assert (doc, list(doc)) == (by_itself, list(by_itself))


def test_documents_of_one_shape_are_copies() -> None:
    streams = {
        name: {**STREAM, "name": name, "subjects": [f"{name.lower()}.>"], "metadata": {"t": "x"}}
        for name in ("A", "B")
    }
    consumers = {(s, "c"): consumer("c", metadata={"team": "x"}) for s in streams}
    live = LiveState(server=SERVER, streams=streams, consumers=consumers)
    a, b = export_state(live)
    a.documents[0]["metadata"]["t"] = "y"
    a.documents[0]["subjects"].append("more")
    a.documents[1]["metadata"]["team"] = "y"
    assert b.documents[0]["metadata"] == {"t": "x"} and b.documents[0]["subjects"] == ["b.>"]
    assert b.documents[1]["metadata"] == {"team": "x"} and b.documents[1]["stream"] == "B"


def test_the_pulumi_providers_claim_is_never_exported() -> None:
    """The claim (``CLAIM_KEY``) is the tool's own record, like the managed-by marker."""
    tool = {MANAGED_KEY: MANAGED_VALUE, CLAIM_KEY: "c1", "_nats.ver": "2.12.4"}
    stream = {**STREAM, "metadata": {**tool, "team": "x"}}
    live = LiveState(
        server=SERVER,
        streams={"ORDERS": stream},
        consumers={("ORDERS", "c"): consumer("c", metadata=tool)},
    )
    (exported,) = export_state(live)
    assert exported.documents[0]["metadata"] == {"team": "x"}
    assert "metadata" not in exported.documents[1]


def test_the_schema_header_names_the_installed_release_not_a_branch() -> None:
    from importlib import metadata

    from reconciler.planning.export import ExportedFile
    from reconciler.planning.export_text import file_text

    text = file_text(ExportedFile("s.yaml", ({"kind": "Stream", "name": "S"},)), command="export")

    header = text.splitlines()[0]
    release = metadata.version("jetstream-gitops")
    assert header.endswith(f"/v{release}/schemas/document.schema.json"), header
    assert "/main/" not in header


def _imported_alone(specs: list[Spec], server: ServerInfo) -> dict[str, list[dict[str, Any]]]:
    """What ``import_files`` gives each resource working it out alone (its loop before
    documents were worked out once per shape)."""
    streams = {s.name: s for s in specs if s.kind == "Stream"}
    out: dict[str, list[dict[str, Any]]] = {}
    for name, stream in streams.items():
        body = minimal(stream.kind, stream.name, stream.config, server)
        docs = [{"kind": stream.kind, **to_human(stream.kind, body)}]
        stream_config = desired_config(stream, server)
        for spec in sorted((s for s in specs if s.stream == name), key=lambda s: s.name):
            config = {k: v for k, v in spec.config.items() if k != "durable_name"}
            body = minimal(
                "Consumer", spec.name, config, server, stream=name, stream_config=stream_config
            )
            docs.append({"kind": "Consumer", "stream": name, **to_human("Consumer", body)})
        out[name] = docs
    return out


@_shaped_cases
def test_imported_resources_sharing_a_shape_import_as_each_would_alone(
    streams: list[dict[str, Any]],
    consumers: list[dict[str, Any]],
    extra: dict[str, Any],
    server: ServerInfo,
) -> None:
    """import_files works a stream's document out once per shape (its declared config
    less name and subjects) and a consumer's once per shape and inherited limits, as
    export does: every document must be what working it out alone gives, in the same key
    order (the same YAML text), and a copy of no other."""
    specs = _wire(_shaped(streams, consumers, extra))
    imported = {f.name: f.documents for f in import_files(specs, server)}
    alone = _imported_alone(specs, server)
    assert len(imported) == len(alone)
    for name, docs in alone.items():
        got = imported[f"stream-{name}.yaml"]
        assert [(d, list(d)) for d in got] == [(d, list(d)) for d in docs]
    # Documents of one shape are copies: changing one file's changes no other's.
    for doc in imported["stream-S0A.yaml"]:
        doc.setdefault("metadata", {})["t"] = "changed"
        for value in doc.values():
            if isinstance(value, list):
                value.append("changed")
    for name, docs in alone.items():
        if name != "S0A":
            got = imported[f"stream-{name}.yaml"]
            assert [(d, list(d)) for d in got] == [(d, list(d)) for d in docs]


_BUCKET_FIELDS: dict[str, Any] = {
    "description": st.sampled_from(["", "a bucket", "KV_B0A"]),
    "ttl": st.sampled_from([0, "1h", "2m", 3_600_000_000_000]),
    "max_bytes": st.sampled_from([-1, 0, "1MiB", 4096]),
    "storage": st.sampled_from(["file", "memory"]),
    "replicas": st.sampled_from([1, 3]),
    "compression": st.booleans(),
    "metadata": st.sampled_from([{}, {"team": "x"}]),
    "placement": st.sampled_from([{"cluster": "c1"}, {"tags": ["a"]}]),
    "allow_direct": st.booleans(),
    "discard": st.sampled_from(["old", "new"]),
    "lifecycle": st.just({"prevent_destroy": True}),
}
_KV_FIELDS: dict[str, Any] = {
    **_BUCKET_FIELDS,
    "allow_msg_ttl": st.booleans(),
    "deny_delete": st.booleans(),
    "history": st.sampled_from([1, 5, 64]),
    "max_value_size": st.sampled_from([-1, 1024]),
    "republish": st.sampled_from([{"dest": "copy.>"}, {"src": "$KV.>", "dest": "c.>"}]),
}


@st.composite
def bucket_document(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["KeyValue", "ObjectStore"]))
    fields = _KV_FIELDS if kind == "KeyValue" else _BUCKET_FIELDS
    return {"kind": kind, **draw(st.fixed_dictionaries({}, optional=fields))}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(bucket_document(), min_size=1, max_size=3), st.sampled_from(SERVERS))
def test_imported_buckets_sharing_a_shape_import_as_each_would_alone(
    buckets: list[dict[str, Any]], server: ServerInfo
) -> None:
    """import_files works a bucket's document out once per shape (its declared config
    less its name, which decides only its stream's name and subjects): every document
    must be what working it out alone gives, key order included, and a copy of no other.
    Each random bucket comes under three names (one shape) and, a KeyValue bucket, with
    a mirror and with sources of its own (whose subject transforms its name decides)."""
    documents: list[dict[str, Any]] = []
    for i, bucket in enumerate(buckets):
        for copy in ("a", "b", "c"):
            documents.append({**bucket, "name": f"b{i}{copy}"})
        if bucket["kind"] == "KeyValue":
            documents.append({**bucket, "name": f"m{i}", "mirror": {"name": "origin"}})
            for copy in ("x", "y"):
                sources = [{"name": f"s{i}{copy}"}, {"name": "other", "domain": "hub"}]
                documents.append({**bucket, "name": f"s{i}{copy}", "sources": sources})
    specs = _wire(documents)
    imported = {f.name: f.documents for f in import_files(specs, server)}
    assert len(imported) == len(specs)
    prefix = {"KeyValue": "kv", "ObjectStore": "objectstore"}
    for spec in specs:
        body = minimal(spec.kind, spec.name, spec.config, server)
        alone = {"kind": spec.kind, **to_human(spec.kind, body)}
        (got,) = imported[f"{prefix[spec.kind]}-{spec.name}.yaml"]
        assert (got, list(got)) == (alone, list(alone))
    # Documents of one shape are copies: changing one file's changes no other's.
    (first,) = imported[f"{prefix[specs[0].kind]}-b0a.yaml"]
    first.setdefault("metadata", {})["team"] = "changed"
    first.setdefault("placement", {})["tags"] = ["changed"]
    for name in ("b0b", "b0c"):
        (got,) = imported[f"{prefix[specs[0].kind]}-{name}.yaml"]
        assert got.get("metadata", {}).get("team") != "changed"
        assert got.get("placement", {}).get("tags") != ["changed"]


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.sampled_from(["yes", "~", "0x1f", "1e3", "::error::x", "a\nb", "##[x", "- x", "a: b"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.dictionaries(st.text(), _JSON, max_size=5), min_size=1, max_size=3))
def test_the_export_text_is_what_pyyaml_s_representer_writes(
    documents: list[dict[str, Any]],
) -> None:
    """dump() makes the nodes of plain JSON values itself: the text must be byte for
    byte what PyYAML's SafeRepresenter (with the export's string rule) writes, for any
    value, and a list met twice in a document is still an anchor and an alias."""
    shared = ["a", 1]
    for docs in (tuple(documents), ({"kind": "Stream", "a": shared, "b": shared},)):
        text = dump(docs)

        class Plain(_Dumper):  # type: ignore[misc,valid-type]
            def represent(self, data: Any) -> None:
                yaml.representer.BaseRepresenter.represent(self, data)

        plain = yaml.dump_all(
            docs,
            Dumper=Plain,
            sort_keys=False,
            default_flow_style=False,
            allow_unicode=True,
            width=2**31 - 1,
        )
        assert text == _inert(plain)
    assert "&id001" in text
