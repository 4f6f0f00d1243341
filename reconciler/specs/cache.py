"""An optional cache of validated specs, for re-plans of large, unchanged repositories.

Loading and validating 21,000 documents takes over a second; a CI job that re-plans the
same files every few minutes repeats exactly that work. With ``RECONCILE_SPEC_CACHE=DIR``
the validated specs (and their warnings) of a run are kept in ``DIR`` as JSON, keyed by
everything that decides the result: every file's path and bytes (specs and overlays, in
order), ``--strict``, the published schemas, and the code that validates (the
``reconciler.specs`` package and the modules it builds on). Any change to one of them is
a different key, so a stale entry is never used (one exception: the consumers archive of
a ``nats account backup`` folder, which only yields a warning, is not part of the key);
the folder is safe to delete at any time and to keep between CI runs (actions/cache).

JSON, not pickle: a cache restored from a shared CI cache must not be able to run code.
Nor can it leak a secret, or hold a value that changed: a KeyValueEntry's value read from
a ``value_file`` is not in the spec files (nor in the key), so it is never written; a
cached load reads the file again (and misses if it cannot). A run declaring a secret
value inline is not cached at all.
A corrupt, torn or edited entry (its checksum tells) is ignored and rewritten; writing
one never fails a run. The same folder keeps the plan memo (``reconciler.planning.memo``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from reconciler.errors import LazyLocations, Location, Problem
from reconciler.specs.spec import KINDS, Spec, entry_config

CACHE_ENV = "RECONCILE_SPEC_CACHE"
#: 4: values read from files (and runs with inline secret values) are no longer kept.
FORMAT = 4
#: The folder's size: beyond it the least recently used entries go (the newest always
#: stays). A count would not do: a fleet of 100 environments is 100 entries in use.
BUDGET_BYTES = 512 * 2**20
_PACKAGE = Path(__file__).resolve().parent.parent


@functools.cache
def code_digest(packages: tuple[str, ...] = ("specs",)) -> str:
    """The code in ``packages`` of ``reconciler`` (plus the modules every package builds
    on), the published schemas and the libraries that read and validate, as one digest
    (read once per process): what decides a cached answer, so that no other release's
    answer is ever used."""
    from reconciler.specs.schema import SCHEMA_DIR

    digest = hashlib.sha256(f"format {FORMAT}".encode())
    digest.update(_libraries().encode())
    files = [path for package in packages for path in sorted((_PACKAGE / package).glob("*.py"))]
    files += [_PACKAGE / "errors.py", _PACKAGE / "identity.py", *sorted(SCHEMA_DIR.glob("*.json"))]
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


#: The libraries whose behaviour decides what a spec file loads and validates to.
LIBRARIES = ("PyYAML", "jsonschema", "jsonschema-rs", "referencing")


def _libraries() -> str:
    """Python's and the validating libraries' versions (an upgrade of PyYAML could read
    a file differently: its entries are then never used)."""
    found = [sys.implementation.name, ".".join(map(str, sys.version_info[:3]))]
    for name in LIBRARIES:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} -")
    return ", ".join(found)


def cache_folder() -> Path | None:
    """The cache folder ``RECONCILE_SPEC_CACHE`` names, if any."""
    folder = os.environ.get(CACHE_ENV)
    return Path(folder) if folder else None


def cache_key(spec_files: Sequence[Path], overlay_files: Sequence[Path], strict: bool) -> str:
    """The key of one run's inputs (raises OSError when a file cannot be read)."""
    digest = hashlib.sha256(code_digest().encode())
    digest.update(b"strict" if strict else b"lenient")
    for tag, files in ((b"spec", spec_files), (b"overlay", overlay_files)):
        for path in files:
            digest.update(tag + b"\0" + str(path).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def load(folder: Path, key: str) -> tuple[list[Spec], list[Problem]] | None:
    """The specs and warnings stored under ``key``, or None (absent, unreadable, corrupt)."""
    path = folder / f"specs-{key}.json"
    try:
        head, _, body = path.read_bytes().partition(b"\n")
        header = orjson.loads(head)
        if header.get("format") != FORMAT or header.get("key") != key:
            return None
        if header.get("sha256") != hashlib.sha256(body).hexdigest():
            return None  # torn or edited: what follows was not written by this code
        data = orjson.loads(body)
        files = data["files"]
        specs = [_spec(item, files) for item in data["specs"]]
        warnings = [_problem(item, files) for item in data["warnings"]]
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    used(path)
    return specs, warnings


def store(folder: Path, key: str, specs: Sequence[Spec], warnings: Sequence[Problem]) -> None:
    """Keep ``specs`` under ``key`` (atomically); a failure to write is ignored.

    Two JSON lines: a header (format, key, the SHA-256 of the second line) and the specs
    and warnings, every location written as (index into the body's file names, line):
    half the bytes to read back. The checksum lets :func:`load` trust the body's shape
    and build each spec's field locations only when one is asked for. A run declaring
    a secret value inline is not kept (the value would be)."""
    with contextlib.suppress(OSError):
        _drop_older_formats(folder)
    if any(_inline_secret(spec) for spec in specs):
        return
    files = _Files()
    body = orjson.dumps(
        {
            "specs": [_spec_json(spec, files) for spec in specs],
            "warnings": [_problem_json(problem, files) for problem in warnings],
            "files": files.names,
        }
    )
    header = {"format": FORMAT, "key": key, "sha256": hashlib.sha256(body).hexdigest()}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".specs-", dir=folder)
        with os.fdopen(fd, "wb") as out:
            out.write(orjson.dumps(header) + b"\n" + body)
        os.replace(tmp, folder / f"specs-{key}.json")
        prune(folder, "specs-*.json")
    except OSError:
        return


