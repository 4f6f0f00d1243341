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
#: The nesting an expression's operators and brackets may reach (a bound on its syntax
#: tree's depth: about 600 bytes of stack per level in the library's parser, so 1,000
#: levels are well inside any thread's stack; 30,000 overflowed 8 MiB).
MAX_DEPTH = 1_000
#: Iterations the comprehensions of one expression may take, as estimated from their
#: nesting: a list literal by its length, anything else (``resource.desired.subjects``)
#: as :data:`DATA_GUESS` elements. 10^6 iterations take about 0.4 s in the library.
MAX_ITERATIONS = 1_000_000
DATA_GUESS = 100

#: The macros that iterate over their receiver (``x.all(v, ...)``).
_MACRO = re.compile(r"\.\s*(all|exists_one|exists|map|filter)\s*\($")
#: What makes a level of the syntax tree: an operator, a member or index, a ternary.
_OPERATOR = re.compile(r"&&|\|\||==|!=|<=|>=|[-+*/%<>?.\[!]|\bin\b")
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
    depth = _deepest(code) + len(_OPERATOR.findall(code))
    if depth > MAX_DEPTH:
        return (
            f"the expression nests too deep ({depth:,} operators and brackets, at most "
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


def _deepest(code: str) -> int:
    depth = deepest = 0
    for char in code:
        if char in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif char in _CLOSE:
            depth -= 1
    return deepest


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
