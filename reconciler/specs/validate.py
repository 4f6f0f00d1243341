"""From documents to validated specs: schema, units, identity, cross-resource checks.

``load_specs(paths)`` = load + ``validate_documents``. Every problem of every document is
collected first; if there is any, one :class:`~reconciler.errors.SpecError` carries them
all. A returned :class:`~reconciler.specs.spec.Spec` has its config in wire units (integer
nanoseconds and bytes) without the spec-only fields ``kind``, ``stream`` and ``external``.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from reconciler.errors import Problem, SpecError
from reconciler.identity import stream_of
from reconciler.locations import Location
from reconciler.specs import cache as spec_cache
from reconciler.specs.checks import cross_resource_problems
from reconciler.specs.document import Abort, Document
from reconciler.specs.fields import UNIT_FIELDS, Unit, field_limit, unit_paths
from reconciler.specs.files import inside, read_bytes, real_spec_files
from reconciler.specs.lifecycle import MANAGE, lifecycle_of
from reconciler.specs.loader import Loading, load_file, load_spec_files
from reconciler.specs.overlay import apply_overlays
from reconciler.specs.paths import outside_problem, repository_root, resolved
from reconciler.specs.schema import kind_problem, schema_problems
from reconciler.specs.spec import Kind, Spec, entry_config
from reconciler.specs.standby import standby_of
from reconciler.specs.units import AMBIGUOUS, UnitError, ambiguity, parse_duration, parse_size

SPEC_ONLY_FIELDS = ("kind", "stream", "external", "lifecycle", "standby")
#: kind -> the top-level fields under which its unit fields are (a document holding none
#: of them has nothing to convert: most consumers).
_UNIT_HEADS: dict[str, frozenset[str]] = {
    kind: frozenset(pattern.split(".")[0] for pattern in fields)
    for kind, fields in UNIT_FIELDS.items()
}


def load_specs(
    paths: Sequence[str | Path],
    *,
    overlays: Sequence[str | Path] = (),
    warnings: list[Problem] | None = None,
    strict: bool = False,
    cache: Path | None = None,
    loading: Loading | None = None,
) -> list[Spec]:
    """Load, validate and check every spec under ``paths``; raise one SpecError.

    Every file read, and every file a spec names (``value_file``), stays inside the
    repository root of ``paths`` and ``overlays`` (:mod:`reconciler.specs.paths`): a
    file found in a folder through a symlink pointing out of it is an error too.

    Files that cannot be read do not hide the problems of the others; cross-resource
    checks run only when every file was read (a stream in an unreadable file would
    otherwise make its consumers look orphaned). Warnings (odd but accepted, see
    ``Problem.warning``) go to ``warnings``; with ``strict`` they are errors. The
    documents under ``overlays`` are merged into the specs first (``specs.overlay``), so
    what is validated is the environment's merged result. With ``cache`` (a folder),
    a run whose files, options and validating code are unchanged reuses the specs
    validated before (``specs.cache``); invalid runs are never cached. ``loading``: how the
    files are read (``loader.load_spec_files``).
    """
    problems: list[Problem] = []
    root = repository_root([*paths, *overlays])
    files = inside(root, real_spec_files(paths, problems), problems)
    overlay_files = inside(root, real_spec_files(overlays, problems), problems) if overlays else []
    key = _cache_key(cache, files, overlay_files, strict, root) if not problems else None
    if cache is not None and key is not None:
        hit = spec_cache.load(cache, key)
        if hit is not None:
            specs, said = hit
            if warnings is not None:
                warnings.extend(said)
            return specs
    # less the files they name as data; each file read still in the root once opened
    documents = load_spec_files(files, problems, loading, within=root)
    if paths and not documents and not _errors(problems):
        problems.append(_nothing_declared(paths))
    if overlays:
        patches = [doc for path in overlay_files for doc in load_file(path, problems, within=root)]
        documents = apply_overlays(documents, patches, problems)
    try:
        specs = validate_documents(
            _let_go(documents),
            cross_checks=not _errors(problems),
            warnings=problems,
            strict=strict,
            root=root,
        )
    except SpecError as err:
        _said(problems, warnings, strict)
        raise SpecError(_errors(problems, strict=strict) + err.problems) from None
    checked = _checked(specs, problems, warnings, strict)
    if cache is not None and key is not None:
        spec_cache.store(cache, key, checked, [p for p in problems if p.warning])
    return checked


def _nothing_declared(paths: Sequence[str | Path]) -> Problem:
    """The warning for spec paths holding no document at all (an empty file, a folder of
    other files, the wrong folder): a plan of them declares nothing, and ``--prune``
    would delete every resource this owner manages."""
    listed = ", ".join(str(path) for path in paths[:3]) + (" ..." if len(paths) > 3 else "")
    return Problem(
        None,
        "",
        f"no spec document in {listed} (*.yaml, *.yml, *.json files; hidden folders "
        "skipped): nothing is declared, so --prune would delete every resource this "
        "owner manages",
        warning=True,
    )


def _let_go(documents: list[Document]) -> Iterator[Document]:
    """``documents`` in order, each let go of as it is handed over: a document's values
    are freed once its spec is made (its copy, in wire units), not when the last spec
    is, and the specs reuse that memory (loading 101,000 documents: peak 187 -> 174 MiB)."""
    documents.reverse()
    while documents:
        yield documents.pop()


def _cache_key(
    cache: Path | None, files: list[Path], overlay_files: list[Path], strict: bool, root: Path
) -> str | None:
    if cache is None:
        return None
    try:
        return spec_cache.cache_key(files, overlay_files, strict, root)
    except OSError:
        return None  # unreadable now: the normal path reports it


def _errors(problems: list[Problem], *, strict: bool = False) -> list[Problem]:
    return [p for p in problems if strict or not p.warning]


def _checked(
    specs: list[Spec], problems: list[Problem], warnings: list[Problem] | None, strict: bool
) -> list[Spec]:
    errors = _errors(problems, strict=strict)
    _said(problems, warnings, strict)
    if errors:
        raise SpecError(errors)
    return specs


def _said(problems: list[Problem], warnings: list[Problem] | None, strict: bool) -> None:
    """The warnings among ``problems`` into ``warnings``, also when errors follow, so a run
    that fails still shows them beside its errors (under ``strict`` they are the errors)."""
    if warnings is not None and not strict:
        warnings.extend(p for p in problems if p.warning and p not in warnings)


def validate_documents(
    documents: Iterable[Document],
    *,
    cross_checks: bool = True,
    warnings: list[Problem] | None = None,
    strict: bool = False,
    root: Path | None = None,
) -> list[Spec]:
    """Validate documents into specs, or raise one SpecError listing every problem;
    warnings go to ``warnings`` (errors under ``strict``). ``root``: the repository root
    the files specs name stay in (by default each document's file's own)."""
    problems: list[Problem] = []
    specs: list[Spec] = []
    declared: set[str] = set()
    for document in documents:
        declared.update(_declared_stream(document))
        spec = spec_from_document(document, problems, root=root)
        if spec is not None:
            specs.append(spec)
    if cross_checks:
        problems.extend(cross_resource_problems(specs, declared_streams=declared))
    return _checked(specs, _ambiguous_once_per_file(problems), warnings, strict)


def _ambiguous_once_per_file(problems: list[Problem]) -> list[Problem]:
    """``problems`` with one ambiguous-unit warning per file (the first by line, counting
    the others): a file copied from the nats CLI's habits would say it on every line."""
    found: dict[str, list[Problem]] = {}
    slot: dict[str, int] = {}
    kept: list[Problem] = []
    for problem in problems:
        file = problem.location.file if problem.location else ""
        if not (problem.warning and problem.message.startswith(AMBIGUOUS)):
            kept.append(problem)
            continue
        if file not in found:
            slot[file] = len(kept)
            kept.append(problem)
        found.setdefault(file, []).append(problem)
    for file, said in found.items():
        first = min(said, key=lambda p: p.location.line if p.location else 0)
        message = first.message
        if len(said) > 1:
            message += f" (and {len(said) - 1} more in this file)"
        kept[slot[file]] = Problem(first.location, first.path, message, warning=True)
    return kept


