"""Live state → spec documents that plan empty against the server they came from.

Each resource is written with the fewest fields that reproduce its canonical config: a
field is left out when leaving it out gives the same desired config (so defaults, derived
defaults and the managed marker do not clutter the files). Durations and sizes come out
in the shortest exact human unit; buckets come out as KeyValue / ObjectStore documents.
"""

from __future__ import annotations

import base64
import hashlib
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from reconciler.errors import Problem, ReconcileError
from reconciler.identity import ResourceRef, is_reserved
from reconciler.locations import Location
from reconciler.model.buckets import bucket_config
from reconciler.model.migration import is_filling, is_temp, temp_name
from reconciler.model.normalize import (
    NAME_FIELDS,
    STREAM_NAME_FIELDS,
    VERBATIM_FIELDS,
    desired_config,
    inherited,
    is_managed,
    json_copy,
    live_config,
    named_as_declared,
    owner_of,
)
from reconciler.model.state import LiveState, ServerInfo
from reconciler.model.values import entry_text, printable
from reconciler.specs.document import Document
from reconciler.specs.lifecycle import PROTECT_KEY, recorded_protection
from reconciler.specs.schema import quick_check, schema_problems
from reconciler.specs.spec import (
    DEFAULT_OWNER,
    MANAGED_KEY,
    OWNER_KEY,
    UNDIFFED_METADATA,
    Kind,
    Spec,
)
from reconciler.specs.units import to_human
from reconciler.specs.validate import spec_from_document

_LIVE = Location("<live>", 0)
_KEEP = frozenset({"name"})


@dataclass(frozen=True)
class ExportedFile:
    """One file of the export: a stream (or bucket) and its consumers."""

    name: str  # file name, e.g. "stream-ORDERS.yaml"
    documents: tuple[dict[str, Any], ...]


def export_state(
    live: LiveState,
    *,
    owner: str | None = DEFAULT_OWNER,
    on_skip: Callable[[str], None] | None = None,
) -> list[ExportedFile]:
    """Spec documents for the streams, buckets and consumers on the server.

    With ``owner``, resources another owner manages are left out (a plan of the export,
    even with prune, then touches nothing of theirs); ``None`` exports everything.
    The streams of an interrupted migration (its temporary stream, and the new stream
    while it is filled) are migration internals, not specs: left out, and ``on_skip``
    is told why.
    """
    files: list[ExportedFile] = []
    by_stream: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for (stream, consumer), consumer_config in sorted(live.consumers.items()):
        if _mine(consumer_config, owner):
            by_stream.setdefault(stream, []).append((consumer, consumer_config))
    heads: dict[bytes, dict[str, Any]] = {}  # by _stream_shape
    shapes: dict[bytes, dict[str, Any]] = {}  # by _shape
    for stream in sorted(live.streams):
        config = live.streams[stream]
        if is_reserved(stream) or not _mine(config, owner):
            continue  # the tool's own apply lock; another owner's stream
        if (why := _migration_internal(stream, config)) is not None:
            if on_skip is not None:
                on_skip(why)
            continue
        ref = ResourceRef.of_stream(stream, config)
        key = _stream_shape(ref.kind, stream, config)
        head = heads.get(key) if key is not None else None
        own = {"name": stream, "subjects": config.get("subjects"), **_verbatim(ref.kind, config)}
        if head is None:
            head = _stream_document(ref.kind, ref.name, config, live.server)
            if key is not None and _holds(head, own):
                heads[key] = head
        else:
            head = _copy(head, **own)
        ref = ResourceRef(head["kind"], head["name"])  # a bucket may export as its stream
        if (refused := _refused(head)) is not None:
            if on_skip is not None:
                on_skip(_unwritable(ref, refused, config, len(by_stream.get(stream, []))))
            continue
        docs = [head]
        limits = inherited(config)
        for consumer, consumer_config in by_stream.get(stream, []):
            key = _shape(consumer, consumer_config, limits)
            known = shapes.get(key) if key is not None else None
            own = {"name": consumer, "stream": stream, **_verbatim("Consumer", consumer_config)}
            if known is None:
                known = _consumer_document(stream, consumer, consumer_config, config, live.server)
                if key is not None and _holds(known, own):
                    shapes[key] = known
            document = _copy(known, **own)
            if (refused := _refused(document)) is not None:
                if on_skip is not None:
                    consumer_ref = ResourceRef("Consumer", consumer, stream)
                    on_skip(_unwritable(consumer_ref, refused, consumer_config, 0))
                continue
            docs.append(document)
        files.append(ExportedFile(name=file_name(ref), documents=tuple(docs)))
    return files


