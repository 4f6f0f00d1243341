"""The plainest YAML, read line by line: block mappings of plain keys, block sequences
of scalars, one-line flow sequences, plain and simply quoted scalars, comments.

A repository's spec files are nearly all written so (``kind: Consumer``, ``name: C0``,
``subjects:`` then ``- orders.>``). :func:`block_documents` reads such a text with one
regular expression per distinct line (a repository repeats most of its lines: each is
matched once, then known), in about a fifth of the time libyaml's events take to reach
Python (:mod:`.yaml_plain`). Its grammar is a strict subset of YAML in which
every line can be read only one way: a line it does not know, an indentation that is
not exactly a parent's, a tab, a carriage return, anything not printable ASCII, a
duplicate field, a limit reached: it answers None, and the text is read by libyaml
(:mod:`.yaml_plain`, :mod:`.yaml_lines`), which reports whatever is wrong. Scalars are
resolved and constructed by PyYAML's own rules (:func:`.yaml_plain.implicit_tag`), so a
value is what libyaml's path makes of it; lines are the lines libyaml marks
(``tests/unit/test_loader.py`` compares both on examples and generated texts).
"""

from __future__ import annotations

import re
import sys
from typing import Any

from reconciler.locations import Lines, Location
from reconciler.specs.document import MAX_DEPTH, MAX_DOCUMENTS, Document
from reconciler.specs.yaml_plain import (
    MAX_NODES,
    NULL_TAG,
    STR_TAG,
    NotPlain,
    constructed,
    implicit_tag,
)

#: A plain scalar this reader takes: it starts with no indicator, holds no ``:``, ``#``,
#: ``,``, bracket, brace or quote, and its words are one space or more apart.
_WORD = r"[A-Za-z0-9_./$>*+=()-]+"
_FIRST = r"(?:[A-Za-z0-9_./$]|-(?=[A-Za-z0-9_.]))"
_PLAIN = rf"{_FIRST}[A-Za-z0-9_./$>*+=()-]*(?: +{_WORD})*"
_FLOW_ITEM = rf"{_FIRST}[A-Za-z0-9_./$>*+=()-]*|'[^']*'|\"[^\"\\]*\""
#: One line: its indentation, ``-`` or ``key:``, then a scalar, a one-line flow
#: sequence, or nothing; then maybe a comment.
_LINE = re.compile(
    r"(?P<indent> *)(?:(?P<dash>-)|(?P<key>[A-Za-z_][A-Za-z0-9_./-]*):)"
    rf"(?: +(?P<some>(?P<plain>{_PLAIN})|'(?P<single>[^']*)'|\"(?P<double>[^\"\\]*)\""
    rf"|(?P<seq>\[ *(?P<flow>(?:{_FLOW_ITEM})(?: *, *(?:{_FLOW_ITEM}))*)? *\])))?"
    r"(?: +#.*)? *\Z"
)
_ITEM = re.compile(rf"{_FLOW_ITEM}")
_UNREADABLE = re.compile(r"[^\x20-\x7e\n]")
_PLAIN_IMPLICIT = (True, False)


class _NotBlock(Exception):
    """The text holds something this reader leaves to libyaml."""


def block_documents(text: str, name: str) -> list[Document] | None:
    """The documents of a text written in this module's subset of YAML, or None."""
    if _UNREADABLE.search(text):
        return None  # tabs, carriage returns, other line breaks, non-ASCII
    try:
        return _Reader(name).read(text)
    except (_NotBlock, NotPlain):
        return None


_VALUES: dict[str, Any] = {}  # short plain scalar that is no string -> its value


def _resolved(plain: str) -> Any:
    """A plain scalar's value by PyYAML's rules, each distinct short one made once (a
    string is the interpreter's one copy of it: ``sys.intern``)."""
    if plain in _VALUES:
        return _VALUES[plain]
    tag = implicit_tag(plain, _PLAIN_IMPLICIT)
    if tag == STR_TAG:
        return sys.intern(plain)
    # constructed: NotPlain for an unsupported tag, a number too large
    made: Any = None if tag == NULL_TAG else constructed(tag, plain)
    if len(plain) <= 64:
        if len(_VALUES) > 50_000:
            _VALUES.clear()
        _VALUES[plain] = made
    return made


def _flow_items(text: str) -> list[Any]:
    items = []
    for match in _ITEM.finditer(text):
        item = match.group()
        items.append(sys.intern(item[1:-1]) if item[0] in "'\"" else _resolved(item))
    return items


#: What a line holds (:func:`_read_line`): nothing (blank, a comment), a document's end
#: (``---``), a field or item with its value on the next lines, a scalar, a flow list.
_SKIP, _END, _OPEN, _SCALAR, _SEQ = range(5)
_SKIPPED = (0, None, _SKIP, None)
_ENDED = (0, None, _END, None)
#: line text -> how it reads: a repository writes the same lines (``kind: Consumer``,
#: ``ack_policy: explicit``, ``stream: B00001``) thousands of times, each matched once.
_KNOWN: dict[str, tuple[int, str | None, int, Any]] = {}
#: The longest line :data:`_KNOWN` keeps, and how many lines it keeps before it starts
#: again: a repository's repeated lines are a few hundred, and its unique ones (each
#: consumer's ``filter_subject``) would hold memory for nothing (50,000: 7 MiB more at
#: the peak of loading 101,000 documents; at 4,096 the peak is the line reader's before).
_KNOWN_LINE, _KNOWN_LINES = 120, 4_096