def spec_from_document(
    document: Document, problems: list[Problem], *, root: Path | None = None
) -> Spec | None:
    """One document as a Spec; appends its problems and returns None when invalid.
    ``root``: see :func:`validate_documents`."""
    problem = kind_problem(document)
    if problem is not None:
        problems.append(problem)
        return None
    body = plain_copy(document.body)  # what is validated, then converted: the config
    overlay = document.overlay
    found = schema_problems(document, body=body)
    written: dict[str, str] = {}
    if not found:
        found = _convert_units(document, body, written)
        if found:
            problems.extend(p for p in found if p.warning)
            found = [p for p in found if not p.warning]
    if found:
        if body.get("kind") == "KeyValueEntry" and body.get("secret") is not False:
            found = [_unquoted(p) for p in found]
        problems.extend(_in_merge(p, document.source, overlay) for p in found)
        return None
    return _build_spec(document, body, problems, written, root)


def _unquoted(problem: Problem) -> Problem:
    """A KeyValueEntry's value problem that could be a secret: said without the value."""
    if problem.path.split(".")[0] != "value":
        return problem
    message = "invalid (a string is needed; the value is not shown: it may be secret)"
    return Problem(problem.location, problem.path, message, warning=problem.warning)


def _in_merge(problem: Problem, base: Location, overlay: Location | None) -> Problem:
    """A problem of a merged document names both documents (the base and the overlay)."""
    if overlay is None:
        return problem
    said = f"{problem.message} (in {base} merged with the overlay at {overlay})"
    return Problem(problem.location, problem.path, said, warning=problem.warning)


