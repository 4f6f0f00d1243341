"""The quick yes (jsonschema-rs) and jsonschema agree on every schema the loader uses.

Documents are generated from the schemas themselves: each one's fields with values near
what the schema wants (its enum values, integers at and past its bounds, unit texts,
nested mappings of the nested schema's fields, a required field left out now and then, a
field of no schema) and now and then a value of the wrong type. A "yes" that jsonschema
says no to would let an invalid document through; a "no" it says yes to would only send a
valid document down the slow path, but they should not happen either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.errors import SpecError
from reconciler.specs.schema import quick_check, schema, validator
from reconciler.specs.spec import KINDS
from reconciler.specs.validate import load_specs

#: Every schema a document or file is validated against (specs.validate, specs.project
#: and specs.policy).
SCHEMAS = [*KINDS, "project", "policy"]
WRONG: st.SearchStrategy[Any] = st.sampled_from(
    [None, True, 1.5, 2.0, "x", "", [], {}, -1, 2**63, "a b", "7d"]
)
TEXTS = st.sampled_from(
    [
        *["N", "N\n", "ORDERS", "a.b", "a.>", "orders.*", "a..b", "", " ", "x y", "$JS.API.>"],
        *["30s", "1h30m", "1GiB", "1GB", "-1s", "10 parsecs", "1M", "0", "2024-01-01T00:00:00Z"],
        *["explicit", "limits", "file", "memory", "S2", "all", "new", "instant", "prod"],
    ]
)


def _resolved(node: dict[str, Any], root: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``node`` with its ``$ref`` (within ``root`` or to another schema file) followed,
    and the schema it is now in."""
    while "$ref" in node:
        where, _, pointer = str(node["$ref"]).partition("#")
        root = schema(_key_of(where)) if where else root
        target: Any = root
        for part in [p for p in pointer.split("/") if p]:
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node, root


def _key_of(file: str) -> str:
    for key in [*KINDS, "document", "project", "policy"]:
        if schema(key)["$id"] == file:
            return key
    raise AssertionError(file)


