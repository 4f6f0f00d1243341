"""Reading ``.tf`` files (HCL) with tree-sitter's compiled HCL grammar, one top-level block
at a time.

A file is cut after each top-level block (:func:`blocks`: strings, templates, comments
and heredocs stepped over) and each block is parsed alone by tree-sitter (a C parser,
``tree-sitter-hcl``), so the parse tree held is that of one block: the memory is bounded
by the largest block, the work linear in the file. Its syntax tree becomes the values
python-hcl2 used to give (:func:`parse`): literals as Python values, a quoted string's
escapes undone, and every other expression (references, arithmetic, calls, templates
with ``${...}``) kept as its source text in ``"${...}"``, for
:mod:`reconciler.importers.hcl_eval` to work out.

Where the grammar and Terraform disagree, Terraform's reading is kept: ``1e3`` (an
exponent without a fraction, which the grammar does not lex) is a number; hexadecimal
(``0x10``), a newline inside a quoted string and an argument set twice in a block are
refused, as Terraform refuses them. What cannot be read is a SpecError at its line: a
syntax error, brackets or operators nested deeper than MAX_NESTING, a number of more
digits than Python reads (4,300). A file over MAX_TF_BYTES is refused unread.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.errors import Problem, SpecError, brief
from reconciler.locations import Location
from reconciler.specs.fields import MAY_BE_SECRET, mentions_secret

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

#: The largest ``.tf`` file read (over 50,000 resources): a file the block cutter cannot
#: follow is parsed whole, and tree-sitter holds about 80 bytes of tree per byte.
MAX_TF_BYTES = 8 * 1024 * 1024
#: The deepest nesting of brackets and operators read (a chain of 200 operators is 200):
#: the work on hostile input is bounded, and far from Python's recursion limit.
MAX_NESTING = 256


@dataclass(frozen=True, slots=True)
class Block:
    """One ``resource "kind" "label" { ... }`` block of a ``.tf`` file; also (from
    :func:`declarations`) a ``variable "label" {...}`` (kind ``variable``) or a
    ``locals {...}`` block (kind ``locals``, label empty)."""

    kind: str
    label: str
    body: dict[str, Any]  # literals as values, other expressions as "${...}" strings
    line: int  # of the block's header
    lines: dict[str, int]  # of its top-level attributes and nested blocks


#: The kinds :func:`declarations` gives the value blocks (no resource type is either).
VARIABLE, LOCALS = "variable", "locals"
#: The top-level blocks read, and how many labels each has.
_LABELS = {"resource": 2, VARIABLE: 1, LOCALS: 0}


def resources(path: Path) -> Iterator[Block]:
    """The resource blocks of one ``.tf`` file. It is cut after each top-level block
    (:func:`blocks`) and each piece is parsed alone, so the work and the memory are those
    of one block at a time: linear in the file's size. Raises SpecError at the line of
    what cannot be read."""
    return (b for b in declarations(path) if b.kind not in (VARIABLE, LOCALS))


def declarations(path: Path) -> Iterator[Block]:
    """The resource, ``variable`` and ``locals`` blocks of one ``.tf`` file, read as
    :func:`resources` reads them."""
    name = str(path)
    for first, chunk in blocks(read_text(path)):
        yield from parse(chunk, first, name)


def read_text(path: Path) -> str:
    """The text of a ``.tf`` file: a regular file of at most MAX_TF_BYTES, in UTF-8."""
    name = str(path)
    try:
        with path.open("rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise SpecError([Problem(Location(name, 1), "", "not a regular file")])
            data = handle.read(MAX_TF_BYTES + 1)
    except OSError as err:
        raise SpecError([Problem(Location(name, 1), "", f"cannot read: {err}")]) from None
    if len(data) > MAX_TF_BYTES:
        cap = MAX_TF_BYTES // 2**20
        message = f"larger than the {cap} MiB cap on a .tf file (MAX_TF_BYTES); split it"
        raise SpecError([Problem(Location(name, 1), "", message)])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        message = f"not UTF-8 text (invalid byte at offset {err.start})"
        raise SpecError([Problem(Location(name, line), "", message)]) from None


#: What matters to the block cutter in code and in a quoted string.
_IN_CODE = re.compile(r'"|[{}()\[\]]|#|//|/\*|<<-?([A-Za-z_][A-Za-z0-9_-]*)[ \t]*\r?\n|\n')
#: The same but a line's end, which matters only after a top-level block has closed.
_IN_CODE_INSIDE = re.compile(_IN_CODE.pattern.removesuffix("|\\n"))
_IN_STRING = re.compile(r'\\.|\$\$\{|%%\{|\$\{|%\{|"|\n', re.DOTALL)
_CLOSES = {"}": "{T", "]": "[", ")": "("}


def blocks(text: str) -> list[tuple[int, str]]:
    """``text`` cut after each top-level block's closing line: (first line, text) pieces
    that join back to ``text``. Strings (with their ``${...}`` templates), comments and
    heredocs are stepped over; text this cutter cannot follow (unbalanced brackets, an
    unterminated string, comment or heredoc) is one piece, for the parser to report."""
    pieces: list[tuple[int, str]] = []
    stack: list[str] = []
    cut, line, position, closed = 0, 1, 0, False
    while True:
        in_string = bool(stack) and stack[-1] == '"'
        pattern = _IN_STRING if in_string else _IN_CODE if closed and not stack else _IN_CODE_INSIDE
        match = pattern.search(text, position)
        if match is None:
            break
        token, position = match.group(), match.end()
        if in_string:
            if token == '"':
                stack.pop()
            elif token in ("${", "%{"):
                stack.append("T")
            elif token == "\n":
                return [(1, text)]
            continue
        if token == "\n":
            if closed and not stack:
                pieces.append((line, text[cut:position]))
                line += text.count("\n", cut, position)
                cut, closed = position, False
        elif token == '"' or token in "{[(":
            stack.append(token)
        elif token in _CLOSES:
            if not stack or stack.pop() not in _CLOSES[token]:
                return [(1, text)]
            closed = not stack
        elif token in ("#", "//"):
            end = text.find("\n", position)
            position = len(text) if end < 0 else end
        elif token == "/*":
            end = text.find("*/", position)
            if end < 0:
                return [(1, text)]
            position = end + 2
        else:  # a heredoc: everything up to the line holding only its marker
            marker = re.compile(rf"^[ \t]*{re.escape(match.group(1))}[ \t]*\r?$", re.MULTILINE)
            end_match = marker.search(text, position)
            if end_match is None:
                return [(1, text)]
            position = end_match.end()
    if stack:
        return [(1, text)]
    if cut < len(text):
        pieces.append((line, text[cut:]))
    return pieces


@cache
def _parser() -> Parser:
    """tree-sitter's parser of the HCL grammar (loaded by the commands that read .tf)."""
    import tree_sitter_hcl
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_hcl.language()))


