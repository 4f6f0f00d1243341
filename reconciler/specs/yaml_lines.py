"""YAML with every value's line: many ``---`` separated documents per text; plain text
read straight from the parser's events (:mod:`.yaml_plain`), any other composed by
libyaml when the text cannot nest deep enough to crash it, else by
:func:`compose_documents` (an explicit stack, depth and document limits). Aliases are
counted as they expand (``MAX_NODES``), tags other than the plain JSON ones refused,
merge keys (``<<``) followed, duplicate fields caught."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

import yaml

from reconciler.errors import Problem, brief
from reconciler.locations import Lines, Location
from reconciler.specs.document import MAX_DEPTH, MAX_DOCUMENTS, Abort, Document
from reconciler.specs.fields import MAY_BE_SECRET, mentions_secret
from reconciler.specs.yaml_block import block_documents
from reconciler.specs.yaml_plain import MAX_NODES, SCALARS, YamlLoader, plain_documents
from reconciler.specs.yaml_plain import implicit_tag as _implicit_tag

_YamlLoader: Any = YamlLoader
_SCALARS = SCALARS
_RESOLVER: Any = yaml.resolver.Resolver()
_MERGE_TAG = "tag:yaml.org,2002:merge"


def yaml_trees(text: str, name: str, problems: list[Problem]) -> list[Document]:
    """The documents of a YAML text with every value's line (kind not inferred): the
    plainest text line by line (:mod:`.yaml_block`), plain text straight from the
    parser's events (:mod:`.yaml_plain`), any other through a node tree."""
    plain = block_documents(text, name)
    if plain is None:
        plain = plain_documents(text, name)
    if plain is not None:
        return plain
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


def _scalar_tag(event: Any) -> str:
    if event.tag not in (None, "!"):
        return str(event.tag)
    return _implicit_tag(event.value, event.implicit)


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
                raise Abort(_event_problem(event, name, f"nesting deeper than {MAX_DEPTH} levels"))
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            stack.pop()
            continue
        elif kind is yaml.AliasEvent:
            node = anchors.get(event.anchor)
            if node is None:
                raise Abort(_event_problem(event, name, f"undefined alias *{event.anchor}"))
        elif kind is yaml.DocumentStartEvent:
            documents += 1
            if documents > MAX_DOCUMENTS:
                message = f"too many documents in one file (limit {MAX_DOCUMENTS}); split it"
                raise Abort(_event_problem(event, name, message))
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
    column = mark.column + 1
    if mentions_secret(text):  # a quoted line could show a secret value: never quoted
        said = f"invalid YAML (column {column}): {detail} (the line is not shown: {MAY_BE_SECRET})"
        return Problem(Location(name, mark.line + 1), "", said)
    lines = _YAML_LINE_BREAK.split(text)  # the breaks YAML counts lines by
    source = lines[mark.line] if 0 <= mark.line < len(lines) else ""
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
    builder = NodeBuilder(name, problems, start=source.line)
    try:
        body = builder.build(root, "", 0)
    except Abort as abort:
        problems.append(abort.problem)
        return None
    builder.locations.freeze()
    return Document(body=body, source=source, locations=builder.locations)


class NodeBuilder:
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

    def _abort(self, node: Any, path: str, message: str) -> Abort:
        return Abort(Problem(self._where(node), path, message))


_YAML_LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")
#: How much of the offending line a YAML syntax error quotes.
MAX_QUOTED = 120