def near(node: dict[str, Any], root: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values near what ``node`` (a part of the schema ``root``) accepts, and now and then
    a wrong one."""
    node, root = _resolved(node, root)
    options: list[st.SearchStrategy[Any]] = []
    for key in ("anyOf", "oneOf", "allOf"):
        options += [near(sub, root, depth) for sub in node.get(key, [])]
    if "enum" in node:
        options.append(st.sampled_from(node["enum"]))
    if "const" in node:
        options.append(st.just(node["const"]))
    types = node.get("type", [])
    types = types if isinstance(types, list) else [types]
    if "integer" in types or "number" in types:
        bounds = [node.get("minimum", 0), node.get("maximum", 2**31)]
        options.append(st.sampled_from([b + d for b in bounds for d in (-1, 0, 1)] + [0, 1]))
    if "string" in types:
        options.append(TEXTS)
        if "pattern" in node:
            options += [st.from_regex(node["pattern"], fullmatch=True)] * 3
    if "boolean" in types:
        options.append(st.booleans())
    if "array" in types and depth < 3:
        items = node.get("items", {})
        values = near(items, root, depth + 1) if items else TEXTS
        options.append(st.lists(values, min_size=node.get("minItems", 0), max_size=3))
    if ("object" in types or "properties" in node) and depth < 3:
        options.append(_mappings(node, root, depth))
    if not options:
        return WRONG
    good = st.one_of(*options)
    return st.integers(0, 9).flatmap(lambda roll: WRONG if roll == 0 else good)


def _mappings(
    node: dict[str, Any], root: dict[str, Any], depth: int
) -> st.SearchStrategy[dict[str, Any]]:
    properties: dict[str, Any] = node.get("properties", {})
    required = list(node.get("required", []))
    more = node.get("additionalProperties")
    if not properties:
        values = near(more, root, depth + 1) if isinstance(more, dict) else TEXTS | WRONG
        keys = TEXTS
        if "pattern" in node.get("propertyNames", {}):
            keys |= st.from_regex(node["propertyNames"]["pattern"], fullmatch=True)
        return st.dictionaries(keys, values, min_size=node.get("minProperties", 0), max_size=2)
    # "one of these fields is needed" (a consumer's name or durable_name)
    required += [n for sub in node.get("anyOf", []) for n in sub.get("required", [])[:1]]

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        names = [n for n in required if draw(st.integers(0, 9)) > 0]
        names += draw(st.lists(st.sampled_from(sorted(properties)), max_size=4))
        value = {name: draw(near(properties.get(name, {}), root, depth + 1)) for name in names}
        if draw(st.integers(0, 9)) == 0:
            value[draw(st.sampled_from(["replicas", "bucket", "x", "Name"]))] = "x"
        return value

    return build()


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    key = draw(st.sampled_from(SCHEMAS))
    body = draw(_mappings(schema(key), schema(key), 0))
    if key in KINDS and draw(st.integers(0, 9)) > 0:
        body["kind"] = key
    return key, body


@pytest.mark.slow  # 1,500 documents: 16-38 s, .ci/run's second stage
@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(documents())
def test_the_quick_check_and_jsonschema_agree_on_every_schema(
    document: tuple[str, dict[str, Any]],
) -> None:
    key, body = document
    assert quick_check(key)(body) == validator(key).is_valid(body), (key, body)


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("name", '"ORDERS\\n"'),  # Python's $ matched before the newline
        ("subjects", '["orders.>\\n"]'),
    ],
)
def test_a_text_ending_in_a_newline_is_refused_at_its_line(
    tmp_path: Path, field: str, text: str
) -> None:
    """Found by the property above: jsonschema passed a stream named ``"ORDERS\\n"``
    (and a subject ending in a newline) that the server's subjects cannot carry."""
    spec = tmp_path / "s.yaml"
    value = f"{field}: {text}\n"
    name = "" if field == "name" else "name: ORDERS\n"
    spec.write_text(f"kind: Stream\n{name}{value}", encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_specs([spec])
    (problem,) = caught.value.problems
    assert str(problem.location) == f"{spec}:{2 if field == 'name' else 3}"
    assert problem.path.split(".")[0] == field


@pytest.mark.parametrize(
    ("lines", "field"),
    [
        # an Arabic-Indic 1: the server reads no time
        (
            "deliver_policy: by_start_time\nopt_start_time: 2025-01-0\u0661T00:00:00Z",
            "opt_start_time",
        ),
        ('sample_freq: "\u0665%"', "sample_freq"),
    ],
)
def test_a_digit_of_another_script_is_no_digit(tmp_path: Path, lines: str, field: str) -> None:
    """Found by the property above: Python's ``\\d`` took ``\u0661`` for a digit, where the
    server (Go) and JSON Schema's ECMA-262 patterns see none: the schemas say [0-9]."""
    spec = tmp_path / "c.yaml"
    spec.write_text(
        f"kind: Stream\nname: S\n---\nkind: Consumer\nstream: S\nname: C\n{lines}\n",
        encoding="utf-8",
    )
    with pytest.raises(SpecError) as caught:
        load_specs([spec])
    (problem,) = caught.value.problems
    last = 7 + lines.count("\n")  # the field is the file's last line
    assert (str(problem.location), problem.path) == (f"{spec}:{last}", field)


def _patterns(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["pattern"]} if isinstance(node.get("pattern"), str) else set()
        return found.union(*(_patterns(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_patterns(value) for value in node))
    return set()


#: Every character where Python's ``re`` and ECMA-262 could read ``\s``, ``.``, ``$`` or a
#: class differently: both kinds of white space and line ends, controls, Latin-1, the
#: format characters no name may hold (``$defs/visible_text``), and a few far away.
_CHARS = [chr(c) for c in (*range(0x250), 0x061C, 0x1680, 0x180E, *range(0x2000, 0x2030))]
_CHARS += [chr(c) for c in (*range(0x205F, 0x2071), 0x3000, *range(0xFFF8, 0xFFFD))]
_CHARS += ["\ufeff", "\uffff", "\U00010000", "\U0010ffff"]


@pytest.mark.parametrize(
    "pattern", sorted(set().union(*(_patterns(schema(key)) for key in [*SCHEMAS, "document"])))
)
def test_each_pattern_means_in_python_what_it_means_in_ecma_262(pattern: str) -> None:
    """Found by the property above (a stream named ``"\\ufeff"``): Python's ``\\s`` is not
    ECMA-262's. Every pattern of the schemas now takes, in jsonschema, exactly the texts
    jsonschema-rs (ECMA-262) takes, each character alone, inside and at the end."""
    import jsonschema_rs

    ecma = jsonschema_rs.Draft202012Validator({"type": "string", "pattern": pattern})
    python = validator("Stream").__class__({"type": "string", "pattern": pattern})
    texts = [t for c in _CHARS for t in (c, f"a{c}b", f"A{c}", f"1{c}:1", f"a.{c}", f"0{c}")]
    differ = [t for t in texts if ecma.is_valid(t) != python.is_valid(t)]
    assert not differ, [ascii(t) for t in differ[:10]]


def test_a_name_of_a_byte_order_mark_is_refused_at_its_line(tmp_path: Path) -> None:
    """ECMA-262's ``\\s`` holds U+FEFF: the published schema refuses such a name (as an
    editor does), and so does the loader, at the name's line."""
    spec = tmp_path / "s.yaml"
    spec.write_text('kind: Stream\nname: "\\ufeff"\nsubjects: [a]\n', encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_specs([spec])
    (problem,) = caught.value.problems
    assert (str(problem.location), problem.path) == (f"{spec}:2", "name")