def _inline_secret(spec: Spec) -> bool:
    return spec.kind == "KeyValueEntry" and bool(spec.config.get("secret")) and not spec.value_file


def _drop_older_formats(folder: Path) -> None:
    """Remove entries an earlier release wrote: before format 4 they kept the values
    of KeyValueEntries, secret ones included, and no run of this release reads them.
    Called by every store, whether or not it then writes an entry."""
    for path in folder.glob("specs-*.json"):
        try:
            with path.open("rb") as entry:
                header = orjson.loads(entry.readline())
            older = int(header["format"]) < FORMAT
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or not ours to judge
        if older:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)


def prune(folder: Path, pattern: str, *, budget: int | None = None) -> None:
    """Keep the most recently used entries matching ``pattern`` in ``folder`` within
    ``budget`` bytes (``BUDGET_BYTES``); a hit renews its entry (:func:`used`)."""
    budget = BUDGET_BYTES if budget is None else budget
    found = []
    for path in folder.glob(pattern):
        with contextlib.suppress(OSError):  # removed meanwhile by another run
            found.append((path.stat(), path))
    found.sort(key=lambda item: item[0].st_mtime, reverse=True)
    total = 0
    for rank, (stat, path) in enumerate(found):
        total += stat.st_size
        if rank and total > budget:
            path.unlink(missing_ok=True)


def used(path: Path) -> None:
    """Mark an entry as just used, so pruning keeps it over unused ones."""
    with contextlib.suppress(OSError):
        os.utime(path)


class _Files:
    """The file names of a body's locations, each written once."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}

    def where(self, location: Location | None) -> list[int] | None:
        if location is None:
            return None
        index = self._index.get(location.file)
        if index is None:
            index = self._index[location.file] = len(self.names)
            self.names.append(location.file)
        return [index, location.line]


def _location(raw: Any, files: list[str]) -> Location | None:
    return None if raw is None else Location(str(files[raw[0]]), int(raw[1]))


def _spec_json(spec: Spec, files: _Files) -> dict[str, Any]:
    config = spec.config
    if spec.value_file is not None:  # read again on load: never kept
        config = {key: value for key, value in config.items() if key != "value"}
    return {
        "kind": spec.kind,
        "name": spec.name,
        "config": config,
        "value_file": spec.value_file,
        "source": files.where(spec.source),
        "stream": spec.stream,
        "external": spec.external,
        "locations": {path: files.where(where) for path, where in spec.locations.items()},
        "written": dict(spec.written),
    }


class _Lines(LazyLocations):
    """A cached spec's field locations: a file (by its index in the entry) and a line
    per field (an overlay's fields come from another file than their spec's)."""

    __slots__ = ("_files",)

    def __init__(self, raw: dict[str, list[int]], files: list[str]) -> None:
        self._raw = raw
        self._files = files

    def __getitem__(self, path: str) -> Location:
        file, line = self._raw[path]
        return Location(self._files[file], line)


def _spec(raw: dict[str, Any], files: list[str]) -> Spec:
    source = _location(raw["source"], files)
    if source is None or raw["kind"] not in KINDS:
        raise ValueError("not a cached spec")
    config = raw["config"]
    value_file = raw["value_file"]
    if value_file is not None:  # OSError: a miss; the normal path says why
        config = entry_config(Path(value_file).read_bytes(), bool(config["secret"]))
    return Spec.restored(
        {
            "kind": raw["kind"],
            "name": str(raw["name"]),
            "config": config,
            "value_file": value_file,
            "source": source,
            "stream": raw["stream"],
            "external": bool(raw["external"]),
            "locations": _Lines(raw["locations"], files),
            "written": raw["written"],
        }
    )


def _problem_json(problem: Problem, files: _Files) -> dict[str, Any]:
    return {
        "location": files.where(problem.location),
        "path": problem.path,
        "message": problem.message,
        "warning": problem.warning,
    }


def _problem(raw: dict[str, Any], files: list[str]) -> Problem:
    return Problem(
        _location(raw["location"], files), raw["path"], raw["message"], bool(raw["warning"])
    )