def _refused(document: dict[str, Any]) -> Problem | None:
    """The first problem ``validate`` would find in an exported document's schema; None
    for nearly every one (jsonschema-rs says so in a microsecond). The server takes names
    and subjects the schema refuses: a control or invisible format character (ESC, a
    bidi override; docs/spec-format.md), a vertical tab."""
    if quick_check(str(document["kind"]))(document):
        return None
    problems = schema_problems(Document(body=document, source=_LIVE))
    return problems[0] if problems else None


def _unwritable(
    ref: ResourceRef, problem: Problem, config: Mapping[str, Any], consumers: int
) -> str:
    """Why a live resource is left out of the export: the spec written for it would be
    refused (``problem``, its value escaped). It stays on the server as it is; a plan of
    the files deletes it with ``--prune`` only when this tool manages it."""
    with_consumers = f" and its {consumers} consumer(s)" if consumers else ""
    pruned = (
        " It carries the managed-by marker: a plan of the exported files with --prune deletes it."
        if is_managed(config)
        else ""
    )
    return (
        f"skipped {ref.kind} {printable(ref.path)}{with_consumers}, which no spec can "
        f"declare (no file is written for it): {problem.path}: {problem.message}.{pruned}"
    )


def _migration_internal(stream: str, config: Mapping[str, Any]) -> str | None:
    """Why ``stream`` is part of an interrupted migration, not a spec; None: it is not."""
    if is_temp(config):
        return (
            f"skipped stream {stream}: the temporary stream of an interrupted migration "
            "(docs/migrate.md: resume or roll it back, then export again)"
        )
    if is_filling(config, stream):
        return (
            f"skipped stream {stream}: mid-migration, still filled from {temp_name(stream)} "
            "(docs/migrate.md: resume or roll it back, then export again)"
        )
    return None


def _shape(name: str, config: Mapping[str, Any], limits: Mapping[str, Any]) -> bytes | None:
    """A consumer's config less its name, with what it inherits from its stream:
    consumers with the same shape export the same document but for the name and the
    stream (their desired configs differ only in ``CONSUMER_NAME_FIELDS``, and take
    nothing else from the stream than :func:`inherited`), so it is worked out once per
    shape, not per consumer (at 200,000 consumers most share a handful of shapes).
    None: the names disagree."""
    names = named_as_declared("Consumer", name, {}, config)
    if names is None:
        return None
    own = _verbatim("Consumer", config)
    rest = {k: v for k, v in config.items() if k not in names and k not in own}
    return orjson.dumps([rest, limits, sorted(own)], option=orjson.OPT_SORT_KEYS)


def _stream_shape(kind: Kind, name: str, config: Mapping[str, Any]) -> bytes | None:
    """A stream's config less its name and subjects: streams with the same shape (and
    subjects of their own) export the same document but for those two fields
    (``STREAM_NAME_FIELDS``). None: a bucket, a stream listening on its own name or on
    nothing (where the name decides its subjects), or names that disagree."""
    subjects = config.get("subjects")
    if kind != "Stream" or config.get("name") != name or not subjects or subjects == [name]:
        return None
    own = _verbatim(kind, config)
    rest = {k: v for k, v in config.items() if k not in STREAM_NAME_FIELDS and k not in own}
    return orjson.dumps([rest, sorted(own)], option=orjson.OPT_SORT_KEYS)