#: An identifier (stepped over whole: ``a-1e3`` is one) or a number in exponent form.
_EXPONENT = re.compile(rb"[A-Za-z_\x80-\xff][\w\x80-\xff-]*|\d+(?:\.\d+)?[eE][+-]?\d+")


#: An exponent without a fraction, the form the grammar does not lex (rare: most pieces
#: have none and are given to the parser as they are).
_NO_FRACTION = re.compile(rb"\d[eE][+-]?\d")


def _lexable(source: bytes) -> bytes:
    """``source`` as the grammar can lex it: each number in exponent form (``1e3``, which
    it does not read without a fraction) made digits of the same length. The values are
    read from ``source`` itself, by the tree's byte offsets."""

    def digits(match: re.Match[bytes]) -> bytes:
        word = match.group()
        return word if not word[:1].isdigit() else b"0" * len(word)

    return _EXPONENT.sub(digits, source) if _NO_FRACTION.search(source) else source


def parse(chunk: str, first: int, name: str) -> list[Block]:
    """The resource, ``variable`` and ``locals`` blocks of one piece of a ``.tf`` file
    (which starts at line ``first``); anything unreadable is a SpecError at its line."""
    source = chunk.encode("utf-8")
    tree = _parser().parse(_lexable(source))
    reader = _Reader(source, first, name)
    root = tree.root_node
    if root.has_error:
        reader.syntax_error(root)
    found = []
    for body in root.named_children:
        for node in body.named_children if body.type == "body" else ():
            if node.type == "block":
                block = reader.top_level(node)
                if block is not None:
                    found.append(block)
    return found


