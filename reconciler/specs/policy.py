"""Policy files: rules a plan must keep, written in CEL (docs/policy.md).

A policy file is YAML (``schemas/policy.schema.json``)::

    rules:
      - id: prod-replicas
        level: deny                 # or warn
        message: streams in prod keep 3 replicas
        kinds: [Stream, KeyValue]   # optional: the kinds the rule applies to
        when: resource.environment == "prod"   # optional: where it applies
        expr: resource.desired.num_replicas >= 3

Loading reads every file, checks it against the schema and compiles every expression
(``when`` and ``expr``) before anything is planned: YAML, schema and CEL errors, an
unknown variable (``resourse.kind``) or an unknown field of ``resource`` or ``step``
(``resource.envirnoment``) are one :class:`~reconciler.errors.SpecError` naming
``FILE:LINE`` and the rule. The CEL library is ``common-expression-language`` (the
``cel`` module, written in Rust; docs/policy.md says why), imported only when a policy
is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from reconciler.errors import Problem, SpecError
from reconciler.locations import Location
from reconciler.specs.document import Document
from reconciler.specs.loader import load_file
from reconciler.specs.paths import enclosing_root, outside_problem
from reconciler.specs.policy_bounds import MAX_RULES, load_cel, shape_problem, too_long
from reconciler.specs.schema import did_you_mean, schema_problems

if TYPE_CHECKING:
    import cel

Level = Literal["deny", "warn"]

#: The variables a rule reads, and their fields (docs/policy.md#variables).
VARIABLES: dict[str, tuple[str, ...]] = {
    "resource": (
        "kind",
        "name",
        "stream",
        "environment",
        "owner",
        "source",
        "desired",
        "live",
        "declared",
    ),
    "step": ("action", "destructive", "loss_messages", "loss_unknown", "fields"),
}
#: ``x.all(NAME, ...)``: the names comprehension macros bind (not variables).
_BOUND = re.compile(r"\.\s*(?:all|exists_one|exists|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,")
#: ``resource.FIELD`` / ``step.FIELD`` as written (string literals removed first).
_SELECTED = re.compile(r"(?<![\w.])(resource|step)\s*\.\s*([A-Za-z_]\w*)")
#: What is not code in an expression, found left to right: a ``//`` comment, a string
#: literal (``b``/``r`` prefixed, triple quoted across lines, or on one line; a raw one
#: has no escapes). Taken for code, an apostrophe in a comment opened a "string" that
#: hid the code after it from :func:`selected`, and a rule's ``has()`` went false.
#: A literal left open (a syntax error the CEL library reports) ends at the end of its
#: line or of the text: a literal that could fail to close was tried again from every
#: later quote, and 18,000 characters of ``'\\`` took 4 s before anything was checked.
_NOT_CODE = re.compile(
    r"//[^\n]*"
    r"|(?:[bB]?[rR]|[rR][bB])(?:'''[\s\S]*?(?:'''|\Z)|\"\"\"[\s\S]*?(?:\"\"\"|\Z)"
    r"|'[^'\n]*+(?:'|(?=\n)|\Z)|\"[^\"\n]*+(?:\"|(?=\n)|\Z))"
    r"|[bB]?(?:'''(?:\\[\s\S]|[^\\])*?(?:'''|\\?\Z)"
    r"|\"\"\"(?:\\[\s\S]|[^\\])*?(?:\"\"\"|\\?\Z)"
    r"|'(?:\\.|[^'\\\n])*+(?:'|(?=[\\\n])|\Z)|\"(?:\\.|[^\"\\\n])*+(?:\"|(?=[\\\n])|\Z))"
)


def code_of(source: str) -> str:
    """``source`` with every string literal made ``""`` and every comment a space: what
    is left names the variables and fields an expression reads."""
    return _NOT_CODE.sub(lambda m: " " if m.group().startswith("//") else '""', source)


@dataclass(frozen=True, eq=False)
class Rule:
    """One compiled rule: where it is written, what it checks, when it applies."""

    id: str
    level: Level
    message: str
    expr: str
    where: Location  # the rule's ``expr`` line
    program: cel.Program
    condition: cel.Program | None = None  # ``when``
    kinds: frozenset[str] | None = None
    source_when: str = ""

    def applies_to(self, kind: str) -> bool:
        return self.kinds is None or kind in self.kinds


@dataclass(frozen=True)
class Policy:
    """The rules of every policy file of a run, in file order."""

    rules: tuple[Rule, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.rules)

    @cached_property
    def selected(self) -> dict[str, frozenset[str] | None]:
        """What the rules read of each variable and config map (:func:`selected`)."""
        return selected([text for r in self.rules for text in (r.expr, r.source_when)])


NO_POLICY = Policy()


def load_policy(paths: Sequence[Path]) -> Policy:
    """The rules of ``paths`` (in order; a file named twice is read once), compiled; one
    SpecError with every problem of every file. No paths: :data:`NO_POLICY` (the CEL
    library is not imported)."""
    if not paths:
        return NO_POLICY
    problems: list[Problem] = []
    rules: list[Rule] = []
    seen: dict[str, Location] = {}
    read: set[Path] = set()
    for path in paths:
        if Path(path).resolve() in read:
            continue  # named twice (the project's, again by --policy): its rules once
        read.add(Path(path).resolve())
        for rule in _file_rules(Path(path), problems):
            first = seen.setdefault(rule.id, rule.where)
            if first is not rule.where:
                message = f"rule {rule.id!r} is already defined at {first}"
                problems.append(Problem(rule.where, "id", message))
            rules.append(rule)
    if len(rules) > MAX_RULES:
        message = f"{len(rules):,} rules in all (at most {MAX_RULES:,}): merge some"
        problems.append(Problem(rules[MAX_RULES].where, "rules", message))
    if problems:
        raise SpecError(problems)
    return Policy(tuple(rules))


def _file_rules(path: Path, problems: list[Problem]) -> list[Rule]:
    found: list[Problem] = []
    root = enclosing_root(path)  # a file of a repository: by its rule (a PR can link it out)
    why = outside_problem(root, path.name, path.parent) if root is not None else None
    if why is not None:
        problems.append(Problem(Location(str(path), 1), "", f"not read: {why}"))
        return []
    documents = load_file(path, found, within=root)  # and swapped since: not read either
    if not found and len(documents) != 1:
        count = f"{len(documents)} documents" if documents else "nothing"
        found.append(Problem(Location(str(path), 1), "", f"expected one mapping, found {count}"))
    if not found:
        found = schema_problems(documents[0], "policy")
    problems.extend(p for p in found if not p.warning)
    if any(not p.warning for p in found):
        return []
    document = documents[0]
    rules = []
    for index, raw in enumerate(document.body["rules"]):
        rule = _rule(document, index, raw, problems)
        if rule is not None:
            rules.append(rule)
    return rules


def _rule(
    document: Document, index: int, raw: dict[str, object], problems: list[Problem]
) -> Rule | None:
    prefix = f"rules.{index}"
    rule_id = str(raw["id"])
    program = _compiled(document, f"{prefix}.expr", rule_id, str(raw["expr"]), problems)
    condition = None
    if "when" in raw:
        condition = _compiled(document, f"{prefix}.when", rule_id, str(raw["when"]), problems)
        if condition is None:
            return None
    if program is None:
        return None
    kinds = raw.get("kinds")
    return Rule(
        id=rule_id,
        level="deny" if raw["level"] == "deny" else "warn",
        message=str(raw["message"]),
        expr=str(raw["expr"]),
        where=document.where(f"{prefix}.expr"),
        program=program,
        condition=condition,
        kinds=frozenset(str(k) for k in kinds) if isinstance(kinds, list) else None,
        source_when=str(raw.get("when", "")),
    )


def _compiled(
    document: Document, path: str, rule_id: str, source: str, problems: list[Problem]
) -> cel.Program | None:
    """``source`` compiled, or None with a problem at its line naming the rule (a shape
    too costly to evaluate too: :mod:`reconciler.specs.policy_bounds`, checked before
    the CEL library parses it)."""
    where = document.where(path)
    too_costly = too_long(source) or shape_problem(source, code_of(source))
    if too_costly is not None:
        problems.append(Problem(where, path, f"rule {rule_id!r}: {too_costly}"))
        return None
    try:
        program: cel.Program = load_cel().compile(source)
    except (ValueError, RuntimeError) as err:
        problems.append(Problem(where, path, f"rule {rule_id!r}: invalid CEL: {_first(err)}"))
        return None
    unknown = _unknown_names(source, program.variables())
    if unknown:
        problems.append(Problem(where, path, f"rule {rule_id!r}: {unknown}"))
        return None
    return program


#: The config maps of ``resource`` (wire configs: some 40 keys each).
CONFIGS = ("desired", "live", "declared")
_NAME = r"\s*\.\s*([A-Za-z_]\w*)\b(?!\s*\()"  # .NAME, not a method call
#: ``VARIABLE``, ``VARIABLE.FIELD`` or ``VARIABLE.FIELD.KEY`` (string literals removed).
_USE = re.compile(rf"(?<![\w.])(resource|step)\b(?:{_NAME}(?:{_NAME})?)?")


def selected(sources: Sequence[str]) -> dict[str, frozenset[str] | None]:
    """What ``sources`` read: for ``resource`` and ``step`` the fields they select, for
    each config map of ``resource`` (:data:`CONFIGS`) the keys they select from it
    (``resource.desired.num_replicas``: ``num_replicas``); None where one of them reads
    the whole (``'max_bytes' in resource.desired``, an index, an optional field, a
    method, ``resource`` alone). Evaluation hands CEL only that: turning values into
    CEL's cost tens of microseconds per config key (docs/performance.md#policy-evaluation), and a
    map cut to the keys an expression selects answers every selection of those keys
    (and ``has()`` of them) as the whole map does."""
    found: dict[str, frozenset[str] | None] = dict.fromkeys(("resource", "step", *CONFIGS))
    for name in found:
        found[name] = frozenset()
    for source in sources:
        for variable, field, key in _USE.findall(code_of(source)):
            _select(found, variable, field)
            if variable == "resource" and field in CONFIGS:
                _select(found, field, key)
    if found["resource"] is None:  # ``resource`` as a whole: its configs too
        found.update(dict.fromkeys(CONFIGS))
    return found


def _select(found: dict[str, frozenset[str] | None], name: str, key: str) -> None:
    known = found[name]
    if known is not None:
        found[name] = known | {key} if key else None


def _first(err: Exception) -> str:
    """The CEL library's error, its first line, without the echo of the expression."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return re.sub(r"^Failed to parse expression .*?: ERROR: <input>:", "", text)


def _unknown_names(source: str, variables: Sequence[str]) -> str | None:
    """What is unknown in ``source``: a variable, or a field of ``resource``/``step``."""
    bound = set(_BOUND.findall(code_of(source)))
    for name in variables:
        if name not in VARIABLES and name not in bound:
            hint = did_you_mean(name, VARIABLES)
            return f"unknown variable {name!r}{hint} (variables: resource, step)"
    for variable, field in _SELECTED.findall(code_of(source)):
        known = VARIABLES[variable]
        if field not in known and variable not in bound:
            hint = did_you_mean(field, known)
            return f"unknown field {variable}.{field}{hint} (fields: {', '.join(known)})"
    return None
