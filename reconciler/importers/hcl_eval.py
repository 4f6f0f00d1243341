"""The values of HCL expressions, as Terraform would compute them, where they can be known
from the files alone.

A :class:`Module` is what a folder of ``.tf`` files declares: ``variable`` blocks (their
``default``), ``locals`` and resources. :meth:`Module.value` turns what
:mod:`reconciler.importers.hcl` read (expressions kept as ``"${...}"`` strings) into
values:

- literals; strings with ``${...}`` interpolations and heredocs, the escapes ``$${`` and
  ``%%{`` undone as Terraform does (a heredoc's lines end in a newline; ``<<-`` takes the
  shortest indentation off every line);
- integer arithmetic (``60 * 60 * 24``), numbers in exponent form read exactly (``1e6``);
- references: ``var.NAME`` (its default), ``local.NAME``, and any attribute of a resource
  of the module (``jetstream_kv_bucket.test.name``, ``jetstream_stream.x.max_age``; one
  not written has the provider's schema default), the ``id`` where the provider makes it
  from the name (``jetstream_stream.x.id`` is ``JETSTREAM_STREAM_<name>``); references in
  arithmetic (``var.days * 86400``) and in strings (``"${local.prefix}.*"``) too.

Anything else (functions, conditionals, ``data``/``module`` references, a variable with
no default, a ``sensitive = true`` variable (its value is never copied into a spec nor
shown), a cycle, references nested deeper than MAX_REFERENCE_DEPTH) raises
:class:`Unresolved` naming the reference and why: a value that
cannot be known is never guessed. Bounded work on hostile input: every number, literal or
computed at each step, must fit a signed 64-bit integer (the provider's Go ``int64``), and
an expression longer than MAX_EXPRESSION characters, and a value of more than MAX_VALUE
characters and items (strings or lists doubled local after local), are not evaluated
(:class:`Unreadable`).
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.importers.hcl import marks_sensitive

#: The longest expression evaluated as integer arithmetic (``60 * 60 * 24 * 365`` is 18).
MAX_EXPRESSION = 256
#: Every number of the provider's schema is a Go int64.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_OUT_OF_RANGE = "out of range: a number of the provider must fit in a signed 64-bit integer"
#: How many references deep a value may be made (``local.a`` = ``local.b`` = ...): bounded
#: work, and far from Python's recursion limit.
MAX_REFERENCE_DEPTH = 64


class Unreadable(Exception):
    """An expression that is refused outright (too long, or out of range)."""


class Unresolved(Exception):
    """An expression whose value the files do not give: ``expression`` (the text of the
    attribute's value it was found in), ``why`` (the reference and the reason);
    ``sensitive``: a ``sensitive = true`` variable's or one made by ``sensitive()`` (no
    file the import reads gives it: the state marks it too; its expression is not
    quoted)."""

    def __init__(self, expression: str, why: str = "", *, sensitive: bool = False) -> None:
        super().__init__(expression)
        self.expression = expression
        self.why = why
        self.sensitive = sensitive


#: The most characters (strings) and items (lists, objects) one value may hold, all its
#: parts counted: ``"${local.a}${local.a}"`` doubles at each step, and 40 such locals
#: took 4.6 GB before this bound.
MAX_VALUE = 16 * 1024 * 1024
_TOO_LONG = f"a value of more than {MAX_VALUE:,} characters and items is not evaluated"


def _size(value: Any, seen: dict[int, int]) -> int:
    """Characters and items of ``value``, every part counted (as written out): values
    shared by reference are counted each time they appear, measured once (``seen``)."""
    if isinstance(value, str):
        return len(value)
    if not isinstance(value, (list, dict)):
        return 1
    if id(value) not in seen:
        items = value.values() if isinstance(value, dict) else value
        seen[id(value)] = 1 + sum(_size(item, seen) + 1 for item in items)
    return seen[id(value)]


def in_range(number: int) -> int:
    if not INT64_MIN <= number <= INT64_MAX:
        shown = str(number) if number.bit_length() < 128 else f"a {number.bit_length()}-bit number"
        raise Unreadable(f"{shown} is {_OUT_OF_RANGE}")
    return number


_OPERATORS: Mapping[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}
_EXPONENT_FORM = re.compile(r"(\d+)(?:\.(\d+))?[eE]([+-]?\d+)")


def _constant(node: ast.Constant, expression: str) -> int | None:
    """An integer literal, or a whole number in exponent form (``1e6``, ``2.5e3``); None
    for anything else. Exact: the digits are read as an integer, never as a float."""
    if type(node.value) is int:
        return in_range(node.value)
    match = _EXPONENT_FORM.fullmatch(ast.get_source_segment(expression, node) or "")
    if type(node.value) is not float or match is None:
        return None
    fraction = match.group(2) or ""
    mantissa = int(match.group(1) + fraction)  # digits of an expression of MAX_EXPRESSION
    shift = int(match.group(3)) - len(fraction)
    if mantissa == 0:
        return 0
    if shift > 19:  # 10**19 is already out of range: never compute 10**shift
        raise Unreadable(f"{match.group()} is {_OUT_OF_RANGE}")
    if shift >= 0:
        return in_range(mantissa * 10**shift)
    if -shift > MAX_EXPRESSION:
        return None  # a fraction of 1
    whole, rest = divmod(mantissa, 10**-shift)
    return None if rest else in_range(whole)


def arithmetic(expression: str) -> int | None:
    """The value of integer arithmetic (``60 * 60 * 24``); None for anything else.
    Raises Unreadable for an expression longer than MAX_EXPRESSION and for any value,
    on the way or at the end, out of the signed 64-bit range: the work is bounded."""
    text = expression.strip()
    if len(text) > MAX_EXPRESSION:
        raise Unreadable(f"an expression longer than {MAX_EXPRESSION} characters is not evaluated")
    if _NUMBER.search(text) is None:
        return None  # no number in it (``jetstream_stream.S1.id``): never worth parsing
    try:
        return _evaluated(text)
    except (RecursionError, MemoryError):  # never remembered: they say nothing of the text
        return None


#: Where a number can start in Python's reading of a text: a digit that no letter, digit
#: or ``_`` comes before (those digits belong to a name: ``S1``). A text without one holds
#: no number, so :func:`_evaluated` gives None for it (none of its values or errors come
#: but from numbers); each resource's references (``jetstream_stream.S1.id``) were
#: parsed by Python's parser one by one, more than its cache holds.
_NUMBER = re.compile(r"(?<!\w)\d")


@functools.lru_cache(maxsize=1024)
def _evaluated(text: str) -> int | None:
    """:func:`arithmetic` of a stripped expression of at most MAX_EXPRESSION characters,
    remembered: a repository writes the same few (``60 * 60 * 24 * 7``) on every
    resource, and Python's parser was a tenth of reading 30,000 of them. An error
    (Unreadable) is raised again each time, never remembered; the values are integers
    or None, and the cache holds at most 1024 texts of 256 characters."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return None

    def value(node: ast.AST) -> int | None:
        if isinstance(node, ast.Constant):
            return _constant(node, text)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = value(node.operand)
            return None if inner is None else in_range(-inner)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = value(node.left), value(node.right)
            if left is None or right is None or (isinstance(node.op, ast.FloorDiv) and not right):
                return None
            return in_range(_OPERATORS[type(node.op)](left, right))
        return None

    return value(tree.body)