def _labels(children: list[Node]) -> list[Node]:
    """The labels of a block (after its type): strings or names."""
    return [c for c in children[1:] if c.type in ("string_lit", "identifier")]


class _Refused(Exception):
    """What a piece cannot be read for: (the node it is at, why)."""

    def __init__(self, node: Node, message: str) -> None:
        super().__init__(message)
        self.node = node
        self.message = message


_ESCAPE = re.compile(r'\\(?:([nrt"\\])|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.?))', re.DOTALL)
_ESCAPED = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}
_INTEGER = re.compile(rb"\d+")
_DECIMAL = re.compile(rb"\d+\.\d+")
_EXPONENT_FORM = re.compile(rb"\d+(?:\.\d+)?[eE][+-]?\d+")
#: Python reads no integer of more digits from text.
_MAX_DIGITS = 4300
#: An expression whose text alone says its value, as the tree under it gives it (a
#: literal: a number of at most 18 digits, a quoted string with no escape, template,
#: line break or control character, ``true``, ``false``, ``null``): read from the text,
#: not node by node (most of a repository's values are such).
_PLAIN = re.compile(rb'(\d{1,18})|"([^"\\$%\x00-\x1f\x7f]*)"|(true|false|null)')
#: The nodes that make one level of nesting: a bracket, an operator.
_LEVELS = frozenset({"expression", "operation"})
#: What a quoted string holds besides its literal text (kept as written).
_TEMPLATE_PARTS = frozenset({"template_interpolation", "template_directive"})


#: Terraform's marks of a sensitive value: a ``sensitive = true`` variable and the
#: ``sensitive()`` function (a text holding the word: :func:`marks_sensitive`).
_SENSITIVE_MARK = re.compile(r"\bsensitive\b")


def marks_sensitive(text: str) -> bool:
    """Whether ``text`` (a ``.tf`` file's, or an expression's) marks a value sensitive
    anywhere: none of it is quoted, whatever the names around it (``api_key`` says
    nothing of a secret, ``specs.fields.mentions_secret``)."""
    return bool(_SENSITIVE_MARK.search(text))


