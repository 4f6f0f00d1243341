"""What the importers of other tools' files share (``terraform``, ``nack``): field
renaming, shape checks, and validation into an :class:`~reconciler.importers.ImportResult`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.errors import Problem, brief
from reconciler.importers import ImportResult
from reconciler.specs.document import Document
from reconciler.specs.fields import MAY_BE_SECRET, is_secret, mentions_secret
from reconciler.specs.validate import validate_documents


def renamed(values: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The fields of ``values`` that are set (not empty, zero or false), under the names
    ``names`` gives them, in ``names``' order: another tool's field names as the API's."""
    return {wire: values[theirs] for theirs, wire in names.items() if values.get(theirs)}


#: What a field of another tool's resource holds: None (anything), a type (a value of it),
#: a mapping (an object whose listed fields, when set, hold theirs) or a one-item list (a
#: list of what it names). The mappings read objects and lists where these say so.
Shape = None | type | Mapping[str, "Shape"] | list["Shape"]

_NAMES = {int: "an integer", str: "a string"}


def misshapen(value: Any, shape: Shape, path: str) -> list[tuple[str, str]]:
    """(dotted path, what is wrong) wherever ``value`` (at ``path``) does not hold
    ``shape``; an unset value (None) holds any. A hostile file's misplaced list or
    string is an error at its line this way, before any mapping reads it."""
    if shape is None or value is None:
        return []
    if isinstance(shape, list):
        if not isinstance(value, list):
            return [(path, f"expected a list, got {_got(value, path)}")]
        return [
            found
            for index, item in enumerate(value)
            for found in misshapen(item, shape[0], _join(path, index))
        ]
    if isinstance(shape, type):
        if isinstance(value, shape) and not isinstance(value, bool):
            return []
        return [(path, f"expected {_NAMES.get(shape, shape.__name__)}, got {_got(value, path)}")]
    if not isinstance(value, dict):
        return [(path, f"expected an object, got {_got(value, path)}")]
    return [
        found
        for field, inner in shape.items()
        for found in misshapen(value.get(field), inner, _join(path, field))
    ]


#: A value's kind, said where the value is not (:func:`_got`).
_KINDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _got(value: Any, path: str) -> str:
    """The value found, quoted (:func:`brief`); only its kind where it may be a secret:
    under a secret-looking name (an Account's ``token``, ``nkey``, ``user.secret``: any
    part of ``path``, ``specs.fields.is_secret``) or holding one (a URL with
    credentials), as a spec's schema errors say it (``specs.schema``)."""
    if any(is_secret(part) for part in path.split(".")) or mentions_secret(str(value)):
        kind = _KINDS.get(type(value), "a list" if isinstance(value, list) else "an object")
        return f"{kind} (the value is not shown: {MAY_BE_SECRET})"
    return brief(value)


def _join(path: str, key: str | int) -> str:
    return f"{path}.{key}" if path else str(key)


def validated(
    documents: list[Document],
    warnings: list[Problem],
    *,
    strict: bool,
    environments: dict[str, dict[str, Any]] | None = None,
) -> ImportResult:
    """An importer's documents validated as ``reconcile validate`` does (every problem
    raised at once as SpecError); the validation's warnings join the importer's."""
    specs = validate_documents(documents, warnings=warnings, strict=strict)
    return ImportResult(specs, warnings, environments or {})
