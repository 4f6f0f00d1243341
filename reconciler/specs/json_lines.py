"""JSON with every value's line: one object or a list of them per file. The values come
from the JSON parser (integers of more than ``MAX_INT_DIGITS`` digits kept as text, lone
surrogates refused); the lines from the same text composed as YAML."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import yaml

from reconciler.errors import Problem
from reconciler.locations import Location
from reconciler.specs.document import MAX_DOCUMENTS, Abort, Document
from reconciler.specs.yaml_lines import NodeBuilder, compose_documents

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_YAML_UNREADABLE = re.compile(
    "[^\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


def json_documents(text: str, name: str, problems: list[Problem]) -> list[Document]:
    value = parse_json(text, name)
    items = value if isinstance(value, list) else [value]
    if len(items) > MAX_DOCUMENTS:
        message = f"too many documents in one file (limit {MAX_DOCUMENTS}); split it"
        raise Abort(Problem(Location(name, 1), "", message))
    nodes = json_nodes(text, len(items) if isinstance(value, list) else None)
    documents = []
    for index, item in enumerate(items):
        node = nodes[index] if nodes else None
        source = Location(name, node.start_mark.line + 1 if node is not None else 1)
        if not isinstance(item, dict):
            problems.append(Problem(source, "", "a document must be a JSON object"))
            continue
        locations: Mapping[str, Location] = {}
        if node is not None:
            builder = NodeBuilder(name, problems, start=source.line)
            try:
                builder.build(node, "", 0)
            except Abort as abort:
                problems.append(abort.problem)
                continue
            locations = builder.locations
        bad = [(p, locations.get(p, source)) for p in _surrogate_paths(item, "")]
        if bad:
            problems += [
                Problem(where, p, "contains a lone surrogate (not Unicode text)")
                for p, where in bad
            ]
            continue
        document = Document(body=item, source=source, locations=locations)
        documents.append(document)
    return documents


def _surrogate_paths(value: Any, path: str) -> list[str]:
    """Dotted paths of the strings (or keys) holding a lone UTF-16 surrogate (``\\ud800``),
    which JSON allows as an escape but no server can store."""
    prefix = f"{path}." if path else ""
    if isinstance(value, str):
        return [path] if _SURROGATE.search(value) else []
    if isinstance(value, dict):
        found = [f"{prefix}{k}" for k in value if _SURROGATE.search(str(k))]
        return found + [p for k, v in value.items() for p in _surrogate_paths(v, f"{prefix}{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _surrogate_paths(v, f"{prefix}{i}")]
    return []


#: Integers longer than this are kept as text, so validation names their file and line.
MAX_INT_DIGITS = 40


def _json_int(digits: str) -> int | str:
    if len(digits) <= MAX_INT_DIGITS:
        return int(digits)
    return f"{digits[:12]}… (an integer of {len(digits)} digits)"


def parse_json(text: str, name: str) -> Any:
    def reject_constant(constant: str) -> Any:
        raise ValueError(f"{constant} is not valid JSON")

    try:
        return json.loads(text, parse_constant=reject_constant, parse_int=_json_int)
    except json.JSONDecodeError as err:
        message = "unexpected content after the JSON value" if err.msg == "Extra data" else err.msg
        raise Abort(Problem(Location(name, err.lineno), "", f"invalid JSON: {message}")) from None
    except ValueError as err:
        raise Abort(Problem(Location(name, 1), "", f"invalid JSON: {err}")) from None


def json_nodes(text: str, count: int | None) -> list[Any]:
    """The YAML nodes of the JSON documents (for line numbers); [] if YAML cannot read it.

    JSON is YAML but for what YAML's reader refuses: tabs as white space, and characters
    it calls unprintable. Those become spaces first (one character for one, so every line
    stays where it was); the values come from the JSON parser, not from these nodes.
    """
    try:
        readable = _SURROGATE_ESCAPE.sub(r"\\u0020", _YAML_UNREADABLE.sub(" ", text))
        roots = list(compose_documents(readable, "<json>"))
    except (yaml.YAMLError, Abort):
        return []
    if len(roots) != 1:
        return []
    root = roots[0]
    if count is None:
        return [root]
    return list(root.value) if isinstance(root, yaml.SequenceNode) else []
