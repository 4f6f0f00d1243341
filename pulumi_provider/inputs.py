"""Pulumi property bags ⇄ the engine's documents and specs (pure; no server).

Pulumi hands a dynamic provider plain dicts: numbers arrive as floats, secrets may arrive
wrapped (``{"4dabf18193072939515e22adb298388d": "1b47...", "value": ...}``), values not
known yet during a preview are :class:`pulumi.output.Unknown`. This module turns such a
bag into a validated :class:`~reconciler.specs.spec.Spec` with the engine's own validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi.output import Unknown
from pulumi.runtime import rpc

from reconciler.errors import SpecError
from reconciler.locations import Location
from reconciler.model.values import REDACTED, printable
from reconciler.specs.document import Document
from reconciler.specs.fields import MAY_BE_SECRET
from reconciler.specs.spec import KINDS, Spec
from reconciler.specs.validate import validate_documents

#: The input naming the inputs that a program passed as Pulumi secrets. The engine hands a
#: dynamic provider (``acceptSecrets: false``) every secret unwrapped, so the resource
#: (``resources.py``) tells the provider which they were; names only, never a value.
SECRET_INPUTS = "secret_inputs"

#: Inputs that steer the provider and are not spec fields.
CONTROL_FIELDS = frozenset({"connection", "allow_destroy", "migrate", SECRET_INPUTS, "__provider"})

#: Inputs that identify a resource: a change replaces it.
IDENTITY_FIELDS: tuple[str, ...] = ("kind", "name", "stream")

#: The output holding the resource's claim (``operations.new_claim``): the value it recorded
#: in the metadata of the live resource it created or adopted.
CLAIM = "claim"

#: Output-only properties written by the provider (never spec fields).
OUTPUT_FIELDS = frozenset({"live_config", "stream_config", "bucket", "server", CLAIM})


def plain(value: Any) -> Any:
    """A property value with secrets unwrapped and integral floats turned back into ints."""
    value = rpc.unwrap_rpc_secret(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def secret_inputs(props: Mapping[str, Any]) -> tuple[str, ...]:
    """The inputs that arrived as Pulumi secrets (:data:`SECRET_INPUTS`), by name."""
    names = plain(props.get(SECRET_INPUTS))
    return tuple(str(n) for n in names) if isinstance(names, list) else ()


def secret_values(props: Mapping[str, Any]) -> tuple[str, ...]:
    """The texts of every value inside the inputs that arrived as secrets, longest first:
    what a message from this resource must never show."""
    found: set[str] = set()
    for name in secret_inputs(props):
        if name not in OUTPUT_FIELDS:  # a consumer's stream_config: another resource's
            _texts(plain(props.get(name)), found)
    return tuple(sorted(found, key=len, reverse=True))


def hide(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with each of ``secrets`` (:func:`secret_values`) replaced by a marker."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


#: What a check failure at a secret input says: its reason quotes the invalid value, in
#: forms :func:`hide` cannot find (a repr's doubled backslash, a long value cut short).
SECRET_FAILURE = f"invalid (the value is not shown: {MAY_BE_SECRET})"


def failure_reason(path: str, reason: str, props: Mapping[str, Any]) -> str:
    """The reason a check failure at ``path`` (a dotted property path) shows: none of a
    secret input (or of a value inside one), any other with the secrets hidden."""
    if path.split(".", 1)[0] in secret_inputs(props):
        return SECRET_FAILURE
    return hide(reason, secret_values(props))


def _texts(value: Any, found: set[str]) -> None:
    if isinstance(value, Mapping):
        for item in value.values():
            _texts(item, found)
    elif isinstance(value, list):
        for item in value:
            _texts(item, found)
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value):
        found.add(str(value))
        found.add(repr(str(value))[1:-1])  # as a message quotes it: 'a\\b', '\\t'


def has_unknowns(value: Any) -> bool:
    """Whether a value (or anything inside it) is not known yet (preview)."""
    value = rpc.unwrap_rpc_secret(value)
    if isinstance(value, Unknown) or value == rpc.UNKNOWN:
        return True
    if isinstance(value, Mapping):
        return any(has_unknowns(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_unknowns(v) for v in value)
    return False


def checked_inputs(news: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs as check returns them: plain values, control fields kept as given."""
    return {
        key: (value if key in CONTROL_FIELDS or has_unknowns(value) else plain(value))
        for key, value in news.items()
    }


def spec_body(props: Mapping[str, Any]) -> dict[str, Any]:
    """The spec document held in a property bag (control fields and outputs dropped)."""
    return {
        key: plain(value)
        for key, value in props.items()
        if key not in CONTROL_FIELDS and key not in OUTPUT_FIELDS
    }


def resource_label(props: Mapping[str, Any]) -> str:
    """``pulumi:Kind/stream/name``: where problems with these inputs are reported, each
    part escaped (``printable``: a name holding ESC or U+202E is shown as ``\\x1b``,
    ``\\u202e`` wherever the label is printed)."""
    parts = [
        printable(str(plain(props.get(f)))) for f in IDENTITY_FIELDS if props.get(f) is not None
    ]
    return "pulumi:" + "/".join(parts)


def to_spec(props: Mapping[str, Any]) -> Spec:
    """Validate a property bag as one spec document; raises SpecError with every problem.

    A consumer is validated next to an ``external`` declaration of its stream: the stream
    is another resource (or managed elsewhere), not part of this document.
    """
    body = spec_body(props)
    source = Location(resource_label(props), 0)
    documents = [Document(body=body, source=source, locations={})]
    if body.get("kind") == "Consumer" and isinstance(body.get("stream"), str):
        stream = {"kind": "Stream", "name": body["stream"], "external": True}
        documents.append(Document(body=stream, source=source, locations={}))
    specs = validate_documents(documents)
    return next(s for s in specs if not s.external)


#: The kinds this provider manages: KeyValue entries (values, not configs) are applied by
#: ``reconcile apply`` only.
PROVIDER_KINDS: tuple[str, ...] = tuple(kind for kind in KINDS if kind != "KeyValueEntry")


def kind_problem(props: Mapping[str, Any]) -> str | None:
    """A message when ``kind`` is missing or not one this provider manages."""
    kind = plain(props.get("kind"))
    if kind in PROVIDER_KINDS:
        return None
    if kind == "KeyValueEntry":
        return "KeyValueEntry is not managed through Pulumi: apply it with `reconcile apply`"
    return f"kind must be one of {', '.join(PROVIDER_KINDS)} (got {kind!r})"


def spec_failures(err: SpecError) -> list[tuple[str, str]]:
    """(property, reason) for each problem of a SpecError, the property a dotted path;
    names and values in both escaped (``printable``) for the terminal Pulumi prints to."""
    return [(printable(problem.path), printable(problem.message)) for problem in err.problems]
