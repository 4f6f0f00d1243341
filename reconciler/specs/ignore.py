"""Drift ignore rules: what a project hides from drift reports and the plan's notes.

Apps create consumers, streams and buckets at run time; without a rule each of them keeps
drift red for ever. A rule is one line, in the project file's ``ignore:`` list or in a
``.reconcileignore`` file (docs/drift.md#ignore-rules)::

    # a comment: only a whole line (blank lines are skipped too)
    Consumer ORDERS/ephemeral-*
    KeyValue cache-*
    * TMP_*
    Stream ORDERS metadata.app_*
    !Consumer ORDERS/ephemeral-keep

``KIND NAME`` (a *resource rule*) hides an **unmanaged** resource (live, no spec, no
managed marker) whose kind and name match, and the unmanaged consumers of a stream or
bucket it hides; ``KIND NAME FIELD`` (a *field rule*) hides differing fields whose dotted
path matches from the drift of any resource of that kind and name. Names and fields are
globs (``fnmatch``: ``*``, ``?``, ``[abc]``, ``[!abc]``), case-sensitive; a consumer is
``STREAM/NAME``, each part a glob. A rule never hides a declared, missing, orphaned or
foreign resource (only field rules touch a declared resource's fields, and a field rule
of wildcards alone is refused), and never changes a step: the planner never sees the
rules, only the notes and drift display are filtered (:mod:`reconciler.planning.hidden`).

Every bad line is a ``FILE:LINE`` problem; all of them are reported at once.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as _field  # `field` is a rule's attribute
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.errors import Problem, SpecError
from reconciler.locations import Location

if TYPE_CHECKING:
    from reconciler.specs.document import Document

#: The file a spec folder (or the project root) may hold.
IGNORE_FILE = ".reconcileignore"
#: The kinds a rule may name (``*``: any kind but consumers).
KINDS = ("Stream", "Consumer", "KeyValue", "ObjectStore")
ANY_KIND = "*"
Matcher = Callable[[str], "re.Match[str] | None"]
_WILDCARDS = frozenset("*?.")
#: Field paths of every shape and kind: a field glob matching them all (``[!.]*``,
#: ``[a-z]*``) silences a resource's whole drift as ``*`` does, and is refused with it.
_PROBES = (
    "subjects",
    "storage",
    "max_age",
    "num_replicas",
    "description",
    "deny_delete",
    "metadata.team",
    "sources.0.name",
    "ack_wait",
    "history",
    "ttl",
)


@dataclass(frozen=True)
class IgnoreRule:
    """One rule as written: ``[!]KIND NAME [FIELD]``."""

    kind: str
    name: str  # a glob; ``STREAM/NAME`` for a consumer
    field: str | None  # a field path glob: a field rule
    negated: bool
    text: str  # the rule as written (stripped)
    where: Location
    #: The globs compiled once (a plan of 100,000 unmanaged resources asks every rule).
    _name: Matcher = _field(init=False, repr=False, compare=False)
    _stream: Matcher | None = _field(init=False, repr=False, compare=False)
    _path: Matcher | None = _field(init=False, repr=False, compare=False)

    @property
    def label(self) -> str:
        """``Consumer ORDERS/ephemeral-* (.reconcileignore:3)``."""
        return f"{self.text} ({self.where})"

    def __post_init__(self) -> None:
        stream_glob, _, name_glob = self.name.rpartition("/")
        object.__setattr__(self, "_name", _glob(name_glob))
        object.__setattr__(self, "_stream", _glob(stream_glob) if "/" in self.name else None)
        object.__setattr__(self, "_path", _glob(self.field) if self.field else None)

    def names(self, kind: str, name: str, stream: str | None) -> bool:
        """Whether the rule's kind and name pattern match this resource."""
        if self.kind not in (kind, ANY_KIND):
            return False
        if (kind == "Consumer") != (self._stream is not None):
            return False  # a consumer pattern is STREAM/NAME, nothing else's is
        if self._stream is not None and not self._stream(stream or ""):
            return False
        return self._name(name) is not None

    def fields(self, path: str) -> bool:
        """Whether a field rule names this dotted field path."""
        return self._path is not None and self._path(path) is not None


