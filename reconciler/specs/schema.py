"""The JSON Schemas of spec documents, and their errors as located problems.

The schemas in ``schemas/`` (draft 2020-12) are the published contract; each is compiled
once per process. :func:`schema_problems` validates one document against the schema of its
kind and turns every error into a :class:`~reconciler.errors.Problem` carrying the
``FILE:LINE`` of the offending value, with a "did you mean" hint for misspelt fields and
enum values.

jsonschema (and referencing, attrs) load only when a document needs explaining: the quick
yes of jsonschema-rs answers for valid documents, and a warm spec cache validates nothing,
so a re-plan does not pay for importing them.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from reconciler.errors import Problem, brief
from reconciler.specs.document import Document
from reconciler.specs.fields import MAY_BE_SECRET, is_secret
from reconciler.specs.spec import KINDS
from reconciler.specs.units import DURATION_EXAMPLES, SIZE_EXAMPLES

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError
    from referencing import Registry


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
    "KeyValueEntry": "keyvalueentry.schema.json",
    "document": "document.schema.json",
    "project": "project.schema.json",
    "policy": "policy.schema.json",
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
    from referencing import Registry, Resource

    resources = [(schema["$id"], Resource.from_contents(schema)) for schema in _schemas().values()]
    return Registry().with_resources(resources)


@functools.cache
def validator(kind: str) -> Draft202012Validator:
    """The compiled validator of one kind (or ``"document"`` for any kind), its
    ``pattern`` read as JSON Schema says (:func:`_pattern`)."""
    from jsonschema import Draft202012Validator, validators

    checked = validators.extend(Draft202012Validator, {"pattern": _pattern})
    return cast("Draft202012Validator", checked(_schemas()[kind], registry=_registry()))


def _pattern(
    validator: Draft202012Validator, pattern: str, instance: Any, _schema: Any
) -> Iterator[ValidationError]:
    """jsonschema's ``pattern`` keyword read as ECMA-262, as JSON Schema says
    (:func:`_python_pattern`): jsonschema runs patterns with Python's ``re``, where ``$``
    matches before a final newline too (a name ``"ORDERS\\n"`` passed as valid) and
    ``\\s`` leaves out U+FEFF (a name ``"\\ufeff"`` passed); jsonschema-rs, and every
    editor, refuse both."""
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not _python_pattern(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


#: ECMA-262's ``\\s`` (WhiteSpace and LineTerminator), as the body of a character class:
#: Python's ``\\s`` also takes U+001C-U+001F and U+0085 and leaves out U+FEFF.
_ECMA_SPACE = (
    "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
)
#: ECMA-262's ``.``: anything but a LineTerminator (Python's leaves out ``\\n`` only).
_ECMA_DOT = "[^\\n\\r\\u2028\\u2029]"


@functools.lru_cache(maxsize=256)
def _python_pattern(pattern: str) -> re.Pattern[str]:
    """An ECMA-262 pattern of these schemas compiled for Python with ECMA's meaning:
    ``$`` (not in a class) is the end of the text, ``\\Z``; ``.`` and ``\\s`` match what
    they match in ECMA-262 (and in jsonschema-rs, :func:`quick_check`, which must agree).
    The schemas use no other construct whose meaning differs."""
    out: list[str] = []
    in_class = False
    chars = iter(pattern)
    for char in chars:
        if char == "\\":
            escaped = next(chars, "")
            if escaped == "s":
                out.append(_ECMA_SPACE if in_class else f"[{_ECMA_SPACE}]")
            else:
                out.append(char + escaped)
        elif in_class:
            in_class = char != "]"
            out.append(char)
        elif char == "[":
            in_class = True
            out.append(char)
        elif char == ".":
            out.append(_ECMA_DOT)
        elif char == "$":
            out.append("\\Z")
        else:
            out.append(char)
    return re.compile("".join(out))


@functools.cache
def quick_check(kind: str) -> Check:
    """A fast yes/no test of one kind's schema; False means "run the full validator".

    Valid documents (nearly all of them) only need a yes: jsonschema-rs compiles the same
    published schemas (their relative references resolved from the same files) and
    answers in microseconds. Any doubt (a value it cannot take, an error of its own) is a
    "no", which only means that :mod:`jsonschema` runs and explains, never a wrong "yes".
    """
    import jsonschema_rs

    by_id = {schema["$id"]: schema for schema in _schemas().values()}

    def retrieve(uri: str) -> Any:
        return by_id[uri.rsplit("/", 1)[-1]]

    compiled = jsonschema_rs.Draft202012Validator(
        _schemas()[kind], retriever=retrieve, validate_formats=False
    )

    def check(value: Any) -> bool:
        try:
            return bool(compiled.is_valid(value))
        except (ValueError, TypeError, OverflowError):
            return False

    return check


def schema(kind: str) -> dict[str, Any]:
    """The raw schema of one kind (or ``"document"``)."""
    return _schemas()[kind]


def kind_problem(document: Document) -> Problem | None:
    """A problem when the document's ``kind`` is missing or unknown, else None."""
    kind = document.body.get("kind")
    if kind in KINDS:
        return None
    choices = ", ".join(KINDS)
    if kind is None:
        return Problem(document.source, "kind", f"missing `kind` (one of {choices})")
    hint = did_you_mean(str(kind), KINDS, case_insensitive=True)
    message = f"unknown kind {brief(kind)}{hint} (one of {choices})"
    return Problem(document.where("kind"), "kind", message)