EXPRESSION = re.compile(r"^\$\{(.*)\}$", re.DOTALL)
_NAME = r"[A-Za-z_][A-Za-z0-9_-]*"
#: ``var.NAME``, ``local.NAME`` or ``TYPE.LABEL.ATTRIBUTE`` of a resource of the provider.
_REFERENCE = rf"(?:(?:var|local)\.{_NAME}|jetstream_[a-z_]+\.{_NAME}\.[A-Za-z_][A-Za-z0-9_]*)"
_WHOLE_REFERENCE = re.compile(_REFERENCE)
_REFERENCE_IN = re.compile(rf"(?<![\w.]){_REFERENCE}(?![\w.\[(-])")
_HEREDOC = re.compile(
    r"<<(-?)([A-Za-z_][A-Za-z0-9_-]*)\r?\n(?:(.*?)\r?\n)?[ \t]*\2[ \t]*", re.DOTALL
)
#: In a string: the escapes, an interpolation without nested braces or quotes, a directive.
_TEMPLATE_PART = re.compile(r'\$\$\{|%%\{|\$\{([^{}"]*)\}|%\{')
_INTERPOLATION = re.compile(r"(?<!\$)\$\{")
_NO_DEFAULT = object()
#: A ``sensitive = true`` variable: its value is never written into a spec nor shown.
_SENSITIVE = object()