@dataclass(frozen=True)
class IgnoreRules:
    """The rules of a run, in order: the project file's ``ignore:`` list, then each
    ``.reconcileignore`` line. The last rule matching a resource (or field) decides."""

    rules: tuple[IgnoreRule, ...] = ()
    _by_kind: dict[str, tuple[IgnoreRule, ...]] = _field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __add__(self, other: IgnoreRules) -> IgnoreRules:
        return IgnoreRules((*self.rules, *other.rules))

    def deciding(self, kind: str, name: str, stream: str | None) -> IgnoreRule | None:
        """The last resource rule naming this resource (negated or not), or None."""
        for rule in self._resource_rules(kind):
            if rule.names(kind, name, stream):
                return rule
        return None

    def hiding(self, kind: str, name: str, stream: str | None) -> IgnoreRule | None:
        """The resource rule hiding this (unmanaged) resource, or None."""
        rule = self.deciding(kind, name, stream)
        return None if rule is None or rule.negated else rule

    def _resource_rules(self, kind: str) -> tuple[IgnoreRule, ...]:
        """The resource rules that may name a resource of ``kind``, the last first
        (worked out once per kind: a plan may ask for 100,000 resources)."""
        found = self._by_kind.get(kind)
        if found is None:
            found = tuple(
                r for r in reversed(self.rules) if r.field is None and r.kind in (kind, ANY_KIND)
            )
            self._by_kind[kind] = found
        return found

    def hiding_field(
        self, kind: str, name: str, stream: str | None, path: str
    ) -> IgnoreRule | None:
        """The field rule hiding this field of this resource's drift, or None."""
        return _decide(r for r in self.rules if r.fields(path) and r.names(kind, name, stream))


NO_RULES = IgnoreRules()


def _glob(pattern: str) -> Matcher:
    """A glob (``fnmatch``, case-sensitive) as a compiled full match."""
    return re.compile(fnmatch.translate(pattern)).match


def _decide(matching: Iterable[IgnoreRule]) -> IgnoreRule | None:
    last = None
    for last in matching:  # noqa: B007 - the last one decides
        pass
    return None if last is None or last.negated else last


@dataclass(frozen=True)
class Hidden:
    """How many resources one rule hid from a plan's notes or a drift report."""

    rule: str  # as written
    source: str  # FILE:LINE
    count: int
    fields: bool = False  # a field rule: resources whose differing fields it hid

    @property
    def label(self) -> str:
        return f"{self.rule} ({self.source})"

    def to_json(self) -> dict[str, Any]:
        kind = "fields" if self.fields else "resources"
        return {"rule": self.rule, "source": self.source, "hidden": self.count, "hides": kind}


def tally(found: Mapping[IgnoreRule, int], *, fields: bool = False) -> tuple[Hidden, ...]:
    """Counts per rule, in the rules' order."""
    return tuple(
        Hidden(rule.text, str(rule.where), count, fields) for rule, count in found.items() if count
    )


# --- reading rules ----------------------------------------------------------------------


def parse_rule(
    text: str, where: Location, problems: list[Problem], path: str = ""
) -> IgnoreRule | None:
    """One rule, or None with a problem at ``where`` (``path``: the project field)."""
    stripped = text.strip()
    negated = stripped.startswith("!")
    tokens = stripped.removeprefix("!").split()
    why = _shape_problem(tokens)
    if why is not None:
        problems.append(Problem(where, path, f"{why}: {stripped!r}"))
        return None
    kind, name = tokens[0], tokens[1]
    field = tokens[2] if len(tokens) == 3 else None
    return IgnoreRule(kind, name, field, negated, stripped, where)


