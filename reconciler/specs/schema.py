"""The JSON Schemas of spec documents, and their errors as located problems.

The schemas in ``schemas/`` (draft 2020-12) are the published contract; each is compiled
once per process. :func:`schema_problems` validates one document against the schema of its
kind and turns every error into a :class:`~reconciler.errors.Problem` carrying the
``FILE:LINE`` of the offending value, with a "did you mean" hint for misspelt fields and
enum values.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource

from reconciler.errors import Problem, brief
from reconciler.specs.loader import Document
from reconciler.specs.spec import KINDS
from reconciler.specs.units import DURATION_EXAMPLES, SIZE_EXAMPLES


def _schema_dir() -> Path:
    """``schemas/`` of a source checkout, or the copy a wheel ships as reconciler/schemas."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "schemas"
    return packaged if packaged.is_dir() else package.parent / "schemas"


SCHEMA_DIR = _schema_dir()
SCHEMA_FILES: Mapping[str, str] = {
    "Stream": "stream.schema.json",
    "Consumer": "consumer.schema.json",
    "KeyValue": "keyvalue.schema.json",
    "ObjectStore": "objectstore.schema.json",
    "document": "document.schema.json",
    "project": "project.schema.json",
}
#: Names other tools use for a field, mapped to this format's name.
FIELD_ALIASES: Mapping[str, str] = {
    "bucket": "name",
    "durable": "name",
    "replicas": "num_replicas",
    "num_replicas": "replicas",
    "stream_name": "stream",
    "max_value_size": "max_msg_size",
}
_UNIT_HINTS = {"duration": DURATION_EXAMPLES, "size": SIZE_EXAMPLES}


@functools.cache
def _schemas() -> dict[str, dict[str, Any]]:
    return {
        key: json.loads((SCHEMA_DIR / filename).read_text(encoding="utf-8"))
        for key, filename in SCHEMA_FILES.items()
    }


@functools.cache
def _registry() -> Registry[Any]:
    resources = [(schema["$id"], Resource.from_contents(schema)) for schema in _schemas().values()]
    return Registry().with_resources(resources)


@functools.cache
def validator(kind: str) -> Draft202012Validator:
    """The compiled validator of one kind (or ``"document"`` for any kind)."""
    return Draft202012Validator(_schemas()[kind], registry=_registry())


@functools.cache
def quick_check(kind: str) -> Check:
    """A fast yes/no test of one kind's schema; False means "run the full validator"."""

    def resolve(ref: str) -> Mapping[str, Any]:
        resolved = _registry().resolver(base_uri=_schemas()[kind]["$id"]).lookup(ref)
        contents: Mapping[str, Any] = resolved.contents
        return contents

    return compile_check(_schemas()[kind], resolve)


def schema(kind: str) -> dict[str, Any]:
    """The raw schema of one kind (or ``"document"``)."""
    return _schemas()[kind]


def kind_problem(document: Document) -> Problem | None:
    """A problem when the document's ``kind`` is missing or unknown, else None."""
    kind = document.body.get("kind")
    choices = ", ".join(KINDS)
    if kind is None:
        return Problem(document.source, "kind", f"missing `kind` (one of {choices})")
    if kind not in KINDS:
        hint = did_you_mean(str(kind), KINDS, case_insensitive=True)
        message = f"unknown kind {brief(kind)}{hint} (one of {choices})"
        return Problem(document.where("kind"), "kind", message)
    return None


def schema_problems(document: Document, kind: str | None = None) -> list[Problem]:
    """Every schema error of a document whose kind is known (or of ``kind``'s schema:
    ``"project"`` for a project file)."""
    kind = kind or str(document.body["kind"])
    if quick_check(kind)(document.body):
        return []
    problems: list[Problem] = []
    for error in validator(kind).iter_errors(document.body):
        problems.extend(_problems_of(error, document, kind))
    return problems