def _verbatim(kind: str, config: Mapping[str, Any]) -> dict[str, str]:
    """The fields of ``config`` taken verbatim (``VERBATIM_FIELDS``: a consumer's
    ``filter_subject``, a description) that hold text: such a field is in the document
    exactly as it is in the config, and decides nothing else of it, so configs that
    differ only in its text share a shape (each consumer filtering its own subject, each
    stream described in its own words: every one was worked out alone). An empty or
    odd value stays in the shape."""
    fields = VERBATIM_FIELDS.get(kind, ())
    return {f: v for f in fields if isinstance(v := config.get(f), str) and v}


def _holds(document: Mapping[str, Any], own: Mapping[str, Any]) -> bool:
    """Whether ``document`` holds each of ``own`` as it is: then the document of another
    resource of its shape is a copy with that resource's values of them."""
    return all(document.get(k) == v for k, v in own.items())


def _copy(document: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A copy of a document with other values of ``fields`` (each in its place)."""
    copy = {k: json_copy(v) for k, v in document.items()}
    copy.update((k, json_copy(v)) for k, v in fields.items())
    return copy


def _mine(config: Mapping[str, Any], owner: str | None) -> bool:
    holder = owner_of(config)
    return owner is None or holder is None or holder == owner


#: Longest file name written (most file systems allow 255 bytes).
MAX_FILE_NAME = 200
_PREFIX = {"Stream": "stream", "KeyValue": "kv", "ObjectStore": "objectstore"}


def file_name(ref: ResourceRef) -> str:
    """``stream-ORDERS.yaml``: injective and reversible (:func:`name_of_file`), the
    name written by :func:`encoded_name`. Names differing only in case:
    :func:`case_twin_name`."""
    prefix = f"{_PREFIX[ref.kind]}-"
    room = MAX_FILE_NAME - len(".yaml") - len(prefix)
    return f"{prefix}{encoded_name(ref.name, room)}.yaml"


def encoded_name(name: str, room: int) -> str:
    """``name`` as (part of) a file or folder name of at most ``room`` characters, the
    one rule of the export's files and a backup's stream folders (``backup.layout``).

    Letters, digits, ``_`` and ``-`` stay; every other byte of the UTF-8 name is written
    as ``%XX`` (``A+B`` → ``A%2BB``, ``A_B`` stays; ESC → ``%1B``, U+200B →
    ``%E2%80%8B``), so no two names share a file and no control or invisible character
    reaches a file system. A name longer than ``room`` keeps its start and gains ``~``
    and a hash of the whole name.
    """
    encoded = "".join(
        c
        if c.isascii() and (c.isalnum() or c in "-_")
        else "".join(f"%{b:02X}" for b in c.encode())
        for c in name
    )
    if len(encoded) > room:
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        encoded = f"{encoded[: room - 18]}~{digest}"
    return encoded


def case_twin_name(file: str, suffix: str = ".yaml") -> str:
    """The name of ``file`` (a :func:`file_name`, or a folder's :func:`encoded_name`
    with ``suffix`` "") when the export already has a file of that name in other case
    (``stream-ORDERS.yaml``, ``stream-orders.yaml``: one file on a case-insensitive disk,
    macOS's or Windows's, where the second replaced the first): its stem gains a hash of
    the whole name, as a long name does."""
    digest = hashlib.sha256(file.encode()).hexdigest()[:16]
    stem = file.removesuffix(suffix)
    return f"{stem[: MAX_FILE_NAME - len(suffix) - 18]}~{digest}{suffix}"


def apart_in_case(names: Iterable[str], suffix: str = ".yaml") -> list[str]:
    """``names`` (distinct :func:`file_name` or :func:`encoded_name` results) in their
    order, each one met again in other case made its :func:`case_twin_name`: no two
    equal in any case, so a case-insensitive disk keeps them all."""
    out: list[str] = []
    folded: set[str] = set()  # the names in lower case (encoded_name writes only ASCII)
    for given in names:
        name = case_twin_name(given, suffix) if given.lower() in folded else given
        if name.lower() in folded:
            raise ReconcileError(f"two resources map to the file {name}")
        folded.add(name.lower())
        out.append(name)
    return out


def name_of_file(file: str) -> tuple[str, str] | None:
    """``(kind, name)`` of a file :func:`file_name` wrote (None: a shortened long name)."""
    stem = file.removesuffix(".yaml")
    prefix, _, encoded = stem.partition("-")
    kinds = {p: k for k, p in _PREFIX.items()}
    if prefix not in kinds or "~" in encoded:
        return None
    return kinds[prefix], urllib.parse.unquote(encoded, errors="strict")


def _clean_metadata(config: dict[str, Any]) -> None:
    metadata = {
        k: v
        for k, v in (config.get("metadata") or {}).items()
        if k not in (MANAGED_KEY, OWNER_KEY, PROTECT_KEY) and k not in UNDIFFED_METADATA
    }
    if metadata:
        config["metadata"] = metadata
    else:
        config.pop("metadata", None)


def _stream_document(
    kind: Kind, name: str, config: Mapping[str, Any], server: ServerInfo
) -> dict[str, Any]:
    """A stream's document; a bucket's when the bucket fields say everything about it.

    A bucket made by another client is still a bucket: the fields some clients set
    differently (nats-py's ``allow_direct: false`` and ``allow_msg_ttl: true``;
    ``model.buckets.CLIENT_FIELDS``) are kept in its document. A ``KV_``/``OBJ_`` stream
    holding settings no bucket spec can express is exported as the Stream it is: the
    document is a bucket's only when its desired config is exactly the stream's, so
    applying the export changes nothing.
    """
    stream = live_config("Stream", config, server)
    _clean_metadata(stream)
    if kind != "Stream":
        body = bucket_config(kind, name, config)
        _clean_metadata(body)
        target = _desired("Stream", config["name"], stream, server)
        if _desired(kind, name, body, server) == target:
            document = {"kind": kind, **to_human(kind, minimal(kind, name, body, server))}
            if _read_back(document, server) == target:
                return _protected(document, config)
        kind, name = "Stream", str(config["name"])
    return _protected({"kind": kind, **to_human(kind, minimal(kind, name, stream, server))}, config)


def _protected(document: dict[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` saying ``lifecycle: {prevent_destroy: true}`` when the live config
    records that protection (the tool's record, not metadata to copy): an export applied
    keeps the resource protected."""
    if recorded_protection(config) is not None:
        document["lifecycle"] = {"prevent_destroy": True}
    return document


def _read_back(document: Mapping[str, Any], server: ServerInfo) -> dict[str, Any] | None:
    """The desired config of ``document`` read as a user's file is (validated as
    ``validate`` does); None: validation refuses it (a ``KV_`` stream keeping 70 values
    per key is no bucket: ``history`` is 1-64)."""
    problems: list[Problem] = []
    spec = spec_from_document(Document(body=dict(document), source=_LIVE), problems)
    if spec is None or any(not p.warning for p in problems):
        return None
    return desired_config(spec, server)


def _desired(kind: Kind, name: str, body: Mapping[str, Any], server: ServerInfo) -> dict[str, Any]:
    return desired_config(Spec(kind=kind, name=name, config=dict(body), source=_LIVE), server)


def _consumer_document(
    stream: str,
    name: str,
    config: Mapping[str, Any],
    stream_config: Mapping[str, Any],
    server: ServerInfo,
) -> dict[str, Any]:
    body = live_config("Consumer", config, server, stream_config=stream_config)
    _clean_metadata(body)
    body.pop("durable_name", None)
    body = minimal("Consumer", name, body, server, stream=stream, stream_config=stream_config)
    body["name"] = name
    return _protected({"kind": "Consumer", "stream": stream, **to_human("Consumer", body)}, config)


def minimal(
    kind: Kind,
    name: str,
    config: Mapping[str, Any],
    server: ServerInfo,
    *,
    stream: str | None = None,
    stream_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``config`` without the fields whose absence yields the same desired config.

    Fast path: drop at once every field whose value is what the server would fill in
    for a config naming nothing but the resource, then check the whole result once.
    Only when a derived default makes that check fail (a field whose default depends on
    another) is each field tried alone, as the definition says. Either way the result
    plans empty: it is verified against the full config's desired form.
    """

    def desired(body: Mapping[str, Any]) -> dict[str, Any]:
        spec = Spec(kind=kind, name=name, config=dict(body), source=_LIVE, stream=stream)
        return desired_config(spec, server, stream_config=stream_config)

    target = desired(config)
    bare = desired({"name": name})
    quick = {
        k: v for k, v in config.items() if k in _KEEP or k not in bare or bare[k] != target.get(k)
    }
    if desired(quick) == target:
        kept = _fewer(quick, target, desired)
    else:
        kept = _fewer(dict(config), target, desired)
    return {"name": name, **{k: v for k, v in kept.items() if k != "name"}}


def _fewer(
    config: dict[str, Any],
    target: Mapping[str, Any],
    desired: Callable[[Mapping[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    """``config`` less each field (one at a time) whose absence keeps ``target``."""
    kept = dict(config)
    for key in list(config):
        if key in _KEEP:
            continue
        trial = {k: v for k, v in kept.items() if k != key}
        if desired(trial) == target:
            kept = trial
    return kept


def entry_document(spec: Spec) -> dict[str, Any]:
    """A KeyValueEntry as a document: text values as text (``model.values.entry_text``:
    line breaks included), others in base64."""
    doc: dict[str, Any] = {"kind": "KeyValueEntry", "bucket": spec.stream, "key": spec.name}
    text = entry_text(base64.b64decode(str(spec.config["value"])))
    if text is not None:
        doc["value"] = text
    else:
        doc.update(value=str(spec.config["value"]), encoding="base64")
    if spec.config.get("secret"):
        doc["secret"] = True
    return doc


def import_files(specs: list[Spec], server: ServerInfo) -> list[ExportedFile]:
    """Specs read from another tool's files (``nats`` CLI configs, backup folders), written
    back as this tool's files: one per stream or bucket with its consumers, each with the
    fewest fields that mean the same config on ``server``, durations and sizes in human
    units. Nothing is added: no marker, no value the files did not hold."""
    streams = {s.stream_name: s for s in specs if not s.ref.is_child}
    consumers: dict[str, list[Spec]] = {}
    entries: dict[str, list[Spec]] = {}
    for spec in specs:
        if spec.kind == "Consumer" and spec.stream:
            consumers.setdefault(spec.stream, []).append(spec)
        elif spec.kind == "KeyValueEntry":
            entries.setdefault(spec.stream_name, []).append(spec)
    files = []
    heads: dict[str, dict[str, Any]] = {}  # by _declared_shape, streams and buckets
    shapes: dict[str, dict[str, Any]] = {}  # by _declared_shape, consumers
    configs: dict[str, dict[str, Any]] = {}  # desired stream configs, by _declared_shape
    for name in sorted(set(streams) | set(consumers) | set(entries)):
        docs: list[dict[str, Any]] = []
        stream = streams.get(name)
        stream_config = None
        ref = ResourceRef("Stream", name)
        if stream is not None:
            ref = stream.ref
            if name in consumers:
                stream_config = _stream_config(stream, server, configs)
            docs.append(_imported_stream(stream, server, heads))
            if stream.external:
                docs[-1]["external"] = True
        limits = inherited(stream_config or {})
        for spec in sorted(consumers.get(name, []), key=lambda s: s.name):
            key = _declared_shape("Consumer", spec.name, spec.config, limits)
            known = shapes.get(key) if key is not None else None
            own = {"name": spec.name, "stream": name, **_verbatim("Consumer", spec.config)}
            if known is None:
                config = {k: v for k, v in spec.config.items() if k != "durable_name"}
                body = minimal(
                    "Consumer", spec.name, config, server, stream=name, stream_config=stream_config
                )
                known = {"kind": "Consumer", "stream": name, **to_human("Consumer", body)}
                if key is None or not _holds(known, own):
                    docs.append(known)
                    continue
                shapes[key] = known
            docs.append(_copy(known, **own))
        for spec in sorted(entries.get(name, []), key=lambda s: s.name):
            if stream is None:
                ref = ResourceRef("KeyValue", str(spec.stream))
            docs.append(entry_document(spec))
        files.append(ExportedFile(name=file_name(ref), documents=tuple(docs)))
    return files


def _stream_config(
    stream: Spec, server: ServerInfo, configs: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The desired config of a stream with consumers, for what they inherit from it
    (:func:`~reconciler.model.normalize.inherited`: its consumer limits, which its name,
    subjects and description do not decide): worked out once per shape."""
    key = _declared_shape(stream.kind, stream.name, stream.config, {})
    known = configs.get(key) if key is not None else None
    if known is None:
        known = desired_config(stream, server)
        if key is not None:
            configs[key] = known
    return known


def _imported_stream(
    stream: Spec, server: ServerInfo, heads: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """A stream's (or bucket's) imported document, worked out once per shape as
    :func:`export_state` does for live streams (:func:`_declared_shape`)."""
    own = {f: stream.config.get(f) for f in _IMPORT_NAME_FIELDS[stream.kind]}
    own.update(_verbatim(stream.kind, stream.config))
    key = _declared_shape(stream.kind, stream.name, stream.config, {})
    head = heads.get(key) if key is not None else None
    if head is not None:
        return _copy(head, **own)
    body = minimal(stream.kind, stream.name, stream.config, server)
    head = {"kind": stream.kind, **to_human(stream.kind, body)}
    if key is not None and _holds(head, own):
        heads[key] = head
        return _copy(head)  # the caller may add to it (``external``)
    return head


#: The fields of a declared stream or bucket that its name decides, and nothing else:
#: a stream's ``NAME_FIELDS``; a bucket's ``name``, which decides its stream's name and
#: subjects and, without mirror or sources, nothing else of it
#: (``model.buckets.kv_stream_config``, ``object_stream_config``).
_IMPORT_NAME_FIELDS: Mapping[str, tuple[str, ...]] = {
    **NAME_FIELDS,
    "KeyValue": ("name",),
    "ObjectStore": ("name",),
}
#: What a bucket's name decides more of when it is set: its sources' subject transforms.
_BUCKET_ORIGINS = ("mirror", "sources")


def _declared_shape(
    kind: Kind, name: str, config: Mapping[str, Any], limits: Mapping[str, Any]
) -> str | None:
    """A declared config less its name fields (:data:`_IMPORT_NAME_FIELDS`), with what a
    consumer inherits from its stream: resources of one kind with the same shape import
    as the same document but for those fields (:func:`_shape`, :func:`_stream_shape`:
    desired_config gives a consumer's name fields its name whatever the config says, a
    stream's name its name, a bucket's name its stream's name and subjects, and reads
    nothing else of them), so :func:`minimal` runs once per shape. The key keeps the
    fields' order (the document's order) and tells apart what JSON would not (``repr``:
    1, 1.0, True, NaN and None differ). None: a stream whose subjects are not its own; a
    bucket with a mirror or sources (its name decides their subject transforms)."""
    if kind == "Stream":
        subjects = config.get("subjects")
        if config.get("name") != name or not subjects or subjects == [name]:
            return None
    elif kind in ("KeyValue", "ObjectStore"):
        if config.get("name") != name or any(k in config for k in _BUCKET_ORIGINS):
            return None
    elif kind != "Consumer":
        return None
    fields = (*_IMPORT_NAME_FIELDS[kind], *_verbatim(kind, config))
    rest = [(k, v) if k not in fields else (k,) for k, v in config.items()]
    return repr((kind, rest, sorted(limits.items())))