class _Reader:
    """Turns one piece's syntax tree into Blocks; raises SpecError at a node's line."""

    def __init__(self, source: bytes, first: int, name: str) -> None:
        self.source = source
        self.first = first
        self.name = name

    def error(self, node: Node, message: str) -> SpecError:
        line = self.first + node.start_point.row
        return SpecError([Problem(Location(self.name, line), "", message)])

    def text(self, node: Node) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8")

    def syntax_error(self, root: Node) -> None:
        """Raise at the first place the grammar could not read: the innermost error, also
        inside an ERROR node (a whole block the grammar gave up on starts at its first
        line; the invalid escape in it is lines further). Its text is quoted unless the
        piece names a secret (a provider's ``password``, a URL with credentials:
        ``specs.fields.mentions_secret``, as a YAML spec's syntax error) or the file
        marks a value sensitive (:func:`marks_sensitive`)."""
        node = root
        while (inner := next((c for c in node.children if c.has_error), None)) is not None:
            node = inner
        if node.is_missing:
            raise self.error(node, f"invalid HCL: missing {node.type!r}")
        text = self.source.decode("utf-8")
        if mentions_secret(text) or marks_sensitive(text):  # the text could be the secret
            column = node.start_point.column + 1
            unshown = f"the text there is not shown: {MAY_BE_SECRET}"
            raise self.error(node, f"invalid HCL (column {column}): unexpected text ({unshown})")
        shown = brief(self.text(node).split("\n", 1)[0], 60)
        raise self.error(node, f"invalid HCL: unexpected {shown}")

    def top_level(self, node: Node) -> Block | None:
        """A resource, variable or locals block (None for the other kinds)."""
        children = node.named_children
        kind = self.text(children[0])
        if kind not in _LABELS:
            return None
        try:
            labels = [self._label(c) for c in _labels(children)]
            if len(labels) != _LABELS[kind]:
                count = _LABELS[kind]
                raise _Refused(node, f"a {kind} block has {count} label(s), not {len(labels)}")
            body, lines = self._body(node)
        except _Refused as refused:
            raise self.error(refused.node, refused.message) from None
        if kind == "resource":
            return Block(labels[0], labels[1], body, self.first + node.start_point.row, lines)
        label = labels[0] if labels else ""
        return Block(kind, label, body, self.first + node.start_point.row, lines)

    def _label(self, node: Node) -> str:
        if node.type == "identifier":
            return self.text(node)
        value = self._string(node)
        if not isinstance(value, str) or value.startswith("${"):
            raise _Refused(node, "a block label is a literal string")
        return value

    def _body(self, block: Node) -> tuple[dict[str, Any], dict[str, int]]:
        """A block's arguments and nested blocks (lists of bodies), and their lines."""
        values: dict[str, Any] = {}
        lines: dict[str, int] = {}
        named = block.named_children
        body = named[-2] if len(named) > 1 and named[-2].type == "body" else None
        if body is None:  # where it usually is (before the closing brace), else looked for
            body = next((c for c in named if c.type == "body"), None)
        for node in body.named_children if body is not None else ():
            if node.type not in ("attribute", "block"):
                continue
            children = node.named_children
            key = self.text(children[0])
            line = self.first + node.start_point.row
            if node.type == "attribute":
                if key in lines:
                    message = f"the argument {key!r} is set twice (the first at line {lines[key]})"
                    raise _Refused(node, message)
                values[key] = self._value(children[-1], 0)
            else:
                if key in lines and not isinstance(values.get(key), list):
                    raise _Refused(node, f"{key!r} is set both as an argument and as a block")
                inner, _ = self._body(node)
                for label in reversed(_labels(children)):
                    inner = {self._label(label): inner}
                values.setdefault(key, []).append(inner)
            lines.setdefault(key, line)
        return values, lines

    def _value(self, node: Node, depth: int) -> Any:
        """The value of an expression: a literal, a list, an object, a quoted string; for
        anything else its source text as ``"${...}"``."""
        start, end = node.start_byte, node.end_byte
        if depth == 0 and end - start > MAX_NESTING:
            self._nesting(node)
        plain = _PLAIN.fullmatch(self.source, start, end)
        if plain is not None and node.type == "expression":
            number, string, word = plain.groups()
            if number is not None:
                return int(number)
            if string is not None:
                return string.decode("utf-8")
            return None if word == b"null" else word == b"true"
        parts = [c for c in node.named_children if c.type != "comment"]
        if len(parts) == 1 and node.type == "expression":
            inner = parts[0]
            kind = inner.type
            if kind == "literal_value":
                return self._literal(inner.named_children[0])
            if kind == "collection_value":
                collection = inner.named_children[0]
                items = [
                    c for c in collection.named_children if c.type in ("expression", "object_elem")
                ]
                if collection.type == "tuple":
                    return [self._value(item, depth + 1) for item in items]
                return {
                    self._key(e.named_children[0]): self._value(e.named_children[-1], depth + 1)
                    for e in items
                }
            if kind == "template_expr" and inner.named_children[0].type == "quoted_template":
                return self._string(inner.named_children[0])
            if kind == "template_expr":  # a heredoc: as written, for hcl_eval.heredoc_text
                return self.text(inner)
            negative = self._negative(inner)
            if negative is not None:
                return negative
        return "${" + self.text(node) + "}"

    def _negative(self, node: Node) -> int | None:
        """``-5``: a negative integer literal (as a number, not an expression)."""
        if node.type != "operation" or node.named_children[0].type != "unary_operation":
            return None
        unary = node.named_children[0]
        if self.text(unary.children[0]) != "-" or unary.named_children[0].type != "literal_value":
            return None
        value = self._literal(unary.named_children[0].named_children[0])
        return -value if type(value) is int else None

    def _key(self, node: Node) -> str:
        """An object's key: a name, a string, or an expression's text."""
        parts = node.named_children
        if len(parts) == 1 and parts[0].type == "variable_expr":
            return self.text(parts[0])
        value = self._value(node, 1)
        return value if isinstance(value, str) else "${" + self.text(node) + "}"

    def _literal(self, node: Node) -> Any:
        kind = node.type
        if kind == "string_lit":
            return self._string(node)
        if kind == "bool_lit":
            return self.text(node) == "true"
        if kind == "null_lit":
            return None
        number = self.source[node.start_byte : node.end_byte]
        if _INTEGER.fullmatch(number):
            if len(number) > _MAX_DIGITS:
                message = (
                    f"a number of {len(number)} digits: out of range (a number of the "
                    f"provider is a signed 64-bit integer; {_MAX_DIGITS} digits are read at most)"
                )
                raise _Refused(node, message)
            return int(number)
        if _DECIMAL.fullmatch(number):
            return float(number)
        if _EXPONENT_FORM.fullmatch(number):  # read exactly by hcl_eval, never as a float
            return "${" + number.decode() + "}"
        raise _Refused(node, f"invalid HCL: {brief(number.decode(), 40)} is not a number")

    def _string(self, node: Node) -> str:
        """A quoted string: its escapes undone, ``${...}``, ``%{...}``, ``$${`` and ``%%{``
        kept as written (as python-hcl2 gave them, for hcl_eval); a newline refused."""
        if node.type == "string_lit":  # no template: the text between the quotes
            written = self.source[node.start_byte + 1 : node.end_byte - 1].decode("utf-8")
            if "\n" in written:
                raise _Refused(node, "a quoted string ends at its line (a heredoc spans lines)")
            return self._unescape(node, written)
        out = []
        children = node.children
        position = children[0].end_byte
        for child in [*children[1:-1], None]:
            end = children[-1].start_byte if child is None else child.start_byte
            gap = self.source[position:end].decode("utf-8")  # blanks the grammar skips
            written = "" if child is None else self.text(child)
            literal = child is None or child.type not in _TEMPLATE_PARTS
            if "\n" in gap or (literal and "\n" in written):
                raise _Refused(node, "a quoted string ends at its line (a heredoc spans lines)")
            out.append(gap)
            if child is None:
                break
            out.append(self._unescape(child, written) if literal else written)
            position = child.end_byte
        return "".join(out)

    def _unescape(self, node: Node, written: str) -> str:
        if "\\" not in written:
            return written

        def escape(match: re.Match[str]) -> str:
            simple, short, long, other = match.groups()
            if simple is not None:
                return _ESCAPED[simple]
            if other is not None:
                raise _Refused(node, f"invalid escape sequence {brief(match.group())} in a string")
            code = int(short or long, 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise _Refused(node, f"invalid escape sequence {brief(match.group())} in a string")
            return chr(code)

        return _ESCAPE.sub(escape, written)

    def _nesting(self, node: Node) -> None:
        """Refuse brackets and operators nested deeper than MAX_NESTING (walked without
        recursion, stopping at the first too deep)."""
        cursor = node.walk()
        depth = 0
        levels: list[bool] = []  # whether each node on the path down from ``node`` is one
        while True:
            if not cursor.goto_first_child():
                while True:
                    if not levels:
                        return
                    depth -= levels.pop()
                    if cursor.goto_next_sibling():
                        break
                    cursor.goto_parent()
            inner = cursor.node
            level = inner is not None and inner.type in _LEVELS
            levels.append(level)
            depth += level
            if depth > MAX_NESTING and inner is not None:
                message = f"nested too deeply: brackets or operators deeper than {MAX_NESTING}"
                raise _Refused(inner, message)