def schema_problems(
    document: Document, kind: str | None = None, *, body: Mapping[str, Any] | None = None
) -> list[Problem]:
    """Every schema error of a document whose kind is known (or of ``kind``'s schema:
    ``"project"`` for a project file); ``body``: its values as validated, when they are
    not ``document.body`` (a copy), each error still at the document's line."""
    values = document.body if body is None else body
    kind = kind or str(values["kind"])
    if quick_check(kind)(values):
        return []
    problems: list[Problem] = []
    for error in validator(kind).iter_errors(values):
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
    if any(is_secret(str(part)) for part in error.absolute_path):
        yield Problem(document.where(path), path, _unquoted(error))
        return
    if _beside_visible_text(error):
        return  # $defs/visible_text's own error at the same value says which character
    yield Problem(document.where(path), path, _message(error, kind))


def _unquoted(error: ValidationError) -> str:
    """What is wrong with a value stored under a secret-looking name (``metadata.password``),
    said without the value, as plans and reports redact it."""
    unshown = f"the value is not shown: {MAY_BE_SECRET}"
    if error.validator == "type":
        expected = _type_name(error.validator_value)
        return f"expected {expected}, got {_json_type(error.instance)} ({unshown})"
    return f"invalid ({unshown})"


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
        case "pattern" if _visible_only(error) and (hidden := hidden_character(value)):
            return _hidden_message(value, hidden)
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


def hidden_character(text: str) -> str | None:
    """The first character of ``text`` that the schemas leave out of every name and
    subject (``$defs/visible_text`` in document.schema.json, the one list: controls and
    invisible format characters such as bidi overrides, a ZWNJ or ZWJ but between two
    visible characters of another script or emoji); None: there is none."""
    at, visible = 0, _visible()
    while at < len(text):
        found = visible.match(text, at)
        if found is None:
            return text[at]
        at = found.end()
    return None


#: Where the one list is: every name and subject definition refers to it (``$ref``).
VISIBLE_TEXT = "document.schema.json#/$defs/visible_text"


@functools.cache
def _visible_pattern() -> str:
    """``$defs/visible_text``'s pattern: ``^(?:[^`` the characters left out ``]|`` a
    joined run ``)*$``."""
    return str(_schemas()["document"]["$defs"]["visible_text"]["pattern"])


@functools.cache
def _visible() -> re.Pattern[str]:
    """One visible piece of a name or subject as ``$defs/visible_text`` reads it (its
    two alternatives, the joined run first): a ZWNJ or ZWJ between two visible non-ASCII
    characters (Persian's ZWNJ, an Indic conjunct's ZWJ, an emoji sequence's) with
    them, else a character the list leaves out."""
    body = _visible_pattern().removeprefix("^(?:").removesuffix(")*$")
    one, _, joined = body.partition("]|")
    return _python_pattern(f"(?:{joined})|{one}]")


def _visible_only(error: ValidationError) -> bool:
    """Whether ``error`` is ``$defs/visible_text``'s pattern (a name's or subject's, by
    its ``$ref``) failing on a text: a timestamp or a key holding such a character is
    refused by its own pattern, in its own words."""
    return isinstance(error.instance, str) and error.validator_value == _visible_pattern()


def _beside_visible_text(error: ValidationError) -> bool:
    """Whether ``error`` is the own pattern of a name or subject (a definition referring
    to ``$defs/visible_text``) failing on a text that holds a hidden character: a tab
    breaks both patterns, and :func:`_visible_only`'s error alone says why, once."""
    own = error.schema if isinstance(error.schema, Mapping) else {}
    return (
        error.validator == "pattern"
        and own.get("$ref") == VISIBLE_TEXT
        and isinstance(error.instance, str)
        and hidden_character(error.instance) is not None
    )


def _hidden_message(value: str, char: str) -> str:
    """Why a name or subject holding ``char`` is refused (Trojan Source: a name that
    reads as another in a reviewer's diff), the value and the character escaped."""
    what = _HIDDEN_KINDS.get(unicodedata.category(char), "an invisible format character")
    if char in _JOINERS:
        what += " (taken only between two visible characters of another script or emoji)"
    return (
        f"{brief(value)} holds U+{ord(char):04X}, {what}: names and subjects take no "
        "control or invisible format characters (what a reviewer reads in a diff must be "
        "what the server gets)"
    )


_HIDDEN_KINDS = {"Cc": "a control character", "Zl": "a line separator", "Zp": "a line separator"}
#: ZWNJ and ZWJ: Persian, Indic scripts and emoji sequences need them between two
#: characters, where they change what is drawn.
_JOINERS = "\u200c\u200d"


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


Check = Callable[[Any], bool]
