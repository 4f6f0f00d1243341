"""What a policy rule may cost, and the CEL engine it runs on (docs/policy.md#budgets).

The CEL library (``common-expression-language``, Rust underneath) has no cost or step
limit, and holds the GIL for as long as an evaluation runs: a rule of nested
comprehensions ran for minutes, and in the agent nothing else (its HTTP endpoints, its
SIGTERM handler) ran meanwhile. Two bounds keep that from anyone who can commit a
policy file:

- at load (here): a rule's expression is refused, ``FILE:LINE`` and the rule named,
  when its shape alone is too costly: longer than :data:`MAX_CHARS`, nested deeper than
  :data:`MAX_DEPTH` (the library's parser recurses and a chain of 30,000 ``+`` crashed
  the process with a stack overflow, a segmentation fault no ``try`` catches), or when
  its comprehensions multiply to more than :data:`MAX_ITERATIONS` (eight nested
  ``[0, ..., 9].all(...)``: 10^8); a run of more than :data:`MAX_RULES` rules is
  refused too;
- at run time (``planning.policy_worker``): every evaluation runs in a worker process
  that is killed when it goes over its budget.

:func:`load_cel` imports the library's compiled module without the package's
``__init__``, which imports its command line interface (``prompt_toolkit``, ``rich``:
150 ms of the 160 ms the import takes).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

#: Characters of one expression (``when`` or ``expr``).
MAX_CHARS = 20_000
#: Rules of one run, every policy file together (each is evaluated on every resource:
#: 1,000 rules load in about 0.6 s, and 10,000 in 5 s, in the planning process).
MAX_RULES = 1_000
#: The depth an expression's syntax tree may reach, estimated from its operators (each
#: a level over the deepest of its operands, by precedence), members, indexes, calls
#: and brackets: about 600 bytes of stack per level in the library's parser, so 1,000
#: levels are well inside any thread's stack (1,500 passed in 1 MiB, 30,000 overflowed
#: 8 MiB).
MAX_DEPTH = 1_000
#: Iterations the comprehensions of one expression may take, as estimated from their
#: nesting: a list literal by its length, anything else (``resource.desired.subjects``)
#: as :data:`DATA_GUESS` elements. 10^6 iterations take about 0.4 s in the library.
MAX_ITERATIONS = 1_000_000
DATA_GUESS = 100

#: The macros that iterate over their receiver (``x.all(v, ...)``).
_MACRO = re.compile(r"\.\s*(all|exists_one|exists|map|filter)\s*\($")
#: The tokens of an expression's code (its strings already ``""``).
_TOKEN = re.compile(
    r"0[xX][0-9a-fA-F]+[uU]?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?[uU]?|[A-Za-z_]\w*|\"\""
    r"|&&|\|\||==|!=|<=|>=|\S"
)
#: Binary operators from the loosest to the tightest (each a level of the syntax tree:
#: ``a || b || c`` is two levels over its operands), the ternary's two signs first.
_LEVELS = (
    frozenset({"?", ":"}),
    frozenset({"||"}),
    frozenset({"&&"}),
    frozenset({"==", "!=", "<", "<=", ">", ">=", "in"}),
    frozenset({"+", "-"}),
    frozenset({"*", "/", "%"}),
)
_NAME = re.compile(r"[A-Za-z_]\w*$")
#: Binary: a ``-`` after one of these ends an operand (else it is a unary minus).
_OPERAND_END = re.compile(r"[\w\"\])}]$")
_OPEN, _CLOSE = "([{", ")]}"


def load_cel() -> ModuleType:
    """The CEL library's compiled module (``cel.Program``, ``cel.compile``...), loaded
    without its package's ``__init__`` (which imports its CLI); ``import cel`` when the
    package is laid out otherwise."""
    loaded = sys.modules.get("cel.cel") or sys.modules.get("cel")
    if loaded is not None and hasattr(loaded, "compile"):
        return loaded
    spec = importlib.util.find_spec("cel")
    places = spec.submodule_search_locations if spec is not None else None
    found = [p for place in places or () for p in Path(place).glob("cel.*.so")]
    if len(found) == 1:
        module_spec = importlib.util.spec_from_file_location("cel.cel", found[0])
        if module_spec is not None and module_spec.loader is not None:
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            sys.modules["cel.cel"] = module
            return module
    import cel  # pragma: no cover - another layout of the package

    return cel  # pragma: no cover


def too_long(source: str) -> str | None:
    """Why ``source`` is too long to look at further, or None."""
    if len(source) > MAX_CHARS:
        return f"the expression is {len(source):,} characters long (at most {MAX_CHARS:,})"
    return None


def shape_problem(source: str, code: str) -> str | None:
    """Why the expression ``source`` (``code``: it without strings and comments,
    ``specs.policy.code_of``, worked out once :func:`too_long` said nothing) is too
    costly to evaluate, or None."""
    if (long := too_long(source)) is not None:
        return long
    pairs = _pairs(code)
    if pairs is None:
        return None  # unbalanced brackets: the library's own syntax error says where
    try:
        levels = f"about {_depth(_grouped(code)):,}"
    except RecursionError:  # brackets in brackets some 450 deep
        levels = f"more than {MAX_DEPTH:,}"
    if not levels.startswith("about") or int(levels[6:].replace(",", "")) > MAX_DEPTH:
        return (
            f"the expression nests too deep (a syntax tree of {levels} levels, at most "
            f"{MAX_DEPTH:,}): split it into several rules"
        )
    try:
        cost = _iterations(code, 0, len(code), pairs)  # recurses as deep as macros nest
    except RecursionError:
        return "the expression nests its comprehensions too deep: split it into several rules"
    if cost > MAX_ITERATIONS:
        return (
            f"its comprehensions would take about {_rounded(cost)} iterations per resource "
            f"(at most {MAX_ITERATIONS:,}; a list literal counts its length, anything else "
            f"{DATA_GUESS}): nest fewer all/exists/map/filter"
        )
    return None


def _rounded(cost: int) -> str:
    return f"10^{len(str(cost)) - 1}" if cost >= 10**7 else f"{cost:,}"


def _pairs(code: str) -> dict[int, int] | None:
    """Each bracket's position to its partner's (both ways); None when unbalanced."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for at, char in enumerate(code):
        if char in _OPEN:
            stack.append(at)
        elif char in _CLOSE:
            if not stack or _OPEN.index(code[stack[-1]]) != _CLOSE.index(char):
                return None
            start = stack.pop()
            pairs[start], pairs[at] = at, start
    return None if stack else pairs