def _shape_problem(tokens: Sequence[str]) -> str | None:
    """What is wrong with a rule's tokens, or None."""
    if len(tokens) not in (2, 3):
        return "a rule is KIND NAME or KIND NAME FIELD (one rule per line, # starts a comment line)"
    kind, name = tokens[0], tokens[1]
    if kind != ANY_KIND and kind not in KINDS:
        from reconciler.specs.schema import did_you_mean

        hint = did_you_mean(kind, KINDS, case_insensitive=True)
        return f"unknown kind {kind!r}{hint}; one of {', '.join(KINDS)} or *"
    if kind == "Consumer" and name.count("/") != 1:
        return "a Consumer rule names STREAM/NAME (e.g. ORDERS/ephemeral-* or */ephemeral-*)"
    if kind not in ("Consumer", ANY_KIND) and "/" in name:
        return f"a {kind} name has no '/' (only consumers are STREAM/NAME)"
    if kind == ANY_KIND and name.count("/") > 1:
        return "a name has at most one '/' (STREAM/NAME for consumers)"
    if len(tokens) == 3 and set(tokens[2]) <= _WILDCARDS:
        return "a field rule names a field (e.g. metadata.app_*), not wildcards alone"
    if len(tokens) == 3 and all(_glob(tokens[2])(probe) for probe in _PROBES):
        return "a field rule names a field (e.g. metadata.app_*), not a pattern every field matches"
    return None


def read_ignore_file(path: Path) -> IgnoreRules:
    """The rules of one ``.reconcileignore`` file; raises one SpecError naming every bad
    line as ``FILE:LINE``. A file of the repository like a spec: one that is a symlink
    pointing out of it (a pull request can add one) is refused unread (its first line
    came back in the error: a runner's ``/proc/self/environ`` in a PR comment)."""
    from reconciler.specs.document import Abort
    from reconciler.specs.files import read_text
    from reconciler.specs.paths import outside_problem, repository_root

    root = repository_root([path.parent])
    why = outside_problem(root, path.name, path.parent)
    if why is not None:
        raise SpecError([Problem(Location(str(path), 1), "", f"not read: {why}")])
    problems: list[Problem] = []
    try:  # still inside the repository once opened: it may have been swapped since
        text = read_text(path, within=root)
    except Abort as abort:
        raise SpecError([abort.problem]) from None
    rules = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        rule = parse_rule(line, Location(str(path), number), problems)
        if rule is not None:
            rules.append(rule)
    if problems:
        raise SpecError(problems)
    return IgnoreRules(tuple(rules))


def ignore_files(folders: Iterable[Path]) -> list[Path]:
    """The ``.reconcileignore`` files in ``folders`` (each once, in order)."""
    found: dict[Path, Path] = {}
    for folder in folders:
        candidate = folder / IGNORE_FILE
        if candidate.is_file():
            found.setdefault(candidate.resolve(), candidate)
    return list(found.values())


def rules_next_to(paths: Iterable[Path]) -> IgnoreRules:
    """The rules of the ``.reconcileignore`` in each spec folder given (a file's own
    folder for a spec file): a run without a project file."""
    folders = [p if p.is_dir() else p.parent for p in paths]
    rules = NO_RULES
    for file in ignore_files(folders):
        rules = rules + read_ignore_file(file)
    return rules


def project_rules(
    document: Document, listed: Iterable[str], folder: Path, problems: list[Problem]
) -> IgnoreRules:
    """A project file's rules: its ``ignore:`` items (problems at their lines, added to
    ``problems``), then the ``.reconcileignore`` in its ``folder`` (a SpecError of its own
    lines)."""
    rules = []
    for index, text in enumerate(listed):
        field_path = f"ignore.{index}"
        rule = parse_rule(str(text), document.where(field_path), problems, field_path)
        if rule is not None:
            rules.append(rule)
    found = IgnoreRules(tuple(rules))
    for file in ignore_files([folder]):
        found = found + read_ignore_file(file)
    return found
