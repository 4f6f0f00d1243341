"""Plain YAML read straight from libyaml's events: the values and every value's line,
without a node tree.

Nearly every spec file is plain YAML: mappings, sequences and untagged scalars, no
anchor, alias, tag or merge key, each field once. :func:`plain_documents` builds such a
text's documents in one pass over the parser's events (libyaml's own composer makes a
node object per value and calls back into Python to resolve each scalar's tag; then the
tree is walked again: about twice the time). Whatever else a text holds, it answers
None and :mod:`.yaml_lines` reads the text its careful way, which says what is wrong
where: this path never reports a problem, so every problem is reported one way.

The values, lines and limits are those of :class:`~reconciler.specs.yaml_lines.NodeBuilder`
(``tests/unit/test_loader.py`` loads every example and tricky text both ways).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import yaml

from reconciler.locations import Lines, Location
from reconciler.specs.document import MAX_DEPTH, MAX_DOCUMENTS, Document

MAX_NODES = 100_000  # per document, counting every alias expansion

YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_RESOLVER: Any = yaml.resolver.Resolver()
STR_TAG = "tag:yaml.org,2002:str"
NULL_TAG = "tag:yaml.org,2002:null"
SCALARS: Mapping[str, Any] = {
    NULL_TAG: lambda node: None,
    "tag:yaml.org,2002:bool": _CONSTRUCTOR.construct_yaml_bool,
    "tag:yaml.org,2002:int": _CONSTRUCTOR.construct_yaml_int,
    "tag:yaml.org,2002:float": _CONSTRUCTOR.construct_yaml_float,
    STR_TAG: lambda node: sys.intern(node.value),  # values repeat, too
    "tag:yaml.org,2002:timestamp": lambda node: node.value,  # RFC 3339 stays a string
}

_RESOLVED: dict[tuple[str, Any], str] = {}  # (plain scalar, implicit) -> tag
#: The first characters for which the resolver has a rule (``y`` for ``yes``, digits,
#: ``~``...): a scalar starting with any other is a string, whatever its quoting, unless
#: the resolver has a rule for every scalar or by path (then every one is resolved).
_STARTS = frozenset(_RESOLVER.yaml_implicit_resolvers)
_BY_FIRST = None not in _STARTS and not _RESOLVER.yaml_path_resolvers


def implicit_tag(value: str, implicit: Any) -> str:
    """The tag of an untagged scalar, each distinct short one resolved once (the
    resolver tries a list of regular expressions every time)."""
    if _BY_FIRST and value and value[0] not in _STARTS:
        return STR_TAG  # no resolver is tried on a scalar starting so (``orders.new``)
    key = (value, implicit)
    tag = _RESOLVED.get(key)
    if tag is None:
        tag = str(_RESOLVER.resolve(yaml.ScalarNode, value, implicit))
        if len(value) <= 64:
            if len(_RESOLVED) > 50_000:
                _RESOLVED.clear()
            _RESOLVED[key] = tag
    return tag


_CONSTRUCTED: dict[tuple[str, str], Any] = {}  # (tag, short scalar) -> its value


def constructed(tag: str, value: str) -> Any:
    """The value of a resolved untagged scalar (a number, a boolean, a timestamp), each
    distinct short one constructed once. Raises NotPlain when the careful path has to
    say something about it (an unsupported tag, a number too large)."""
    key = (tag, value)
    if key in _CONSTRUCTED:
        return _CONSTRUCTED[key]
    construct = SCALARS.get(tag)
    if construct is None:
        raise NotPlain
    try:
        made = construct(yaml.ScalarNode(tag, value))
    except ValueError:
        raise NotPlain from None
    if len(value) <= 64:
        if len(_CONSTRUCTED) > 50_000:
            _CONSTRUCTED.clear()
        _CONSTRUCTED[key] = made
    return made


class NotPlain(Exception):
    """The text holds something only the careful path reads (or reports)."""


def plain_documents(text: str, name: str) -> list[Document] | None:
    """The documents of a plain YAML text (see the module), or None when it is not
    plain, is not valid YAML, or breaks a limit: then the careful path reads it."""
    if YamlLoader is yaml.SafeLoader:
        return None  # no libyaml: the careful path is as fast
    loader = YamlLoader(text)
    try:
        return _documents(loader, name)
    except (NotPlain, yaml.YAMLError):
        return None
    finally:
        loader.dispose()


_SCALAR = yaml.ScalarEvent
_MAPPING_START = yaml.MappingStartEvent
_SEQUENCE_START = yaml.SequenceStartEvent
_ENDS = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_DOCUMENT_START = yaml.DocumentStartEvent
_DOCUMENT_END = yaml.DocumentEndEvent
_STREAM_END = yaml.StreamEndEvent
_PLAIN_TAGS = (None, "!")


def _documents(loader: Any, name: str) -> list[Document]:  # noqa: PLR0915
    """One pass over the events (one function: a call per event is a fifth of the time).

    ``frames``: one per open collection, [container, path prefix, pending key or None,
    whether it is a mapping]; ``lines``: the document's :class:`Lines`."""
    get = loader.get_event
    documents: list[Document] = []
    frames: list[list[Any]] = []
    lines: Lines | None = None
    root: Any = None
    root_line = 0
    nodes = 0
    count = 0
    while True:
        event = get()
        kind = type(event)
        if kind is _SCALAR or kind is _MAPPING_START or kind is _SEQUENCE_START:
            if event.anchor is not None or event.tag not in _PLAIN_TAGS:
                raise NotPlain  # anchors, aliases and tags: the careful path
            line = event.start_mark.line + 1
            if frames:
                frame = frames[-1]
                if frame[3] and frame[2] is None:  # a mapping's key
                    if kind is not _SCALAR:
                        raise NotPlain  # "field names must be plain strings"
                    key = event.value
                    if key == "<<" or key in frame[0]:
                        raise NotPlain  # a merge key, a duplicate field
                    key = sys.intern(key)
                    field = sys.intern(frame[1] + key) if frame[1] else key
                    assert lines is not None
                    lines.add(field, line)
                    frame[2] = key
                    continue
                if len(frames) > MAX_DEPTH:
                    raise NotPlain  # "nesting deeper than ..."
                if frame[3]:
                    path = frame[1] + frame[2] if frame[1] else frame[2]
                else:
                    index = len(frame[0])
                    path = f"{frame[1]}{index}"
                    assert lines is not None
                    lines.add(path, line, again=False)
            else:
                path = ""
            nodes += 1
            if nodes > MAX_NODES:
                raise NotPlain  # "document too large"
            if kind is _SCALAR:
                value = event.value
                tag = implicit_tag(value, event.implicit)
                if tag is STR_TAG or tag == STR_TAG:
                    made: Any = sys.intern(value)
                elif tag == NULL_TAG:
                    made = None
                else:
                    made = constructed(tag, value)
            else:
                made = {} if kind is _MAPPING_START else []
            if frames:
                frame = frames[-1]
                if frame[3]:
                    frame[0][frame[2]] = made
                    frame[2] = None
                else:
                    frame[0].append(made)
            else:
                root, root_line = made, line
                if kind is _MAPPING_START:
                    lines = Lines(name, line)
                elif kind is _SEQUENCE_START:
                    raise NotPlain  # "a document must be a mapping of fields"
            if kind is not _SCALAR:
                prefix = sys.intern(path + ".") if path else ""
                frames.append([made, prefix, None, kind is _MAPPING_START])
        elif kind in _ENDS:
            frames.pop()
        elif kind is _DOCUMENT_START:
            count += 1
            if count > MAX_DOCUMENTS:
                raise NotPlain  # "too many documents in one file"
            root, lines, nodes = None, None, 0
        elif kind is _DOCUMENT_END:
            if isinstance(root, dict):
                assert lines is not None
                source = Location(name, root_line)
                lines.freeze()
                documents.append(Document(body=root, source=source, locations=lines))
            elif root is not None:
                raise NotPlain  # a scalar document: "must be a mapping of fields"
        elif kind is _STREAM_END:
            return documents
        elif kind is not yaml.StreamStartEvent:
            raise NotPlain  # an alias
