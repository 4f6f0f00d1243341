"""Loading spec files into documents that remember where every value came from.

``load_documents(paths)`` reads YAML (many ``---`` separated documents per file) and JSON
(one object or a list) from files and directories (recursive, sorted, hidden folders
skipped). Every value keeps its ``FILE:LINE``. JSON files written by the ``nats`` CLI (a
stream or consumer config or info) and the files of a ``nats backup`` folder
(``stream_NAME.json``, ``stream_NAME_consumer_CONS.json``) are read too; their ``kind``
is inferred from their content (:func:`_infer_kind`).

Whatever the input (binary garbage, symlink loops, YAML bombs, deep nesting), the loader
raises nothing but :class:`~reconciler.errors.SpecError`, carrying every problem found.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import json
import os
import re
import stat
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from reconciler.errors import Lines, Location, Problem, SpecError, brief, closest_location

SPEC_SUFFIXES = (".yaml", ".yml", ".json")
MAX_DEPTH = 64
MAX_NODES = 100_000  # per document, counting every alias expansion
MAX_FILE_BYTES = 16 * 1024 * 1024  # a spec file larger than this is refused unread
MAX_DOCUMENTS = 50_000  # per file

_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_RESOLVER: Any = yaml.resolver.Resolver()
_SCALARS: Mapping[str, Any] = {
    "tag:yaml.org,2002:null": lambda node: None,
    "tag:yaml.org,2002:bool": _CONSTRUCTOR.construct_yaml_bool,
    "tag:yaml.org,2002:int": _CONSTRUCTOR.construct_yaml_int,
    "tag:yaml.org,2002:float": _CONSTRUCTOR.construct_yaml_float,
    "tag:yaml.org,2002:str": lambda node: sys.intern(node.value),  # values repeat, too
    "tag:yaml.org,2002:timestamp": lambda node: node.value,  # RFC 3339 stays a string
}
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class Document:
    """One spec document: plain JSON-able values plus the location of each of them."""

    body: dict[str, Any]
    source: Location
    locations: Mapping[str, Location] = field(default_factory=dict)
    #: the first line of the overlay document merged into this one, if any
    overlay: Location | None = None

    def where(self, path: str) -> Location:
        """The location of a field (or the closest enclosing one, or the document)."""
        return closest_location(self.locations, path, self.source)


class _Abort(Exception):
    """Stops reading one document or file; carries the problem to report."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def load_documents(paths: Sequence[str | Path]) -> list[Document]:
    """Every non-empty document of the given files and folders, in a stable order."""
    problems: list[Problem] = []
    documents: list[Document] = []
    for path in spec_files(paths, problems):
        documents.extend(load_file(path, problems))
    errors = [p for p in problems if not p.warning]  # warnings: see validate.load_specs
    if errors:
        raise SpecError(errors)
    return documents


# --- files and folders -------------------------------------------------------------------


def spec_files(paths: Sequence[str | Path], problems: list[Problem]) -> list[Path]:
    """The files to read: explicit files as given, folders walked (sorted, loop-safe)."""
    files: list[Path] = []
    seen: set[str] = set()
    for raw in paths:
        path = Path(raw)
        try:
            is_dir = path.is_dir()
            exists = path.exists()
        except OSError as err:  # ELOOP on a self-referencing link, too long names, ...
            problems.append(_file_problem(path, _os_message(err)))
            continue
        if is_dir:
            candidates = list(_walk(path, problems))
        elif exists:
            candidates = [path]
        else:
            message = "symlink loop or broken link" if path.is_symlink() else "no such file"
            problems.append(_file_problem(path, message))
            continue
        for candidate in candidates:
            real = os.path.realpath(candidate)
            if real not in seen:
                seen.add(real)
                files.append(candidate)
    return files


def _walk(root: Path, problems: list[Problem]) -> Iterator[Path]:
    def unreadable(err: OSError) -> None:
        problems.append(_file_problem(Path(err.filename or root), _os_message(err)))

    # realpaths of the folders on the way down to each folder: a link back to one is a loop
    trail: dict[str, frozenset[str]] = {str(root): frozenset({os.path.realpath(root)})}
    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable, followlinks=True):
        above = trail.pop(dirpath, frozenset())
        kept = []
        for name in sorted(dirnames):
            if name.startswith("."):
                continue
            target = os.path.realpath(os.path.join(dirpath, name))
            if target in above:
                link = Path(dirpath, name)
                problems.append(_file_problem(link, f"symlink loop: points back to {target}"))
                continue
            kept.append(name)
            trail[os.path.join(dirpath, name)] = above | {target}
        dirnames[:] = kept
        for name in sorted(filenames):
            if name.endswith(SPEC_SUFFIXES) and not name.startswith("."):
                yield Path(dirpath, name)


