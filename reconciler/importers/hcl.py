"""Reading ``.tf`` files (HCL) with python-hcl2, one top-level block at a time.

python-hcl2 builds a parse tree of about 270 bytes per byte it reads, and on a whole file
the cyclic collector walks that growing tree again and again: 30,000 resources (4.4 MiB)
took 1.2 GiB and grew faster than the file. So a file is cut after each top-level block
(:func:`blocks`: strings, templates, comments and heredocs stepped over) and each block
is parsed alone. What the parser cannot read is a SpecError at its line: a syntax error,
nesting deeper than its stack, a number longer than Python reads (4,300 digits). A file
over MAX_TF_BYTES is refused unread.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.errors import Problem, SpecError, brief
from reconciler.locations import Location

#: The largest ``.tf`` file read: python-hcl2 holds about 270 bytes of parse tree per
#: byte of the block it parses, and 8 MiB is over 50,000 resources.
MAX_TF_BYTES = 8 * 1024 * 1024
#: Brackets deeper than this are where a parse that ran out of stack is said to stop.
DEEP = 32

_RESOURCE = re.compile(r'^[ \t]*resource[ \t]+"([^"\n]+)"[ \t]+"([^"\n]+)"[ \t]*\{', re.MULTILINE)
#: ``variable "name" {`` and ``locals {``: the values a module's expressions may name.
_VALUES = re.compile(r'^[ \t]*(variable|locals)(?:[ \t]+"([^"\n]+)")?[ \t]*\{', re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Block:
    """One ``resource "kind" "label" { ... }`` block of a ``.tf`` file; also (from
    :func:`declarations`) a ``variable "label" {...}`` (kind ``variable``) or a
    ``locals {...}`` block (kind ``locals``, label empty)."""

    kind: str
    label: str
    body: dict[str, Any]  # as python-hcl2 reads it: expressions as "${...}" strings
    line: int  # of the block's header
    lines: dict[str, int]  # of its top-level attributes and nested blocks


#: The kinds :func:`declarations` gives the value blocks (no resource type is either).
VARIABLE, LOCALS = "variable", "locals"


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
        parsed = parse(chunk, first, name)
        if parsed.get("resource"):
            yield from _resource_blocks(parsed["resource"], chunk, first)
        if parsed.get(VARIABLE) or parsed.get(LOCALS):
            yield from _value_blocks(parsed, chunk, first)


def _resource_blocks(parsed: list[Any], chunk: str, first: int) -> Iterator[Block]:
    headers = _headers(chunk, first)
    for block in parsed:
        for kind, named in block.items():
            for label, body in named.items():
                offset, start = headers.get((kind, label), (-1, first))
                lines = _block_lines(chunk, offset, start) if offset >= 0 else {}
                yield Block(kind, label, body, start, lines)


def _value_blocks(parsed: dict[str, Any], chunk: str, first: int) -> Iterator[Block]:
    """The ``variable`` and ``locals`` blocks of one parsed piece, in file order."""
    headers = []
    line, seen = first, 0
    for header in _VALUES.finditer(chunk):
        line += chunk.count("\n", seen, header.start())
        seen = header.start()
        headers.append((header.group(1), header.group(2) or "", header.start(), line))
    variables = {k: v for item in parsed.get(VARIABLE) or [] for k, v in item.items()}
    locals_ = iter(parsed.get(LOCALS) or [])
    for kind, label, offset, start in headers:
        body = variables.get(label) if kind == VARIABLE else next(locals_, None)
        if isinstance(body, dict):
            yield Block(kind, label, body, start, _block_lines(chunk, offset, start))


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
        match = (_IN_STRING if in_string else _IN_CODE).search(text, position)
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


def parse(chunk: str, first: int, name: str) -> dict[str, Any]:
    """One piece of a ``.tf`` file, parsed; any failure is a SpecError at its line."""
    import hcl2

    options = hcl2.SerializationOptions(with_comments=False, strip_string_quotes=True)
    try:
        parsed: dict[str, Any] = hcl2.loads(chunk, serialization_options=options)
        return parsed
    except RecursionError:
        line, message = _deepest(chunk), "nested too deeply for the parser (brackets or operators)"
    except ValueError as err:  # Python's limit on the digits of an int read from text
        digits = re.search(r"\d{4301,}", chunk)
        if digits is None:
            line, message = getattr(err, "line", 1) or 1, f"invalid HCL: {_first_line(err)}"
        else:
            line = chunk.count("\n", 0, digits.start()) + 1
            count = len(digits.group())
            message = f"a number of {count} digits: out of range (Python reads 4300 at most)"
    except Exception as err:
        line, message = getattr(err, "line", 1) or 1, f"invalid HCL: {_first_line(err)}"
    line = int(line) if isinstance(line, int) and line > 0 else 1
    raise SpecError([Problem(Location(name, first + line - 1), "", message)]) from None


def _first_line(err: BaseException) -> str:
    text = str(err)
    return brief(text.splitlines()[0], 200).strip("'") if text else type(err).__name__


_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def _deepest(chunk: str) -> int:
    """The line (in ``chunk``) where brackets first nest deeper than DEEP, else its
    longest line (a long chain of operators)."""
    depth, longest, widest = 0, 1, -1
    for number, line in enumerate(chunk.split("\n"), start=1):
        if len(line) > widest:
            longest, widest = number, len(line)
        for char in _STRING.sub("", line):
            if char in "([{":
                depth += 1
                if depth > DEEP:
                    return number
            elif char in ")]}":
                depth -= 1
    return longest


_ATTRIBUTE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_-]*)\s*(=|\{)")


def _headers(chunk: str, first: int) -> dict[tuple[str, str], tuple[int, int]]:
    """Each ``resource "kind" "label" {`` line of ``chunk`` (which starts at line
    ``first``): (kind, label) -> (offset, line), in one pass."""
    found: dict[tuple[str, str], tuple[int, int]] = {}
    line, seen = first, 0
    for header in _RESOURCE.finditer(chunk):
        line += chunk.count("\n", seen, header.start())
        seen = header.start()
        found.setdefault((header.group(1), header.group(2)), (header.start(), line))
    return found


def _block_lines(chunk: str, offset: int, start: int) -> dict[str, int]:
    """The lines of the top-level attributes and nested blocks of the block whose header
    is at ``offset`` of ``chunk`` (line ``start``); reads the block's lines only."""
    where: dict[str, int] = {}
    depth, number = 0, start
    while offset <= len(chunk):
        end = chunk.find("\n", offset)
        end = len(chunk) if end < 0 else end
        line = chunk[offset:end]
        match = _ATTRIBUTE.match(line)
        if depth == 1 and match:
            where.setdefault(match.group(1), number)
        code = _STRING.sub("", line)
        depth += code.count("{") - code.count("}")
        if depth <= 0:
            break
        offset, number = end + 1, number + 1
    return where