def heredoc_text(raw: str) -> str:
    """``raw`` with a heredoc's markers taken off as Terraform does (else ``raw``)."""
    heredoc = _HEREDOC.fullmatch(raw)
    if heredoc is None:
        return raw
    body = heredoc.group(3)
    lines = [] if body is None else body.split("\n")
    if heredoc.group(1):
        margins = [len(line) - len(line.lstrip(" \t")) for line in lines if line.strip()]
        lines = [line[min(margins, default=0) :] for line in lines]
    return "".join(line + "\n" for line in lines)


@dataclass
class Module:
    """What one folder of ``.tf`` files declares, for its expressions to name."""

    #: variable name -> its ``default`` as read (absent: declared with no default)
    variables: dict[str, Any] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    #: (type, label) -> the attributes as read
    resources: dict[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    #: type -> the provider's schema defaults (an attribute not written has that value)
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: type -> the prefix of the id the provider makes from the resource's name
    ids: Mapping[str, str] = field(default_factory=dict)
    _done: dict[str, Any] = field(default_factory=dict)
    _active: list[str] = field(default_factory=list)

    def declare_variable(self, name: str, body: Mapping[str, Any]) -> None:
        sensitive = body.get("sensitive") in (True, "true", "${true}")
        self.variables[name] = _SENSITIVE if sensitive else body.get("default", _NO_DEFAULT)

    def value(self, raw: Any) -> Any:
        """The value of what :mod:`.hcl` read; raises Unresolved or Unreadable."""
        if isinstance(raw, list):
            return [self.value(item) for item in raw]
        if isinstance(raw, dict):
            return {k: self.value(v) for k, v in raw.items() if not str(k).startswith("__")}
        if isinstance(raw, int) and not isinstance(raw, bool):
            return in_range(raw)
        if not isinstance(raw, str):
            return raw
        if "${" not in raw and "%{" not in raw and "<<" not in raw:
            return raw  # no interpolation, directive nor heredoc: what _template gives
        match = EXPRESSION.match(raw)
        try:
            if match is not None and not _INTERPOLATION.search(match.group(1)):
                return self._expression(match.group(1).strip())
            return self._template(raw)
        except Unresolved as err:
            err.expression = match.group(1).strip() if match is not None else raw
            if not err.sensitive and marks_sensitive(err.expression):  # sensitive("...")
                err.why, err.sensitive = "a value marked sensitive() is not copied", True
            raise

    def attribute(self, kind: str, label: str, attr: str) -> Any:
        """The value of a resource's attribute (memoised: each is worked out once)."""
        return self._reference(f"{kind}.{label}.{attr}")

    def _template(self, raw: str) -> str:
        text = heredoc_text(raw)

        def part(match: re.Match[str]) -> str:
            token = match.group()
            if token in ("$${", "%%{"):
                return token[1:]
            if token == "%{":
                raise Unresolved(raw, "a template directive (%{...})")
            value = self._expression(match.group(1).strip())
            if isinstance(value, bool):
                return "true" if value else "false"
            if isinstance(value, (str, int)):
                return str(value)
            raise Unresolved(raw, f"{match.group(1).strip()} is not a string or a number")

        interpolations = len(_INTERPOLATION.findall(text))
        found = [m for m in _TEMPLATE_PART.finditer(text) if m.group().startswith("${")]
        if interpolations != len(found):
            raise Unresolved(raw, "an interpolation this importer cannot read")
        length = len(text)

        def bounded(match: re.Match[str]) -> str:
            nonlocal length
            made = part(match)
            length += len(made)
            if length > MAX_VALUE:
                raise Unreadable(_TOO_LONG)
            return made

        return _TEMPLATE_PART.sub(bounded, text)

    def _expression(self, expression: str) -> Any:
        number = arithmetic(expression)
        if number is not None:
            return number
        if _WHOLE_REFERENCE.fullmatch(expression):
            return self._reference(expression)
        references = _REFERENCE_IN.findall(expression)
        if references:
            numbers = {ref: self._reference(ref) for ref in references}
            if not all(type(n) is int for n in numbers.values()):
                words = ", ".join(ref for ref, n in numbers.items() if type(n) is not int)
                raise Unresolved(expression, f"{words}: not a number")
            substituted = _REFERENCE_IN.sub(lambda m: str(numbers[m.group()]), expression)
            number = arithmetic(substituted)
            if number is not None:
                return number
        raise Unresolved(expression)

    def _reference(self, reference: str) -> Any:
        if reference in self._done:
            return self._done[reference]
        if reference in self._active:
            chain = [*self._active[self._active.index(reference) :], reference]
            raise Unresolved(reference, "a cycle: " + " -> ".join(chain))
        if len(self._active) >= MAX_REFERENCE_DEPTH:
            why = f"references nested deeper than {MAX_REFERENCE_DEPTH} (from {self._active[0]})"
            raise Unresolved(reference, why)
        raw = self._raw(reference)
        self._active.append(reference)
        try:
            value = raw() if callable(raw) else self.value(raw)
        finally:
            self._active.pop()
        if isinstance(value, (str, list, dict)) and _size(value, {}) > MAX_VALUE:
            raise Unreadable(f"{reference}: {_TOO_LONG}")  # (anything else is 1)
        self._done[reference] = value
        return value

    def _raw(self, reference: str) -> Any:
        """What ``reference`` names, as read (a callable for a value made from others)."""
        scope, _, rest = reference.partition(".")
        if scope == "var":
            if rest not in self.variables:
                raise Unresolved(reference, f"{reference}: no variable {rest!r} is declared")
            if self.variables[rest] is _NO_DEFAULT:
                raise Unresolved(reference, f"{reference}: variable {rest!r} has no default")
            if self.variables[rest] is _SENSITIVE:
                why = f"{reference}: variable {rest!r} is sensitive, its value is not copied"
                raise Unresolved(reference, why, sensitive=True)
            return self.variables[rest]
        if scope == "local":
            if rest not in self.locals:
                raise Unresolved(reference, f"{reference}: no local value {rest!r} is declared")
            return self.locals[rest]
        label, _, attr = rest.partition(".")
        attrs = self.resources.get((scope, label))
        if attrs is None:
            raise Unresolved(reference, f"{reference}: no resource {scope}.{label} in these files")
        if attr in attrs:
            return attrs[attr]
        if attr == "id" and scope in self.ids:
            return lambda: self.ids[scope] + str(self.attribute(scope, label, "name"))
        if attr in self.defaults.get(scope, {}):
            return self.defaults[scope][attr]
        why = "known only once Terraform applies it" if attr == "id" else "not set"
        raise Unresolved(reference, f"{reference}: {why}")