#: A bracket's contents: its tokens, a bracket inside as a list of its own.
Group = list["str | Group"]


def _grouped(code: str) -> Group:
    """``code``'s tokens, each bracket's as a list (brackets balanced: :func:`_pairs`);
    a ``-`` that is not binary is written ``neg``."""
    root: Group = []
    stack = [root]
    last = ""
    for token in _TOKEN.findall(code):
        if token in _OPEN:
            inner: Group = []
            stack[-1].append(inner)
            stack.append(inner)
        elif token in _CLOSE:
            stack.pop()
        else:
            binary = token == "-" and _OPERAND_END.search(last) is not None
            stack[-1].append(token if token != "-" or binary else "neg")
        last = token
    return root


def _depth(items: Group) -> int:
    """How deep the syntax tree of ``items`` may go: each binary operator a level over
    the deepest of its operands (``a || b || c``: 2 + that of ``a``), each member,
    index, call (``x.f(...)`` one), ``!`` and unary minus a level, a bracket's contents
    below it."""
    parts = _split(items, frozenset({","}))
    if len(parts) > 1:
        return max(_depth(part) for part in parts)
    for level in _LEVELS:
        parts = _split(items, level)
        if len(parts) > 1:
            return len(parts) - 1 + max(_depth(part) for part in parts)
    chain, inner = 0, 0
    for at, item in enumerate(items):
        if isinstance(item, list):
            inner = max(inner, _depth(item))
            method = at >= 2 and items[at - 2] == "." and _NAME.match(str(items[at - 1]))
            chain += 0 if method else 1  # ``x.f(...)``: one node, its ``.`` counted
        elif item in (".", "!", "neg"):
            chain += 1
    return chain + inner + 1


def _split(items: Group, signs: frozenset[str]) -> list[Group]:
    parts: list[Group] = [[]]
    for item in items:
        if isinstance(item, str) and item in signs:
            parts.append([])
        else:
            parts[-1].append(item)
    return parts


def _iterations(code: str, start: int, end: int, pairs: dict[int, int]) -> int:
    """The iterations of the comprehensions in ``code[start:end]``: each macro call's
    receiver size times (one plus what its body iterates), summed."""
    total, at = 0, start
    while at < end:
        if code[at] == "(" and _MACRO.search(code, max(start, at - 20), at + 1):
            close = pairs[at]
            size = _size(code, code.rindex(".", start, at), pairs)
            total += size * (1 + _iterations(code, at + 1, close, pairs))
            at = close + 1
            continue
        at += 1
    return total


def _size(code: str, dot: int, pairs: dict[int, int]) -> int:
    """How many elements the receiver ending before ``code[dot]`` (a macro's ``.``) has:
    a list or map literal its own, a ``map``/``filter`` as many as its receiver, else
    :data:`DATA_GUESS`."""
    while True:
        end = dot - 1
        while end >= 0 and code[end].isspace():
            end -= 1
        if end < 0 or code[end] not in "])}":
            return DATA_GUESS
        start = pairs[end]
        if code[end] == ")":
            head = code[max(0, start - 20) : start + 1]
            if not re.search(r"\.\s*(map|filter)\s*\($", head):
                return DATA_GUESS
            dot = code.rindex(".", 0, start)  # a chain: the receiver's receiver
            continue
        before = code[max(0, start - 1_000) : start].rstrip()
        if code[end] == "]" and before and (before[-1].isalnum() or before[-1] in "_)]"):
            return DATA_GUESS  # an index (``x[0]``), not a literal
        return _elements(code, start + 1, end, pairs)


def _elements(code: str, start: int, end: int, pairs: dict[int, int]) -> int:
    """The top-level elements between ``start`` and ``end`` (commas between them)."""
    if not code[start:end].strip():
        return 0
    count, at = 1, start
    while at < end:
        if code[at] in _OPEN:
            at = pairs[at]
        elif code[at] == ",":
            count += 1
        at += 1
    trailing = code[start:end].rstrip().endswith(",")
    return count - 1 if trailing else count