def _file_problem(path: Path, message: str) -> Problem:
    return Problem(Location(str(path), 1), "", message)


def _os_message(err: OSError) -> str:
    if getattr(err, "errno", None) == errno.ELOOP:
        return "symlink loop: the link points (indirectly) at itself"
    return f"cannot read: {err.strerror or err}"


def load_file(path: Path, problems: list[Problem]) -> list[Document]:
    """The documents of one file; problems are appended, never raised."""
    name = str(path)
    try:
        text = _read_text(path)
        if path.suffix == ".json":
            return _json_documents(text, name, problems)
        return _yaml_documents(text, name, problems)
    except _Abort as abort:
        problems.append(abort.problem)
    except RecursionError:
        problems.append(_file_problem(path, f"nesting deeper than {MAX_DEPTH} levels"))
    return []


def _read_text(path: Path) -> str:
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode):
            raise _Abort(_file_problem(path, "not a regular file (a device, pipe or socket?)"))
        size = status.st_size
        if size > MAX_FILE_BYTES:
            limit = MAX_FILE_BYTES // (1024 * 1024)
            message = f"file too large: {size / 2**20:.1f} MiB (limit {limit} MiB); split it"
            raise _Abort(_file_problem(path, message))
        data = path.read_bytes()
    except OSError as err:
        raise _Abort(_file_problem(path, _os_message(err))) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        message = f"not a text file (invalid UTF-8 at byte {err.start}); expected YAML or JSON"
        raise _Abort(Problem(Location(str(path), line), "", message)) from None


# --- YAML --------------------------------------------------------------------------------


def _yaml_documents(text: str, name: str, problems: list[Problem]) -> list[Document]:
    return [
        _infer_kind(document, name, problems, wire=False)
        for document in _yaml_trees(text, name, problems)
    ]


def _yaml_trees(text: str, name: str, problems: list[Problem]) -> list[Document]:
    """The documents of a YAML text with every value's line (kind not inferred)."""
    if _fits_libyaml(text):
        found: list[Problem] = []
        fast: list[Document] = []
        try:
            for root in yaml.compose_all(text, Loader=_ComposingLoader):
                if (document := _document_from_node(root, name, found)) is not None:
                    fast.append(document)
        except yaml.YAMLError:
            pass  # reported the one careful way, below
        else:
            problems.extend(found)
            return fast
    documents = []
    try:
        for root in compose_documents(text, name):
            document = _document_from_node(root, name, problems)
            if document is not None:
                documents.append(document)
    except yaml.YAMLError as err:
        problems.append(_yaml_problem(err, text, name))
    return documents


_RESOLVED: dict[tuple[str, Any], str] = {}  # (plain scalar, implicit) -> tag


def _scalar_tag(event: Any) -> str:
    if event.tag not in (None, "!"):
        return str(event.tag)
    return _implicit_tag(event.value, event.implicit)


def _implicit_tag(value: str, implicit: Any) -> str:
    """The tag of an untagged scalar, each distinct short one resolved once (the
    resolver tries a list of regular expressions every time)."""
    key = (value, implicit)
    tag = _RESOLVED.get(key)
    if tag is None:
        tag = str(_RESOLVER.resolve(yaml.ScalarNode, value, implicit))
        if len(value) <= 64:
            if len(_RESOLVED) > 50_000:
                _RESOLVED.clear()
            _RESOLVED[key] = tag
    return tag