def _read_line(line: str) -> tuple[int, str | None, int, Any]:
    """(indentation, key or None for an item, what the line holds, its value): a
    scalar's value, a flow list's items as a tuple. Raises _NotBlock for a line this
    reader leaves to libyaml (and NotPlain for a scalar it cannot construct)."""
    found = _LINE.match(line)
    if found is None:
        if line == "---":
            return _ENDED
        stripped = line.strip(" ")
        if stripped and stripped[0] != "#":
            raise _NotBlock
        return _SKIPPED
    spaces, _, key, some, plain, single, double, seq, flow = found.groups()
    if key is not None:
        key = sys.intern(key)
    if some is None:
        if key is None:
            raise _NotBlock  # "-" alone: a nested block, left to libyaml
        return (len(spaces), key, _OPEN, None)
    if plain is not None:
        return (len(spaces), key, _SCALAR, _resolved(plain))
    if seq is not None:
        return (len(spaces), key, _SEQ, tuple(_flow_items(flow or "")))
    return (len(spaces), key, _SCALAR, sys.intern(single if single is not None else double))


class _Reader:
    """One text's documents. ``frames``: the open collections, innermost last, each
    [indentation, container, path prefix, is a mapping]; ``pending``: a field written
    ``key:`` with nothing after, whose value the next line decides; ``lines``: each
    path of the document being read -> its line's distance from ``root_line``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.documents: list[Document] = []
        self.frames: list[list[Any]] = []
        self.pending: tuple[Any, Any, str, int] | None = None
        self.lines: dict[str, int] = {}
        self.root_line = 0
        self.nodes = 0
        self.count = 0

    def read(self, text: str) -> list[Document]:  # noqa: PLR0915 (one loop: calls cost)
        known = _KNOWN
        frames = self.frames
        for number, line in enumerate(text.split("\n"), start=1):
            read = known.get(line)
            if read is None:
                read = _read_line(line)
                if len(line) <= _KNOWN_LINE:
                    if len(known) >= _KNOWN_LINES:
                        known.clear()
                    known[line] = read
            indent, key, holds, value = read
            if indent == 0 and holds == _SCALAR and key is not None and len(frames) < 2:
                # a document's own ``key: value`` (most lines): what the general path
                # below (and _frame, for a document's first line) does with it, a
                # pending field before it being null
                if frames:
                    self.pending = None
                    root = frames[0][1]
                else:
                    root = {}
                    frames.append([0, root, "", True])
                    self.lines, self.root_line = {}, number
                    self.nodes += 1
                if key in root:
                    raise _NotBlock  # a duplicate field: said the careful way
                self.nodes += 1
                if self.nodes > MAX_NODES:
                    raise _NotBlock
                root[key] = value
                self.lines[key] = number - self.root_line
                continue
            if holds < _OPEN:
                if holds == _END:
                    self._end()
                    frames = self.frames
                continue
            mapping = key is not None
            if self.pending is not None:
                self._settle_before(not mapping, indent)
            if frames and frames[-1][0] == indent and frames[-1][3] is mapping:
                frame = frames[-1]
            else:
                frame = self._frame(mapping, indent, number)
            self.nodes += 1
            if self.nodes > MAX_NODES:
                raise _NotBlock  # "document too large": said the careful way
            container = frame[1]
            lines = self.lines
            if key is not None:
                if key in container:
                    raise _NotBlock  # a duplicate field: said the careful way
                path = sys.intern(frame[2] + key) if frame[2] else key
                lines[path] = number - self.root_line
            else:
                path = f"{frame[2]}{len(container)}"
                if path not in lines:
                    lines[path] = number - self.root_line
            if holds == _SCALAR:
                if mapping:
                    container[key] = value
                else:
                    container.append(value)
                continue
            if holds == _OPEN:  # ``key:``: the next line decides
                self.pending = (container, key, path, indent)
                container[key] = None
                continue
            items = list(value)
            for index in range(len(items)):
                item = f"{path}.{index}"
                if item not in lines:
                    lines[item] = number - self.root_line
            self.nodes += len(items)
            if mapping:
                container[key] = items
            else:
                container.append(items)
        self._end()
        return self.documents

    def _frame(self, mapping: bool, indent: int, number: int) -> list[Any]:
        """The collection a line at ``indent`` belongs to (a new document's root for
        its first field); _NotBlock when its indentation is not exactly that one's."""
        frames = self.frames
        if not frames:
            if indent or not mapping:
                raise _NotBlock  # an indented root, a document that is a list
            frames.append([0, {}, "", True])
            self.lines, self.root_line = {}, number
            self.nodes += 1
        top = frames[-1]
        while top[0] > indent or (mapping and not top[3] and top[0] == indent):
            frames.pop()
            if not frames:
                raise _NotBlock
            top = frames[-1]
        if top[3] != mapping or top[0] != indent:
            raise _NotBlock  # not the indentation of the collection it would be in
        return top

    def _settle_before(self, item: bool, indent: int) -> None:
        """The pending field's value, by the line after it: a mapping when that line is
        a deeper field, a sequence when it is an item as deep or deeper, else null."""
        container, key, field, above = self.pending or ({}, "", "", 0)
        self.pending = None
        if (item and indent >= above) or (not item and indent > above):
            if len(self.frames) >= MAX_DEPTH:
                raise _NotBlock  # "nesting deeper than ...": said the careful way
            opened: Any = [] if item else {}
            container[key] = opened
            self.frames.append([indent, opened, sys.intern(field + "."), not item])

    def _end(self) -> None:
        """The document read so far, if any, and a new one begun."""
        self.pending = None  # a field with nothing after it: null, as it is
        if self.frames:
            root = self.frames[0][1]
            source = Location(self.name, self.root_line)
            lines = Lines.read(self.name, self.root_line, self.lines)
            self.documents.append(Document(body=root, source=source, locations=lines))
        self.count += 1
        if self.count > MAX_DOCUMENTS:
            raise _NotBlock
        self.frames, self.lines, self.nodes = [], {}, 0