def plain_copy(value: Any) -> Any:
    """A deep copy of JSON-like data in which integral floats (``1e3``, Pulumi numbers)
    become ints."""
    if isinstance(value, dict):
        if _KEPT.issuperset(map(type, value.values())):
            return dict(value)  # nothing in it to copy or change (most consumers)
        return {k: plain_copy(v) if isinstance(v, _COPIED) else v for k, v in value.items()}
    if isinstance(value, list):
        return [plain_copy(v) if isinstance(v, _COPIED) else v for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


#: What :func:`plain_copy` copies or changes (strings, ints, bools and None are kept).
_COPIED = (dict, list, float)
#: The types of values :func:`plain_copy` keeps as they are (none of them a _COPIED).
_KEPT = frozenset({str, int, bool, type(None)})


def _convert_units(
    document: Document, body: dict[str, Any], written: dict[str, str]
) -> list[Problem]:
    kind = str(body["kind"])
    if body.keys().isdisjoint(_UNIT_HEADS.get(kind, ())):
        return []
    problems: list[Problem] = []
    for path, unit, container, key in list(unit_paths(kind, body)):
        value = container[key]  # type: ignore[index]
        try:
            wire, why = _parsed(value, unit) if type(value) is str else (_parse(value, unit), None)
        except UnitError as err:
            problems.append(Problem(document.where(path), path, str(err)))
            continue
        if wire > field_limit(path):
            message = f"{value!r} is too large: at most {field_limit(path)} {_wire_unit(unit)}"
            problems.append(Problem(document.where(path), path, message))
            continue
        if isinstance(value, str):
            written[path] = value.strip()
            if why is not None:
                problems.append(Problem(document.where(path), path, AMBIGUOUS + why, warning=True))
        container[key] = wire  # type: ignore[index]
    return problems


def _parse(value: Any, unit: Unit) -> int:
    return parse_duration(value) if unit == "duration" else parse_size(value)


@functools.lru_cache(maxsize=4096)
def _parsed(text: str, unit: Unit) -> tuple[int, str | None]:
    """A unit text's wire value and ambiguity, worked out once per text: a repository
    writes the same few (``7d``, ``30s``, ``1GiB``) thousands of times. Only texts are
    kept (``True`` would share ``1``'s entry); a text that is no unit raises each time."""
    return _parse(text, unit), ambiguity(text.strip(), unit)


def _wire_unit(unit: str) -> str:
    return "nanoseconds" if unit == "duration" else "bytes"


def _entry_spec(
    document: Document, body: dict[str, Any], problems: list[Problem], root: Path | None
) -> Spec | None:
    """A KeyValueEntry: its value read (from ``value`` or ``value_file``, relative to the
    spec file and inside the repository root) into bytes, kept base64-encoded; a secret
    value is never quoted."""
    secret = bool(body.get("secret", False))
    value_file = None
    if "value_file" in body:
        named, folder = str(body["value_file"]), Path(document.source.file).parent
        root = root or repository_root([document.source.file])
        why = outside_problem(root, named, folder)
        if why is not None:
            problems.append(Problem(document.where("value_file"), "value_file", why))
            return None
        path = resolved(folder, named)
        try:
            # data, any size; a pipe or device is refused, and a path swapped since judged
            data = read_bytes(path, capped=False, within=root)
        except Abort as abort:
            why = abort.problem.message.removeprefix("cannot read: ")  # said once
            message = f"cannot read {body['value_file']!r}: {why}"
            problems.append(Problem(document.where("value_file"), "value_file", message))
            return None
        value_file = str(path)
    elif body.get("encoding") == "base64":
        try:
            data = base64.b64decode(str(body["value"]), validate=True)
        except ValueError:
            problems.append(Problem(document.where("value"), "value", "not valid base64"))
            return None
    else:
        data = str(body["value"]).encode()
    return Spec(
        kind="KeyValueEntry",
        name=str(body["key"]),
        config=entry_config(data, secret),
        source=document.source,
        stream=str(body["bucket"]),
        locations=dict(document.locations),
        value_file=value_file,
    )


def _build_spec(
    document: Document,
    body: dict[str, Any],
    problems: list[Problem],
    written: dict[str, str],
    root: Path | None,
) -> Spec | None:
    kind = cast(Kind, body["kind"])
    if kind == "KeyValueEntry":
        return _entry_spec(document, body, problems, root)
    stream = body.get("stream") if kind == "Consumer" else None
    external = bool(body.get("external", False)) if kind == "Stream" else False
    name = str(body.get("name", ""))
    if kind == "Consumer":
        durable = str(body.get("durable_name", ""))
        if name and durable and name != durable:
            message = f"name {name!r} and durable_name {durable!r} differ; give only `name`"
            problems.append(Problem(document.where("durable_name"), "durable_name", message))
            return None
        name = name or durable
        body["name"] = body["durable_name"] = name
    lifecycle = MANAGE  # what lifecycle_of makes of an absent or empty one, without a call
    if body.get("lifecycle"):
        lifecycle = lifecycle_of(body["lifecycle"], kind, document.where, problems)
    standby = standby_of(body, document.where, problems) if kind == "Stream" else None
    config = body  # this document's own copy (plain_copy): the config, less spec-only fields
    for field in SPEC_ONLY_FIELDS:
        config.pop(field, None)
    return Spec(
        kind=kind,
        name=name,
        config=config,
        source=document.source,
        stream=str(stream) if stream is not None else None,
        external=external,
        locations=document.locations,  # the document's own (a copy per spec: 18 MiB at 100k)
        written=written,
        lifecycle=lifecycle,
        standby=standby,
    )


def _declared_stream(document: Document) -> list[str]:
    """The stream name a document declares, even if the document is invalid."""
    body = document.body
    name = body.get("name")
    if not isinstance(name, str):
        return []
    kind = str(body.get("kind"))
    return [stream_of(kind, name)] if kind in ("Stream", "KeyValue", "ObjectStore") else []