class _ComposingLoader(_YamlLoader):  # type: ignore[misc]
    """libyaml's loader, resolving scalar tags through the same cache."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode:
            return _implicit_tag(value, implicit)
        return super().resolve(kind, value, implicit)


#: The deepest nesting a text may be able to reach for libyaml's own composer to build
#: it (it recurses in C: about 30,000 levels crash a process on an 8 MiB stack).
C_COMPOSER_DEPTH = 2_000
_DOCUMENT_MARKER = re.compile(r"^(?:---|\.\.\.)(?=\s|$)", re.MULTILINE)


def _fits_libyaml(text: str) -> bool:
    """Whether libyaml's own composer (several times faster than
    :func:`compose_documents`) may build ``text``: it has at most ``MAX_DOCUMENTS``
    documents and cannot nest deep enough to crash it. A YAML error on that path sends
    the text down the careful one, so errors are always reported one way."""
    if _YamlLoader is yaml.SafeLoader:
        return False  # no libyaml: the careful path is the faster one
    chunks = _DOCUMENT_MARKER.split(text)
    return len(chunks) <= MAX_DOCUMENTS and _nesting_bound(chunks) <= C_COMPOSER_DEPTH


def _nesting_bound(chunks: list[str]) -> int:
    """An upper bound of how deep any node of a text split at its document markers
    nests. No collection spans a marker line; within a document, flow collections nest
    at most once per ``[`` or ``{``, and block collections at most twice per column of
    its longest line (a block sequence may sit at its parent key's indentation)."""
    deepest = 0
    for chunk in chunks:
        longest = max(map(len, chunk.split("\n")))
        deepest = max(deepest, chunk.count("[") + chunk.count("{") + 2 * longest + 2)
    return deepest


def compose_documents(text: str, name: str) -> Iterator[Any]:
    """The YAML node tree of each document, built from the event stream with an explicit
    stack. Unlike libyaml's composer (which recurses in C and crashes the process on a
    100,000-level ``[[[...]]]``) it refuses nesting deeper than MAX_DEPTH and more than
    MAX_DOCUMENTS documents, and it resolves each distinct plain scalar's tag only once."""
    anchors: dict[str, Any] = {}
    stack: list[list[Any]] = []  # [node, pending mapping key or None]
    root: Any = None
    documents = 0
    events: Iterator[Any] = yaml.parse(text, Loader=_YamlLoader)
    node: Any
    for event in events:
        kind = type(event)
        if kind is yaml.ScalarEvent:
            node = yaml.ScalarNode(
                _scalar_tag(event), event.value, event.start_mark, event.end_mark, event.style
            )
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            node = _collection_node(event, kind is yaml.MappingStartEvent)
            if len(stack) >= MAX_DEPTH:
                raise _Abort(_event_problem(event, name, f"nesting deeper than {MAX_DEPTH} levels"))
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            stack.pop()
            continue
        elif kind is yaml.AliasEvent:
            node = anchors.get(event.anchor)
            if node is None:
                raise _Abort(_event_problem(event, name, f"undefined alias *{event.anchor}"))
        elif kind is yaml.DocumentStartEvent:
            documents += 1
            if documents > MAX_DOCUMENTS:
                message = f"too many documents in one file (limit {MAX_DOCUMENTS}); split it"
                raise _Abort(_event_problem(event, name, message))
            anchors, root = {}, None
            continue
        elif kind is yaml.DocumentEndEvent:
            if root is not None:
                yield root
            continue
        else:
            continue
        if kind is not yaml.AliasEvent and event.anchor is not None:
            anchors[event.anchor] = node
        _attach(node, stack)
        root = node if root is None else root
        if kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            stack.append([node, None])


def _collection_node(event: Any, mapping: bool) -> Any:
    cls = yaml.MappingNode if mapping else yaml.SequenceNode
    tag = event.tag
    if tag in (None, "!"):
        tag = _RESOLVER.resolve(cls, None, event.implicit)
    return cls(tag, [], event.start_mark, None, event.flow_style)


def _attach(node: Any, stack: list[list[Any]]) -> None:
    if not stack:
        return
    frame = stack[-1]
    parent = frame[0]
    if isinstance(parent, yaml.SequenceNode):
        parent.value.append(node)
    elif frame[1] is None:
        frame[1] = node
    else:
        parent.value.append((frame[1], node))
        frame[1] = None


def _event_problem(event: Any, name: str, message: str) -> Problem:
    line = event.start_mark.line + 1 if event.start_mark is not None else 1
    return Problem(Location(name, line), "", message)


def _yaml_problem(err: yaml.YAMLError, text: str, name: str) -> Problem:
    """A YAML syntax error at the line and column a person has to look at, quoted.

    An unclosed ``[`` or ``{`` is noticed where the parser gave up (often the next line);
    the place to fix is where the collection was opened, so that is where it points.
    """
    context = str(getattr(err, "context", "") or "")
    opened = getattr(err, "context_mark", None) if "flow" in context else None
    mark = opened or getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    detail = str(getattr(err, "problem", None) or str(err).splitlines()[0])
    if "expected <document start>" in detail:
        detail = "unexpected content after the end of the document"
    if opened is not None:
        detail = f"{detail} ({context} opened here is not closed)"
    if mark is None:
        line = text[: getattr(err, "position", 0)].count("\n") + 1
        return Problem(Location(name, line), "", f"invalid YAML: {detail}")
    lines = _YAML_LINE_BREAK.split(text)  # the breaks YAML counts lines by
    source = lines[mark.line] if 0 <= mark.line < len(lines) else ""
    column = mark.column + 1
    quoted = source[:MAX_QUOTED].replace("\t", " ")
    caret = " " * min(mark.column, MAX_QUOTED) + "^"
    message = f"invalid YAML (column {column}): {detail}\n    {quoted}\n    {caret}"
    return Problem(Location(name, mark.line + 1), "", message)


def _document_from_node(root: Any, name: str, problems: list[Problem]) -> Document | None:
    source = Location(name, root.start_mark.line + 1)
    if isinstance(root, yaml.ScalarNode) and root.tag.endswith(":null"):
        return None  # an empty document
    if not isinstance(root, yaml.MappingNode):
        problems.append(Problem(source, "", "a document must be a mapping of fields"))
        return None
    builder = _NodeBuilder(name, problems, start=source.line)
    try:
        body = builder.build(root, "", 0)
    except _Abort as abort:
        problems.append(abort.problem)
        return None
    return Document(body=body, source=source, locations=builder.locations)


class _NodeBuilder:
    """Turns a composed YAML node tree into plain values, recording each value's line."""

    def __init__(self, file: str, warnings: list[Problem] | None = None, *, start: int = 1) -> None:
        self.file = file
        self.locations = Lines(file, start)  # lines kept near ``start`` cost nothing
        self.nodes = 0
        self.warnings = warnings if warnings is not None else []

    def build(self, node: Any, path: str, depth: int) -> Any:
        self.nodes += 1
        if depth > MAX_DEPTH:
            raise self._abort(node, path, f"nesting deeper than {MAX_DEPTH} levels")
        if self.nodes > MAX_NODES:
            raise self._abort(node, "", "document too large (excessive alias expansion?)")
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            prefix = f"{path}." if path else ""
            items = []
            for index, item in enumerate(node.value):
                self.locations.add(f"{prefix}{index}", self._line(item), again=False)
                items.append(self.build(item, f"{prefix}{index}", depth + 1))
            return items
        constructor = _SCALARS.get(node.tag)
        if constructor is None:
            raise self._abort(node, path, f"unsupported YAML tag {node.tag}")
        try:
            return constructor(node)
        except ValueError:  # e.g. an integer of thousands of digits
            message = f"{brief(node.value)} is not a number this tool reads"
            raise self._abort(node, path, message) from None

    def _mapping(self, node: Any, path: str, depth: int) -> dict[str, Any]:
        prefix = f"{path}." if path else ""
        explicit: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged.update(self._merge_sources(value_node, path, depth))
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise self._abort(key_node, path, "field names must be plain strings")
            # Field names and paths repeat in every document: one object each (interned)
            # instead of one per document (at 100,000 documents, tens of MiB).
            key = sys.intern(str(key_node.value))
            field = sys.intern(prefix + key) if prefix else key
            if key in explicit:
                first = self.locations.get(field)
                again = self.build(value_node, field, depth + 1)
                if again != explicit[key]:
                    message = f"duplicate field with another value (first at {first})"
                    raise self._abort(key_node, field, message)
                message = f"duplicate field with the same value (first at {first}); drop one"
                self.warnings.append(Problem(self._where(key_node), field, message, warning=True))
                continue
            self.locations.add(field, self._line(key_node))
            explicit[key] = self.build(value_node, field, depth + 1)
        return {**merged, **explicit}

    def _merge_sources(self, node: Any, path: str, depth: int) -> dict[str, Any]:
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        merged: dict[str, Any] = {}
        for source in reversed(sources):  # the first source listed wins
            if not isinstance(source, yaml.MappingNode):
                raise self._abort(source, path, "a merge key (<<) needs a mapping")
            merged.update(self._mapping(source, path, depth + 1))
        return merged

    def _where(self, node: Any) -> Location:
        return Location(self.file, self._line(node))

    @staticmethod
    def _line(node: Any) -> int:
        line: int = node.start_mark.line + 1
        return line

    def _abort(self, node: Any, path: str, message: str) -> _Abort:
        return _Abort(Problem(self._where(node), path, message))


_YAML_LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")
#: How much of the offending line a YAML syntax error quotes.
MAX_QUOTED = 120


# --- JSON --------------------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_YAML_UNREADABLE = re.compile(
    "[^\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


def _json_documents(text: str, name: str, problems: list[Problem]) -> list[Document]:
    value = _parse_json(text, name)
    items = value if isinstance(value, list) else [value]
    if len(items) > MAX_DOCUMENTS:
        message = f"too many documents in one file (limit {MAX_DOCUMENTS}); split it"
        raise _Abort(Problem(Location(name, 1), "", message))
    nodes = _json_nodes(text, len(items) if isinstance(value, list) else None)
    documents = []
    for index, item in enumerate(items):
        node = nodes[index] if nodes else None
        source = Location(name, node.start_mark.line + 1 if node is not None else 1)
        if not isinstance(item, dict):
            problems.append(Problem(source, "", "a document must be a JSON object"))
            continue
        locations: Mapping[str, Location] = {}
        if node is not None:
            builder = _NodeBuilder(name, problems, start=source.line)
            try:
                builder.build(node, "", 0)
            except _Abort as abort:
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
        documents.append(_infer_kind(document, name, problems, wire=True))
    return documents


def read_yaml_trees(path: Path) -> list[Document]:
    """Every document of a YAML file (another tool's manifests, say) with each value's
    line, no kind given; raises SpecError with the file and line when it cannot be read."""
    problems: list[Problem] = []
    documents: list[Document] = []
    try:
        documents = _yaml_trees(_read_text(path), str(path), problems)
    except _Abort as abort:
        problems.append(abort.problem)
    if errors := [p for p in problems if not p.warning]:
        raise SpecError(errors)
    return documents


def read_json_tree(path: Path) -> Document:
    """A whole JSON file (another tool's state, say) as one Document with every value's
    line; raises SpecError with the file and line when it is not JSON."""
    name = str(path)
    try:
        text = _read_text(path)
        value = _parse_json(text, name)
    except _Abort as abort:
        raise SpecError([abort.problem]) from None
    except RecursionError:
        raise SpecError([_file_problem(path, f"nesting deeper than {MAX_DEPTH} levels")]) from None
    if not isinstance(value, dict):
        raise SpecError([Problem(Location(name, 1), "", "expected a JSON object")])
    nodes = _json_nodes(text, None)
    locations: Mapping[str, Location] = {}
    if nodes:
        builder = _NodeBuilder(name)
        try:
            builder.build(nodes[0], "", 0)
        except _Abort as abort:
            raise SpecError([abort.problem]) from None
        locations = builder.locations
    return Document(body=value, source=Location(name, 1), locations=locations)


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


def _parse_json(text: str, name: str) -> Any:
    def reject_constant(constant: str) -> Any:
        raise ValueError(f"{constant} is not valid JSON")

    try:
        return json.loads(text, parse_constant=reject_constant, parse_int=_json_int)
    except json.JSONDecodeError as err:
        message = "unexpected content after the JSON value" if err.msg == "Extra data" else err.msg
        raise _Abort(Problem(Location(name, err.lineno), "", f"invalid JSON: {message}")) from None
    except ValueError as err:
        raise _Abort(Problem(Location(name, 1), "", f"invalid JSON: {err}")) from None


def _json_nodes(text: str, count: int | None) -> list[Any]:
    """The YAML nodes of the JSON documents (for line numbers); [] if YAML cannot read it.

    JSON is YAML but for what YAML's reader refuses: tabs as white space, and characters
    it calls unprintable. Those become spaces first (one character for one, so every line
    stays where it was); the values come from the JSON parser, not from these nodes.
    """
    try:
        readable = _SURROGATE_ESCAPE.sub(r"\\u0020", _YAML_UNREADABLE.sub(" ", text))
        roots = list(compose_documents(readable, "<json>"))
    except (yaml.YAMLError, _Abort):
        return []
    if len(roots) != 1:
        return []
    root = roots[0]
    if count is None:
        return [root]
    return list(root.value) if isinstance(root, yaml.SequenceNode) else []


# --- nats CLI configs and backups ----------------------------------------------------------

_BACKUP_KEYS = frozenset({"type", "configuration", "checksum"})
#: A StreamInfo / ConsumerInfo (``nats ... info --json``), or just its ``config`` envelope
#: (``{"config": {...}}``, which the nats CLI reads too).
_INFO_KEYS = frozenset({"created", "state", "delivered", "ack_floor", "num_pending"})
_ENVELOPE_KEYS = frozenset({"config", "stream_name", "name", "ts", "cluster"})
_STREAM_HINTS = frozenset({"retention", "storage", "max_msgs", "discard", "num_replicas"})
_CONSUMER_HINTS = frozenset({"ack_policy", "deliver_policy", "durable_name", "replay_policy"})


def _infer_kind(document: Document, name: str, problems: list[Problem], *, wire: bool) -> Document:
    """Give a wire config (nats CLI output, backup file) its ``kind``; others unchanged."""
    body = document.body
    if "kind" in body or not wire:
        return document
    if body.keys() >= _BACKUP_KEYS:
        return _from_backup(document, name, problems)
    config = body.get("config")
    if isinstance(config, dict) and (body.keys() & _INFO_KEYS or body.keys() <= _ENVELOPE_KEYS):
        stream = body.get("stream_name") if "stream_name" in body else None
        unwrapped = _sub_document(document, "config", config)
        if not stream:
            _consumers_left_in_archive(body, name, document.source, problems)
        return _as_kind(unwrapped, "Consumer" if stream else "Stream", stream, problems)
    if body.keys() & _CONSUMER_HINTS:
        stream = body.get("stream_name")
        rest = {k: v for k, v in body.items() if k != "stream_name"}
        return _as_kind(_replace_body(document, rest), "Consumer", stream, problems)
    if body.keys() & _STREAM_HINTS:
        return _as_kind(document, "Stream", None, problems)
    return document


def _consumers_left_in_archive(
    info: dict[str, Any], name: str, where: Location, problems: list[Problem]
) -> None:
    """``nats account backup`` keeps a stream's consumers inside ``stream.tar.s2`` (an
    S2-compressed archive this tool does not read): say how many were not read, so a
    restore from the specs does not silently lose them."""
    state = info.get("state")
    count = state.get("consumer_count") if isinstance(state, dict) else None
    archive = Path(name).with_name("stream.tar.s2")
    if not isinstance(count, int) or count <= 0 or not archive.exists():
        return
    stream = (info.get("config") or {}).get("name", "?")
    message = (
        f"stream {stream} has {count} consumer(s) inside {archive.name}, which is not read: "
        "declare them as Consumer specs (or export them from a server the backup was "
        "restored to)"
    )
    problems.append(Problem(where, "", message, warning=True))


def _as_kind(document: Document, kind: str, stream: Any, problems: list[Problem]) -> Document:
    head: dict[str, Any] = {"kind": kind}
    if kind == "Consumer":
        if not isinstance(stream, str) or not stream:
            message = "a consumer config does not name its stream: add `stream: STREAM_NAME`"
            problems.append(Problem(document.source, "", message))
        else:
            head["stream"] = stream
    return _replace_body(document, {**head, **document.body})


def _replace_body(document: Document, body: dict[str, Any]) -> Document:
    return Document(body=body, source=document.source, locations=document.locations)


def _sub_document(document: Document, key: str, value: dict[str, Any]) -> Document:
    prefix = key + "."
    locations = {
        path[len(prefix) :]: where
        for path, where in document.locations.items()
        if path.startswith(prefix)
    }
    return Document(body=value, source=document.where(key), locations=locations)


def _from_backup(document: Document, name: str, problems: list[Problem]) -> Document:
    body = document.body
    where = document.where("configuration")
    try:
        raw = base64.b64decode(str(body["configuration"]), validate=True)
        if hashlib.sha256(raw).hexdigest() != body["checksum"]:
            raise ValueError("checksum mismatch: the backup file is damaged")
        inner = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError) as err:
        problems.append(Problem(where, "configuration", f"unreadable backup file: {err}"))
        return document
    flat = Document(body={}, source=where, locations={})
    if body["type"] == "stream" and isinstance(inner, dict):
        return _as_kind(_replace_body(flat, inner), "Stream", None, problems)
    if body["type"] == "consumer" and isinstance(inner, dict):
        config = inner.get("config")
        if isinstance(config, dict):
            return _as_kind(_replace_body(flat, config), "Consumer", inner.get("stream"), problems)
    problems.append(Problem(where, "type", f"unsupported backup entry type {body['type']!r}"))
    return document
