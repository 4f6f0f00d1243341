"""Overlays: per-environment changes to the shared specs, as JSON Merge Patch (RFC 7386).

An overlay document names the resource it changes the way a spec does (``kind``,
``name`` and, for a consumer, ``stream``); every other key is merged into that resource's
document: a mapping merges key by key, ``null`` removes a field, anything else (a list
included) replaces it. ``$patch: delete`` removes the resource from the environment
(the Kustomize word). Resources only one environment declares are plain spec files
listed under the environment's ``resources``.

Overlays apply to documents before validation, so the merged result is validated as a
whole; a problem in a merged document points at the line that set the value (base or
overlay) and names both documents. An overlay naming a resource the shared specs do not
declare is an error, as is a second ``$patch: delete`` of one resource.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.errors import Problem
from reconciler.locations import Location
from reconciler.specs.document import Document
from reconciler.specs.schema import did_you_mean

PATCH_KEY = "$patch"
PATCH_OPS = ("merge", "delete")
#: Keys that say which resource an overlay changes; never merged.
IDENTITY_KEYS = frozenset({"kind", "name", "stream", "durable_name", PATCH_KEY, "$schema"})

Identity = tuple[str, str, str]  # (kind, stream of a consumer or "", name)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` applied to ``target`` (neither is modified)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def identity(body: Mapping[str, Any]) -> Identity | None:
    """Which resource a document declares (or an overlay changes), if it says so."""
    kind = body.get("kind")
    entry = kind == "KeyValueEntry"
    name = body.get("key") if entry else body.get("name", body.get("durable_name"))
    if not isinstance(kind, str) or not isinstance(name, str):
        return None
    stream = body.get("bucket") if entry else body.get("stream") if kind == "Consumer" else ""
    if not isinstance(stream, str):
        return None
    return (kind, stream, name)


def label(ident: Identity) -> str:
    kind, stream, name = ident
    return f"{kind} {stream}/{name}" if stream else f"{kind} {name}"


def apply_overlays(
    documents: Sequence[Document], overlays: Sequence[Document], problems: list[Problem]
) -> list[Document]:
    """``documents`` with every overlay applied in order; problems are appended."""
    merged: dict[Identity, Document] = {}
    order: list[Identity | int] = []
    for index, document in enumerate(documents):
        ident = identity(document.body)
        if ident is None or ident in merged:
            order.append(index)  # invalid or duplicate: validation reports it as it is
            continue
        merged[ident] = document
        order.append(ident)
    deleted: dict[Identity, Location] = {}
    for overlay in overlays:
        ident = identity(overlay.body)
        if ident is None:
            message = "an overlay names its resource: kind, name (and stream for a consumer)"
            problems.append(Problem(overlay.source, "", message))
            continue
        op = overlay.body.get(PATCH_KEY, "merge")
        if op not in PATCH_OPS:
            message = f"{op!r} is not one of {', '.join(PATCH_OPS)}"
            problems.append(Problem(overlay.where(PATCH_KEY), PATCH_KEY, message))
            continue
        if ident in deleted:
            message = f"{label(ident)} was already deleted by the overlay at {deleted[ident]}"
            problems.append(Problem(overlay.source, "", message))
            continue
        base = merged.get(ident)
        if base is None:
            hint = did_you_mean(ident[2], sorted(i[2] for i in merged if i[0] == ident[0]))
            message = f"overlay for {label(ident)}: no such resource in the shared specs{hint}"
            problems.append(Problem(overlay.where("name"), "name", message))
            continue
        if op == "delete":
            deleted[ident] = overlay.source
            del merged[ident]
            continue
        merged[ident] = _merged(base, overlay)
    result = []
    for item in order:
        if isinstance(item, int):
            result.append(documents[item])
        elif item in merged:
            result.append(merged[item])
    return result


def _merged(base: Document, overlay: Document) -> Document:
    patch = {k: v for k, v in overlay.body.items() if k not in IDENTITY_KEYS}
    body = merge_patch(base.body, patch)
    locations = dict(base.locations)
    for path in _replaced_paths(patch):
        for key in [k for k in locations if k == path or k.startswith(path + ".")]:
            del locations[key]
    locations.update(
        (path, where)
        for path, where in overlay.locations.items()
        if path.split(".", 1)[0] not in IDENTITY_KEYS
    )
    return Document(body=body, source=base.source, locations=locations, overlay=overlay.source)


def _replaced_paths(patch: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The paths a patch replaces or removes (not the mappings it merges into)."""
    paths = []
    for key, value in patch.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            paths.extend(_replaced_paths(value, path + "."))
        else:
            paths.append(path)
    return paths