def _problems_of(error: ValidationError, document: Document, kind: str) -> Iterator[Problem]:
    path = ".".join(str(part) for part in error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        for key in sorted(set(error.instance) - set(allowed)):
            field_path = f"{path}.{key}" if path else key
            hint = did_you_mean(key, allowed)
            if not hint and FIELD_ALIASES.get(key) in allowed:
                hint = f" (did you mean {FIELD_ALIASES[key]!r}?)"
            yield Problem(document.where(field_path), field_path, f"unknown field{hint}")
        return
    yield Problem(document.where(path), path, _message(error, kind))


def _message(error: ValidationError, kind: str) -> str:
    schema_part: Mapping[str, Any] = error.schema if isinstance(error.schema, Mapping) else {}
    value = error.instance
    title = schema_part.get("title")
    match error.validator:
        case "required":
            missing = str(error.message).split("'")[1] if "'" in error.message else "?"
            return f"missing required field `{missing}`"
        case "anyOf" if kind == "Consumer" and not error.absolute_path:
            return "a consumer needs a `name` (its durable name) or `durable_name`"
        case "anyOf" if title in _UNIT_HINTS:
            return _unit_message(value, str(title))
        case "pattern" if title:
            about = schema_part.get("description", "")
            return f"{brief(value)} is not a valid {title}: {about}".strip()
        case "enum":
            choices = [str(c) for c in schema_part.get("enum", [])]
            hint = did_you_mean(str(value), choices, case_insensitive=True)
            return f"{brief(value)} is not one of {', '.join(choices)}{hint}"
        case "type":
            expected = _type_name(error.validator_value)
            return f"expected {expected}, got {_json_type(value)} {brief(value)}"
        case "minimum" | "maximum" if title == "limit":
            return f"{brief(value)} is out of range (-1 = unlimited, or a non-negative count)"
        case "uniqueItems":
            return "contains duplicate entries"
    return _cut(str(error.message))


def _cut(message: str, limit: int = 200) -> str:
    """jsonschema's own messages quote whole values: keep them short."""
    return message if len(message) <= limit else message[: limit - 1] + "…"


def _unit_message(value: Any, unit: str) -> str:
    hint = _UNIT_HINTS[unit]
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return f"expected a {unit} ({hint}), got {_json_type(value)} {brief(value)}"
    if isinstance(value, int):
        if value < 0:
            floor = "-1 means unlimited" if unit == "size" else "use 0 for none"
            return f"{value} is negative: a {unit} cannot be negative ({floor})"
        return f"{value} is too large for this field"
    if value.strip().startswith("-"):
        return f"{brief(value)} is negative: a {unit} cannot be negative"
    return f"{brief(value)} is not a {unit} ({hint})"


def _type_name(expected: Any) -> str:
    names = expected if isinstance(expected, list) else [expected]
    words = {
        "integer": "an integer",
        "string": "a string",
        "boolean": "true or false",
        "array": "a list",
        "object": "a mapping",
        "null": "null",
    }
    return " or ".join(
        words.get(str(n), f"a{'n' if str(n)[0] in 'aeiou' else ''} {n}") for n in names
    )


def _json_type(value: Any) -> str:
    match value:
        case bool():
            return "boolean"
        case int():
            return "integer"
        case float():
            return "number"
        case str():
            return "string"
        case list():
            return "list"
        case dict():
            return "mapping"
        case None:
            return "null"
    return type(value).__name__


def did_you_mean(word: str, choices: Any, *, case_insensitive: bool = False) -> str:
    options = [str(c) for c in choices]
    if case_insensitive:
        exact = [c for c in options if c.lower() == word.lower()]
        if exact:
            return f" (did you mean {exact[0]!r}?)"
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# --- the quick check ---------------------------------------------------------------------
#
# jsonschema spends most of its time resolving references and building error objects. Valid
# documents (nearly all of them) only need a yes/no answer: the schema is compiled once into
# nested closures over the keywords these schemas use. Anything unexpected compiles to a
# check that says "no", which only means the full validator runs: never a wrong "yes".

Check = Callable[[Any], bool]
_IGNORED = frozenset({"$schema", "$id", "$defs", "title", "description", "default"})
_TYPES: Mapping[str, Check] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (
        not isinstance(v, bool)
        and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))
    ),
    "number": lambda v: not isinstance(v, bool) and isinstance(v, (int, float)),
}


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def compile_check(node: Mapping[str, Any], resolve: Callable[[str], Mapping[str, Any]]) -> Check:
    """A conservative yes/no validator for ``node`` (see the comment above)."""
    checks = [_keyword_check(key, value, node, resolve) for key, value in node.items()]
    active = [check for check in checks if check is not None]
    return lambda value: all(check(value) for check in active)


def _keyword_check(
    key: str, value: Any, node: Mapping[str, Any], resolve: Callable[[str], Mapping[str, Any]]
) -> Check | None:
    if key in _IGNORED:
        return None
    match key:
        case "$ref":
            target: list[Check] = []  # compiled on first use: references may be recursive

            def follow(instance: Any) -> bool:
                if not target:
                    target.append(compile_check(resolve(value), resolve))
                return target[0](instance)

            return follow
        case "type":
            tests = [_TYPES[t] for t in (value if isinstance(value, list) else [value])]
            return lambda v: any(test(v) for test in tests)
        case "enum" | "const":
            allowed = value if key == "enum" else [value]
            return lambda v: any(type(v) is type(a) and v == a for a in allowed)
        case "pattern":
            regex = re.compile(value)
            return lambda v: not isinstance(v, str) or regex.search(v) is not None
        case "minimum":
            return lambda v: not _is_number(v) or v >= value
        case "maximum":
            return lambda v: not _is_number(v) or v <= value
        case "minLength":
            return lambda v: not isinstance(v, str) or len(v) >= value
        case "maxLength":
            return lambda v: not isinstance(v, str) or len(v) <= value
        case "required":
            return lambda v: not isinstance(v, dict) or all(k in v for k in value)
        case "anyOf":
            options = [compile_check(option, resolve) for option in value]
            return lambda v: any(option(v) for option in options)
    return _structure_check(key, value, node, resolve)


def _structure_check(
    key: str, value: Any, node: Mapping[str, Any], resolve: Callable[[str], Mapping[str, Any]]
) -> Check | None:
    match key:
        case "properties":
            props = {name: compile_check(sub, resolve) for name, sub in value.items()}
            return lambda v: (
                not isinstance(v, dict)
                or all(props[k](item) for k, item in v.items() if k in props)
            )
        case "additionalProperties" if value is False and not node.get("patternProperties"):
            known = frozenset(node.get("properties", {}))
            return lambda v: not isinstance(v, dict) or known.issuperset(v)
        case "additionalProperties" if isinstance(value, Mapping) and "properties" not in node:
            extra = compile_check(value, resolve)
            return lambda v: not isinstance(v, dict) or all(extra(item) for item in v.values())
        case "items" if isinstance(value, Mapping):
            each = compile_check(value, resolve)
            return lambda v: not isinstance(v, list) or all(each(item) for item in v)
        case "uniqueItems" if value is True:
            return lambda v: (
                not isinstance(v, list)
                or (all(isinstance(x, str) for x in v) and len(set(v)) == len(v))
            )
    return lambda v: False  # a keyword this check does not know: let jsonschema decide
