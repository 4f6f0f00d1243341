"""Documents become specs as the unit parser and the spec rules say, whatever the order
and repetition of their texts: the conversion's per-text memory (``validate._parsed``) and
its shortcuts (no unit field, no lifecycle) change no spec, warning or error."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.errors import Problem, SpecError
from reconciler.locations import Location
from reconciler.specs import validate
from reconciler.specs.document import Document
from reconciler.specs.fields import UNIT_FIELDS, field_limit
from reconciler.specs.lifecycle import MANAGE
from reconciler.specs.schema import schema_problems
from reconciler.specs.units import AMBIGUOUS, UnitError, ambiguity, parse_duration, parse_size
from reconciler.specs.validate import SPEC_ONLY_FIELDS, validate_documents

#: Unit values as files write them: plain, spaced, ambiguous (1GB, 1M), not units, too
#: large for a 32-bit field or for any, integers, and what the schema refuses.
UNIT_VALUES = st.one_of(
    st.sampled_from(
        [
            *["30s", " 30s ", "7d", "1h30m", "1.5s", "0", "1GiB", "1GB", "1M", "2M", "64MiB"],
            *["1.5KiB", "3GiB", "5x", "1.25ns", "", "-1s", "106752d", "8EiB", "5 GB", "1e3"],
        ]
    ),
    st.integers(min_value=-2, max_value=2**63),
    st.sampled_from([True, 2.0, None]),
)
LIFECYCLES = st.sampled_from(
    [None, {}, {"prevent_destroy": True}, {"mode": "observe"}, {"ignore_changes": ["description"]}]
)


def _document(index: int, body: dict[str, Any]) -> Document:
    """Each its own file: the ambiguous-unit warning is said once per file."""
    file = f"spec{index}.yaml"
    return Document(body=body, source=Location(file, 1), locations={})


def _bodies(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": kind, "name": draw(st.sampled_from(["A", "B"]))}
    if kind == "Consumer":
        body["stream"] = "S"
    for pattern in UNIT_FIELDS[kind]:
        if not draw(st.booleans()):
            continue
        head, _, rest = pattern.partition(".")
        if rest == "*":
            body[head] = draw(st.lists(UNIT_VALUES, max_size=3))
        elif rest:
            body.setdefault(head, {})[rest] = draw(UNIT_VALUES)
        else:
            body[head] = draw(UNIT_VALUES)
    lifecycle = draw(LIFECYCLES)
    if lifecycle is not None:
        body["lifecycle"] = lifecycle
    if kind == "Stream" and draw(st.booleans()):
        body["external"] = True
    return body


@st.composite
def documents(draw: st.DrawFn) -> list[dict[str, Any]]:
    kinds = st.sampled_from(["Stream", "Consumer", "KeyValue", "ObjectStore"])
    return draw(st.lists(kinds.map(lambda kind: _bodies(draw, kind)), min_size=1, max_size=6))


def _unit_problems(value: Any, unit: str, path: str) -> tuple[int | None, str | None]:
    """(wire value, None) as the unit parser says, or (None, the problem's message)."""
    parse = parse_duration if unit == "duration" else parse_size
    try:
        wire = parse(value)
    except UnitError as err:
        return None, str(err)
    if wire > field_limit(path):
        return None, "is too large"
    return wire, None


def _paths(kind: str, body: dict[str, Any]) -> list[tuple[str, str, Any]]:
    found = []
    for pattern, unit in UNIT_FIELDS[kind].items():
        head, _, rest = pattern.partition(".")
        if head not in body:
            continue
        if rest == "*":
            found += [(f"{head}.{i}", unit, v) for i, v in enumerate(body[head])]
        elif rest:
            found += [(pattern, unit, body[head][rest])] if rest in body[head] else []
        else:
            found.append((head, unit, body[head]))
    return found


def _validated(bodies: list[dict[str, Any]]) -> tuple[list[Any], list[Problem]]:
    said: list[Problem] = []
    docs = [_document(i, copy.deepcopy(body)) for i, body in enumerate(bodies)]
    try:
        return validate_documents(docs, cross_checks=False, warnings=said), said
    except SpecError as err:
        return [], [*said, *err.problems]


@settings(max_examples=400, deadline=None)
@given(documents(), st.booleans())
def test_each_document_converts_as_the_schema_and_the_unit_parser_say(
    bodies: list[dict[str, Any]], cold: bool
) -> None:
    if cold:
        validate._parsed.cache_clear()
    specs, said = _validated(bodies)
    warned = {p.location.file: p for p in said if p.location and p.warning}
    errors = [p for p in said if not p.warning]
    for index, body in enumerate(bodies):
        kind, file = body["kind"], f"spec{index}.yaml"
        mine = [p for p in errors if p.location and p.location.file == file]
        plain = validate.plain_copy(body)  # integral floats are ints from here on
        schema_found = schema_problems(_document(index, plain))
        if schema_found:
            assert sorted(map(str, mine)) == sorted(map(str, schema_found)), body
            assert file not in warned
            continue
        wanted: dict[str, int] = {}
        refused: dict[str, str] = {}
        warning = None
        for path, unit, value in _paths(kind, plain):
            wire, problem = _unit_problems(value, unit, path)
            if problem is not None:
                refused[path] = problem
                continue
            wanted[path] = cast(int, wire)
            if isinstance(value, str) and warning is None:
                warning = ambiguity(value.strip(), unit)
        assert {p.path for p in mine} == set(refused), (body, mine)
        assert all(refused[p.path] in p.message for p in mine), mine
        if warning is None:
            assert file not in warned
        else:
            assert warned[file].message.startswith(AMBIGUOUS + warning), warned[file]
        if errors:
            continue  # an invalid document anywhere: no specs are returned
        spec = specs[index]
        for path, wire in wanted.items():
            node: Any = spec.config
            for part in path.split("."):
                node = node[int(part)] if isinstance(node, list) else node[part]
            assert node == wire and type(node) is int, (path, body)
        assert not set(SPEC_ONLY_FIELDS) & set(spec.config)
        assert spec.external == (kind == "Stream" and body.get("external") is True)
        assert (spec.lifecycle == MANAGE) == (not body.get("lifecycle")), body


def test_a_unit_text_written_a_thousand_times_is_parsed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A repository writes the same few texts over and over: each is parsed once, and
    every document still gets its value, its written text and its warning."""
    calls: list[Any] = []

    def counted(value: Any) -> int:
        calls.append(value)
        return parse_duration(value)

    monkeypatch.setattr(validate, "parse_duration", counted)
    validate._parsed.cache_clear()
    bodies = [
        {"kind": "Stream", "name": f"S{i}", "max_age": "7d", "duplicate_window": "1M"}
        for i in range(1000)
    ]
    specs, said = _validated(bodies)
    assert len(calls) == 2
    assert {spec.config["max_age"] for spec in specs} == {7 * 86_400 * 10**9}
    assert {spec.config["duplicate_window"] for spec in specs} == {30 * 86_400 * 10**9}
    assert all(spec.written == {"max_age": "7d", "duplicate_window": "1M"} for spec in specs)
    assert len([p for p in said if p.message.startswith(AMBIGUOUS)]) == 1000  # a file each


def test_a_bad_unit_text_is_an_error_in_every_document_that_writes_it() -> None:
    """Errors are never remembered in place of a value: the tenth document writing a bad
    text is told at its own line, as the first was."""
    bodies = [{"kind": "Stream", "name": f"S{i}", "max_age": "7 parsecs"} for i in range(10)]
    _, said = _validated(bodies)
    assert sorted(p.location.file for p in said if p.path == "max_age" and p.location) == sorted(
        f"spec{i}.yaml" for i in range(10)
    )


def test_a_boolean_is_never_taken_for_the_integer_it_equals() -> None:
    """``True == 1``: a remembered ``1`` must not answer for ``true``."""
    bodies = [
        {"kind": "Stream", "name": "A", "max_age": 1},
        {"kind": "Stream", "name": "B", "max_age": True},
    ]
    _, said = _validated(bodies)
    assert [p.location.file for p in said if p.location and not p.warning] == ["spec1.yaml"]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["Stream", "Consumer", "KeyValue", "ObjectStore", "KeyValueEntry"]),
    st.sampled_from([None, "S", "KV_b"]),
    st.booleans(),
    st.sampled_from([None, "v.txt"]),
)
def test_a_spec_made_is_the_spec_its_fields_say(
    kind: Any, stream: str | None, external: bool, value_file: str | None
) -> None:
    """``Spec``'s own ``__init__`` (it sets its slots directly) makes what the fields
    say, by position or by keyword, its identity included; what it is not given is the
    field's default, a new dict each time; it stays frozen and ``replace`` still works."""
    import dataclasses

    from reconciler.specs.spec import Spec

    if kind in ("Consumer", "KeyValueEntry") and stream is None:
        stream = "S"  # a child without its stream or bucket is no spec
    where = Location("s.yaml", 3)
    given_fields: dict[str, Any] = {
        "kind": kind,
        "name": "N",
        "config": {"a": 1},
        "source": where,
        "stream": stream,
        "external": external,
        "locations": {"a": where},
        "written": {"a": "1s"},
        "value_file": value_file,
        "lifecycle": MANAGE,
        "standby": None,
    }
    by_keyword = Spec(**given_fields)
    by_position = Spec(*given_fields.values())
    restored = Spec.restored(given_fields)
    for spec in (by_keyword, by_position):
        made = {f.name: getattr(spec, f.name) for f in dataclasses.fields(Spec) if f.init}
        assert made == given_fields
        assert spec == restored and spec.ref == restored.ref
        assert spec.stream_name == restored.stream_name
    bare = Spec(kind, "N", {}, where, stream)
    for field in dataclasses.fields(Spec):
        if field.init and field.name not in ("kind", "name", "config", "source", "stream"):
            default = field.default_factory() if callable(field.default_factory) else field.default
            assert getattr(bare, field.name) == default
    assert bare.locations is not Spec(kind, "N", {}, where, stream).locations
    with pytest.raises(dataclasses.FrozenInstanceError):
        bare.name = "other"  # type: ignore[misc]
    renamed = dataclasses.replace(by_keyword, name="M")
    assert renamed.name == renamed.ref.name == "M" and renamed.config == by_keyword.config


_PLAIN = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.sampled_from([1.0, -0.0, 2.0**63, 1e300, 3.5]),
        st.text(max_size=3),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=2), inner, max_size=4)
    ),
    max_leaves=10,
)


def _copied_item_by_item(value: Any) -> Any:
    """plain_copy's rule, walked item by item: the reference its quick copy is held to."""
    if isinstance(value, dict):
        return {k: _copied_item_by_item(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied_item_by_item(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


@settings(max_examples=300, deadline=None)
@given(_PLAIN)
def test_the_plain_copy_is_the_item_by_item_copy(value: Any) -> None:
    """A mapping of plain values only is copied at once; whatever the value, the copy is
    the item-by-item one (integral floats made ints), and shares no dict or list."""
    copied = validate.plain_copy(value)
    assert repr(copied) == repr(_copied_item_by_item(value))

    def containers(found: Any) -> list[int]:
        if isinstance(found, dict):
            return [id(found), *(i for v in found.values() for i in containers(v))]
        if isinstance(found, list):
            return [id(found), *(i for v in found for i in containers(v))]
        return []

    assert not set(containers(copied)) & set(containers(value))
