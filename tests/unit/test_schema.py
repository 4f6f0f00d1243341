"""The JSON Schemas, their located error messages, and documents becoming wire-unit specs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from reconciler.errors import SpecError
from reconciler.locations import Location
from reconciler.specs.document import Document
from reconciler.specs.fields import UNIT_FIELDS
from reconciler.specs.loader import load_documents
from reconciler.specs.schema import SCHEMA_FILES, quick_check, schema, validator
from reconciler.specs.units import DURATION_PATTERN, SIZE_PATTERN
from reconciler.specs.validate import load_specs, validate_documents

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SETS = ["shop", "workqueue", "buckets"]
FIELD_NAMES = sorted(
    {key for kind in ("Stream", "Consumer", "KeyValue") for key in schema(kind)["properties"]}
)


def doc(body: dict[str, Any], **lines: int) -> Document:
    locations = {
        path.replace("__", "."): Location("spec.yaml", line) for path, line in lines.items()
    }
    return Document(body=body, source=Location("spec.yaml", 1), locations=locations)


def problems(*bodies: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        validate_documents([doc(b) for b in bodies])
    return [str(p) for p in caught.value.problems]


@pytest.mark.parametrize("key", sorted(SCHEMA_FILES))
def test_every_schema_is_valid_draft_2020_12_with_an_id(key: str) -> None:
    raw = schema(key)
    Draft202012Validator.check_schema(raw)
    assert raw["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert raw["$id"] == SCHEMA_FILES[key]
    if key != "document":
        assert raw["additionalProperties"] is False


def test_unit_patterns_in_the_schema_are_those_of_the_unit_parser() -> None:
    defs = schema("document")["$defs"]
    assert defs["duration"]["anyOf"][1]["pattern"] == DURATION_PATTERN
    assert defs["size"]["anyOf"][1]["pattern"] == SIZE_PATTERN


def _unit_refs(node: Any, path: str = "") -> dict[str, str]:
    """Schema property paths that reference a duration or size definition."""
    found: dict[str, str] = {}
    if isinstance(node, dict):
        ref = node.get("$ref", "")
        for unit in ("duration", "size"):
            if ref.endswith(f"/{unit}") or ref.endswith(f"/{unit}32"):
                found[path] = unit
        for key, child in node.get("properties", {}).items():
            found.update(_unit_refs(child, f"{path}.{key}" if path else key))
        if "items" in node:
            found.update(_unit_refs(node["items"], f"{path}.*"))
    return found


@pytest.mark.parametrize("kind", ["Stream", "Consumer", "KeyValue", "ObjectStore"])
def test_the_unit_field_table_matches_the_schema(kind: str) -> None:
    assert _unit_refs(schema(kind)) == dict(UNIT_FIELDS[kind])


@pytest.mark.parametrize("example", EXAMPLE_SETS)
def test_every_example_document_matches_the_document_schema(example: str) -> None:
    documents = load_documents([ROOT / "examples" / example])
    assert documents
    for document in documents:
        errors = list(validator("document").iter_errors(document.body))
        assert errors == [], f"{document.source}: {errors[0].message if errors else ''}"


@pytest.mark.parametrize("example", EXAMPLE_SETS)
def test_every_example_set_validates(example: str) -> None:
    assert load_specs([ROOT / "examples" / example])


def test_example_files_point_editors_at_the_schema() -> None:
    for path in sorted((ROOT / "examples").glob("*/*.yaml")):
        if path.parent.name in EXAMPLE_SETS:
            first = path.read_text(encoding="utf-8").splitlines()[0]
            assert first == "# yaml-language-server: $schema=../../schemas/document.schema.json"


def test_the_document_schema_rejects_an_unknown_kind() -> None:
    assert list(validator("document").iter_errors({"kind": "Queue", "name": "x"}))


def test_a_wire_config_in_nanoseconds_and_bytes_is_valid() -> None:
    wire = {
        "kind": "Stream",
        "name": "ORDERS",
        "subjects": ["ORDERS.*"],
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 604800000000000,
        "max_msgs_per_subject": -1,
        "max_msg_size": -1,
        "discard": "old",
        "storage": "file",
        "num_replicas": 1,
        "duplicate_window": 120000000000,
        "compression": "none",
        "allow_direct": False,
        "mirror_direct": False,
        "sealed": False,
        "deny_delete": False,
        "deny_purge": False,
        "allow_rollup_hdrs": False,
        "consumer_limits": {},
        "allow_msg_ttl": False,
        "metadata": {"_nats.ver": "2.12.1", "_nats.level": "2", "_nats.req.level": "0"},
    }
    (spec,) = validate_documents([doc(wire)])
    assert spec.config["max_age"] == 604800000000000
    assert "kind" not in spec.config


def test_human_units_become_wire_integers_in_the_spec() -> None:
    body = {
        "kind": "Stream",
        "name": "S",
        "max_age": "1h30m",
        "max_bytes": "1GiB",
        "max_msg_size": "1MB",  # binary, as the nats CLI reads it
        "consumer_limits": {"inactive_threshold": "5m"},
    }
    (spec,) = validate_documents([doc(body)])
    assert spec.config == {
        "name": "S",
        "max_age": 5400 * 10**9,
        "max_bytes": 2**30,
        "max_msg_size": 2**20,
        "consumer_limits": {"inactive_threshold": 300 * 10**9},
    }


def test_a_consumer_gets_stream_and_durable_name_from_its_name() -> None:
    specs = validate_documents(
        [
            doc({"kind": "Stream", "name": "S"}),
            doc({"kind": "Consumer", "stream": "S", "name": "C", "backoff": ["1s", 2000]}),
        ]
    )
    consumer = specs[1]
    assert (consumer.stream, consumer.name) == ("S", "C")
    assert consumer.config == {"name": "C", "durable_name": "C", "backoff": [10**9, 2000]}


def test_durable_name_alone_names_the_consumer() -> None:
    specs = validate_documents(
        [
            doc({"kind": "Stream", "name": "S"}),
            doc({"kind": "Consumer", "stream": "S", "durable_name": "D"}),
        ]
    )
    assert specs[1].name == "D"


def test_name_and_durable_name_must_agree() -> None:
    found = problems(
        {"kind": "Stream", "name": "S"},
        {"kind": "Consumer", "stream": "S", "name": "A", "durable_name": "B"},
    )
    assert found == [
        "spec.yaml:1: durable_name: name 'A' and durable_name 'B' differ; give only `name`"
    ]


def test_external_streams_are_marked_and_stripped() -> None:
    (spec,) = validate_documents([doc({"kind": "Stream", "name": "S", "external": True})])
    assert spec.external and "external" not in spec.config


def test_an_unknown_field_is_located_and_gets_a_suggestion() -> None:
    body = {"kind": "Stream", "name": "S", "retenton": "limits"}
    with pytest.raises(SpecError) as caught:
        validate_documents([doc(body, retenton=7)])
    assert [str(p) for p in caught.value.problems] == [
        "spec.yaml:7: retenton: unknown field (did you mean 'retention'?)"
    ]


def test_every_error_of_every_document_is_collected() -> None:
    found = problems(
        {"kind": "Stream", "name": "S", "max_age": "10 parsecs", "storage": "disk"},
        {"kind": "KeyValue", "name": "my.bucket"},
        {"name": "nokind"},
        {"kind": "Streem", "name": "X"},
    )
    assert len(found) == 5
    joined = "\n".join(found)
    assert "'10 parsecs' is not a duration" in joined
    assert "'disk' is not one of file, memory" in joined
    assert "'my.bucket' is not a valid bucket name" in joined
    assert "missing `kind`" in joined
    assert "unknown kind 'Streem' (did you mean 'Stream'?)" in joined


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"kind": "Stream", "name": "S", "max_msgs": "many"},
            "expected an integer, got string 'many'",
        ),
        ({"kind": "Stream", "name": "S", "max_bytes": -5}, "a size cannot be negative"),
        ({"kind": "Stream", "name": "S", "max_bytes": "-5GiB"}, "a size cannot be negative"),
        ({"kind": "Stream", "name": "S", "max_age": "106752d"}, "signed 64-bit integer"),
        ({"kind": "Stream", "name": "S", "max_age": 2**63}, "too large"),
        ({"kind": "Stream", "name": "S", "max_msg_size": "4GiB"}, "too large"),
        ({"kind": "Stream", "name": "S", "max_msgs": -2}, "out of range"),
        ({"kind": "Stream", "name": "a b"}, "is not a valid stream name"),
        ({"kind": "Stream", "name": "a.b"}, "is not a valid stream name"),
        ({"kind": "Stream", "name": "S", "subjects": ["a..b"]}, "is not a valid subject"),
        ({"kind": "Stream", "name": "S", "subjects": ["a", "a"]}, "duplicate entries"),
        ({"kind": "Stream"}, "missing required field `name`"),
        ({"kind": "Stream", "name": "S", "retention": "WorkQueue"}, "did you mean 'workqueue'"),
        ({"kind": "Consumer", "stream": "S"}, "a consumer needs a `name`"),
        ({"kind": "Consumer", "name": "C"}, "missing required field `stream`"),
        ({"kind": "KeyValue", "name": "b", "history": 65}, "65 is greater than the maximum"),
        ({"kind": "ObjectStore", "name": "b", "history": 2}, "history: unknown field"),
        (
            {"kind": "Consumer", "stream": "S", "name": "C", "pause_until": "soon"},
            "valid timestamp",
        ),
        (
            {"kind": "KeyValue", "name": "b", "bucket": "b"},
            "bucket: unknown field (did you mean 'name'?)",
        ),
        ({"kind": "Stream", "name": "S", "subjects": "a.*"}, "expected a list, got string 'a.*'"),
    ],
)
def test_bad_values_give_clear_messages(body: dict[str, Any], message: str) -> None:
    found = problems(body)
    assert any(message in p for p in found), found


def test_schemas_are_plain_json_files_in_the_schemas_folder() -> None:
    for filename in SCHEMA_FILES.values():
        json.loads((ROOT / "schemas" / filename).read_text(encoding="utf-8"))


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([2**31, 2**63, 1.5, 2.0, -1.0]),
    st.sampled_from(["30s", "1GiB", "10 parsecs", "a.b", "a..b", "", "file", "ORDERS.*", "x y"]),
    st.lists(st.sampled_from(["a", "a", "b.>", "1s", 5, None]), max_size=3),
    st.dictionaries(
        st.sampled_from(["name", "src", "dest", "api", "x"]), st.sampled_from(["a", 1]), max_size=2
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["Stream", "Consumer", "KeyValue", "ObjectStore"]),
    st.dictionaries(
        st.text(min_size=1, max_size=3) | st.sampled_from(FIELD_NAMES), VALUES, max_size=4
    ),
)
def test_the_quick_check_never_accepts_what_jsonschema_rejects(
    kind: str, fields: dict[str, Any]
) -> None:
    body = {"kind": kind, "name": "N", "stream": "S", **fields}
    if quick_check(kind)(body):
        assert validator(kind).is_valid(body), body


@pytest.mark.parametrize("example", EXAMPLE_SETS)
def test_the_quick_check_accepts_every_example(example: str) -> None:
    for document in load_documents([ROOT / "examples" / example]):
        assert quick_check(str(document.body["kind"]))(document.body), document.source


def test_the_schemas_resolve_from_their_files_as_an_editor_loads_them() -> None:
    """Relative $ids and $refs resolve against the file URL, as yaml-language-server does."""
    from urllib.parse import urlparse

    from referencing import Registry, Resource
    from referencing.exceptions import NoSuchResource

    def retrieve(uri: str) -> Resource[Any]:
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            raise NoSuchResource(ref=uri)
        return Resource.from_contents(json.loads(Path(parsed.path).read_text(encoding="utf-8")))

    document_url = (ROOT / "schemas" / "document.schema.json").as_uri()
    registry: Registry[Any] = Registry(retrieve=retrieve)  # type: ignore[call-arg]
    editor = Draft202012Validator({"$ref": document_url}, registry=registry)
    for document in load_documents([ROOT / "examples" / name for name in EXAMPLE_SETS]):
        assert editor.is_valid(document.body), document.source
    assert not editor.is_valid({"kind": "Stream", "name": "S", "max_age": "10 parsecs"})
    assert not editor.is_valid({"kind": "KeyValue", "name": "a.b"})
