"""Loading spec files into documents that remember where every value came from.

``load_documents(paths)`` reads YAML (many ``---`` separated documents per file,
:mod:`.yaml_lines`) and JSON (one object or a list, :mod:`.json_lines`) from files and
folders (:mod:`.files`: recursive, sorted, hidden folders skipped). Every value keeps its
``FILE:LINE`` (:class:`~reconciler.specs.document.Document`). JSON files written by the
``nats`` CLI (a stream or consumer config or info) and the files of a ``nats backup``
folder are read too; their ``kind`` is inferred from their content (:mod:`.natscli_json`).

Whatever the input (binary garbage, symlink loops, YAML bombs, deep nesting), the loader
raises nothing but :class:`~reconciler.errors.SpecError`, carrying every problem found.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from reconciler.errors import Problem, SpecError
from reconciler.identity import KINDS
from reconciler.locations import Location
from reconciler.specs.document import (
    MAX_DEPTH,
    Abort,
    Document,
    Loaded,
    ReadFile,
    file_problem,
    read_one,
)
from reconciler.specs.files import data_files, read_text, spec_files
from reconciler.specs.json_lines import json_documents, json_nodes, parse_json
from reconciler.specs.natscli_json import wire_kind
from reconciler.specs.yaml_lines import NodeBuilder, yaml_trees

#: Every file's documents and problems, in order, as :func:`load_file` gives them, some
#: read by something else (a child parsing ahead: :meth:`.ahead.ParsedAhead.load`),
#: the others by the :func:`load_file` it is given.
Loading = Callable[[Sequence[Path], ReadFile], list[Loaded]]


def load_documents(paths: Sequence[str | Path]) -> list[Document]:
    """Every non-empty document of the given files and folders, in a stable order."""
    problems: list[Problem] = []
    documents = load_spec_files(spec_files(paths, problems), problems)
    errors = [p for p in problems if not p.warning]  # warnings: see validate.load_specs
    if errors:
        raise SpecError(errors)
    return documents


def load_spec_files(
    files: Sequence[Path],
    problems: list[Problem],
    loading: Loading | None = None,
    *,
    within: Path | None = None,
) -> list[Document]:
    """The documents of ``files``, but for the files the others name as data
    (:func:`~reconciler.specs.files.data_files`: a ``value_file`` found in the spec
    folder) that hold no spec (:func:`_holds_specs`): those are left out with whatever
    problems they would have as specs. ``loading``: how the files are read (by default
    each by :func:`load_file`, here)."""
    here = functools.partial(load_file, within=within) if within is not None else load_file
    read = (loading or _each_here)(files, here)
    loaded = [(path, docs, found) for path, (docs, found) in zip(files, read, strict=True)]
    data = data_files(doc for _, docs, _ in loaded for doc in docs)
    documents: list[Document] = []
    for path, docs, found in loaded:
        if data and os.path.realpath(path) in data and not _holds_specs(docs):
            continue
        documents.extend(docs)
        problems.extend(found)
    return documents


def _each_here(files: Sequence[Path], read: ReadFile) -> list[Loaded]:
    return [read_one(path, read) for path in files]


def _holds_specs(documents: Sequence[Document]) -> bool:
    """Whether a file holds a spec (a document of a kind this tool reads): such a file
    stays a spec when a ``value_file`` names it too (else a KeyValueEntry naming
    ``orders.yaml``, or its own file, would take those specs out of the plan)."""
    return any(document.body.get("kind") in KINDS for document in documents)


def load_file(path: Path, problems: list[Problem], *, within: Path | None = None) -> list[Document]:
    """The documents of one file; problems are appended, never raised. ``within``: the
    repository root the file was found in, which it must still be in once opened
    (:func:`~reconciler.specs.files.read_bytes`)."""
    name = str(path)
    try:
        text = read_text(path, within=within)
        if path.suffix == ".json":
            return [wire_kind(d, name, problems) for d in json_documents(text, name, problems)]
        return yaml_trees(text, name, problems)
    except Abort as abort:
        problems.append(abort.problem)
    except RecursionError:
        problems.append(file_problem(path, f"nesting deeper than {MAX_DEPTH} levels"))
    return []


def read_yaml_trees(path: Path) -> list[Document]:
    """Every document of a YAML file (another tool's manifests, say) with each value's
    line, no kind given; raises SpecError with the file and line when it cannot be read."""
    problems: list[Problem] = []
    documents: list[Document] = []
    try:
        documents = yaml_trees(read_text(path), str(path), problems)
    except Abort as abort:
        problems.append(abort.problem)
    if errors := [p for p in problems if not p.warning]:
        raise SpecError(errors)
    return documents


def read_json_tree(path: Path) -> Document:
    """A whole JSON file (another tool's state, say) as one Document with every value's
    line; raises SpecError with the file and line when it is not JSON."""
    name = str(path)
    try:
        text = read_text(path)
        value = parse_json(text, name)
    except Abort as abort:
        raise SpecError([abort.problem]) from None
    except RecursionError:
        raise SpecError([file_problem(path, f"nesting deeper than {MAX_DEPTH} levels")]) from None
    if not isinstance(value, dict):
        raise SpecError([Problem(Location(name, 1), "", "expected a JSON object")])
    nodes = json_nodes(text, None)
    locations: Mapping[str, Location] = {}
    if nodes:
        builder = NodeBuilder(name)
        try:
            builder.build(nodes[0], "", 0)
        except Abort as abort:
            raise SpecError([abort.problem]) from None
        locations = builder.locations
    return Document(body=value, source=Location(name, 1), locations=locations)
