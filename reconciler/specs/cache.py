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
Nor can it change what is planned: whoever can write the folder (a pull request's job
saving a shared CI cache) could write an entry of their own, so every entry carries an
HMAC-SHA256 under a key they cannot know (:func:`cache_secret`: ``RECONCILE_CACHE_KEY``,
else a per-user key file outside the folder). An entry without a valid MAC, a torn or
edited one included, is a miss: the files are validated again and the entry rewritten.
Without a key nothing is read or written. Nor can an entry leak a secret, or hold a
value that changed: a KeyValueEntry's value read from a ``value_file`` is not in the
spec files (nor in the key), so it is never written; a cached load reads the file again
(and misses if it cannot). A run declaring a secret value inline is not cached at all.
Writing an entry never fails a run. The same folder keeps the plan memo
(``reconciler.planning.memo``), its digests keyed by the same secret.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import os
import secrets
import stat
import sys
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from reconciler.errors import Problem
from reconciler.locations import LazyLocations, Lines, Location
from reconciler.specs.document import Abort
from reconciler.specs.files import read_bytes
from reconciler.specs.lifecycle import MANAGE, Lifecycle
from reconciler.specs.spec import KINDS, Spec, entry_config
from reconciler.specs.standby import Standby

CACHE_ENV = "RECONCILE_SPEC_CACHE"
#: The cache's key, for CI (from a secret); else the key file :func:`key_file` names.
KEY_ENV = "RECONCILE_CACHE_KEY"
#: The fewest characters a key has (the key file's: 64 random hex digits).
KEY_LENGTH = 32
#: 4: values read from files (and runs with inline secret values) are no longer kept.
#: 5: entries are authenticated (an HMAC, not a plain SHA-256 anyone can recompute).
#: 6: JSON lines of specs as arrays, their field lines kept as ``Lines`` keeps them.
FORMAT = 6
#: The specs of one line of an entry (each line is decoded once the one before is used).
LINE_SPECS = 1000
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


def cache_key(
    spec_files: Sequence[Path], overlay_files: Sequence[Path], strict: bool, root: Path
) -> str:
    """The key of one run's inputs, the repository root the files they name stay in
    included (raises OSError when a file cannot be read: :func:`~.files.read_bytes`'s
    guards, so a pipe named ``*.yaml`` is refused, never waited on)."""
    digest = hashlib.sha256(code_digest().encode())
    digest.update(b"strict" if strict else b"lenient")
    digest.update(b"root\0" + str(root).encode() + b"\0")
    for tag, files in ((b"spec", spec_files), (b"overlay", overlay_files)):
        for path in files:
            digest.update(tag + b"\0" + str(path).encode() + b"\0")
            try:
                data = read_bytes(path, within=root)
            except Abort as abort:
                raise OSError(str(abort.problem)) from None
            digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()


def key_file() -> Path:
    """The per-user key file: ``$XDG_CONFIG_HOME/jetstream-gitops/cache.key`` (by default
    ``~/.config/jetstream-gitops/cache.key``)."""
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "jetstream-gitops" / "cache.key"


def cache_secret(folder: Path) -> bytes | None:
    """The key that authenticates what ``folder`` holds, or None (then nothing is read
    from it or written to it).

    ``RECONCILE_CACHE_KEY`` when set (CI: from a secret, which a pull request from a fork
    does not get); else the per-user :func:`key_file`, made on first use (32 random
    bytes, mode 0600). A key file inside the cache folder is never used (a restored
    cache would bring its own key), nor one that others may read or write, or that
    another user owns. A key shorter than :data:`KEY_LENGTH` (blanks around it do not
    count) is no key: whoever restores the folder holds entries and their MACs, and
    could try short keys offline until one fits, then forge entries under it."""
    given = os.environ.get(KEY_ENV, "").strip()
    if given:
        return given.encode() if len(given) >= KEY_LENGTH else None
    path = key_file()
    try:
        if _inside(path, folder):
            return None
        return _read_key(path) or _new_key(path)
    except (OSError, RuntimeError):
        return None


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def _read_key(path: Path) -> bytes | None:
    """The key in ``path``, if it exists and only its owner, this user, can use it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        private = info.st_mode & (stat.S_IRWXG | stat.S_IRWXO) == 0
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or not private:
            raise OSError(f"{path}: not a private key file of this user")
        key = file.read(4096).strip()
    if len(key) < KEY_LENGTH:
        raise OSError(f"{path}: too short to be a key")
    return key


def _new_key(path: Path) -> bytes:
    """A new random key in ``path`` (0600; another run's, if it made one meanwhile)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = secrets.token_hex(32).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        found = _read_key(path)
        if found is None:
            raise
        return found
    with os.fdopen(fd, "wb") as file:
        file.write(key + b"\n")
    return key


def seal(secret: bytes, key: str, body: bytes) -> str:
    """The MAC of an entry: its format, its key and its body, under ``secret``."""
    mac = hmac.new(secret, f"{FORMAT}\0{key}\0".encode(), hashlib.sha256)
    mac.update(body)
    return mac.hexdigest()


def load(folder: Path, key: str) -> tuple[list[Spec], list[Problem]] | None:
    """The specs and warnings stored under ``key``, or None (absent, unreadable, corrupt,
    not authenticated under this user's :func:`cache_secret`, or no key at all)."""
    path = folder / f"specs-{key}.json"
    secret = cache_secret(folder)
    if secret is None:
        return None
    try:
        head, _, body = path.read_bytes().partition(b"\n")
        header = orjson.loads(head)
        if header.get("format") != FORMAT or header.get("key") != key:
            return None
        if not hmac.compare_digest(str(header.get("mac")), seal(secret, key, body)):
            return None  # torn, edited or forged: not written by this code with this key
        specs, warnings = _read_body(body)
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    used(path)
    return specs, warnings


def _read_body(body: bytes) -> tuple[list[Spec], list[Problem]]:
    """An entry's specs and warnings (:func:`store`), each line decoded once the specs
    of the one before are made, so that no more than a line's values are held twice."""
    view = memoryview(body)
    end = _line_end(body, 0)
    tables = orjson.loads(view[:end])
    files = [str(name) for name in tables["files"]]
    shapes = [tuple(str(path) for path in shape) for shape in tables["shapes"]]
    warnings = [_problem(item, files) for item in tables["warnings"]]
    specs: list[Spec] = []
    while end < len(body):
        start, end = end + 1, _line_end(body, end + 1)
        items = orjson.loads(view[start:end])
        items.reverse()  # each let go of as its spec is made
        while items:
            specs.append(_spec(items.pop(), files, shapes))
    if len(specs) != tables["specs"]:
        raise ValueError("an entry cut short")
    return specs, warnings


def _line_end(body: bytes, start: int) -> int:
    end = body.find(b"\n", start)
    return len(body) if end < 0 else end


def store(folder: Path, key: str, specs: Sequence[Spec], warnings: Sequence[Problem]) -> None:
    """Keep ``specs`` under ``key`` (atomically); a failure to write is ignored.

    JSON lines: a header (format, key, the :func:`seal` of the body: the lines after
    it), then the body: the tables (file names, the field paths of each document
    shape, the warnings, how many specs) and the specs, ``LINE_SPECS`` a line, each a
    JSON array. A spec's field lines are kept as :class:`~reconciler.locations.Lines`
    are (its first line, the index of its fields' paths, each field's distance from
    it); those of a spec merged from several files (an overlay's) as (index into the
    file names, line) by field. The MAC lets :func:`load` trust the body's shape.
    Nothing is kept without a key, nor a run declaring a secret value inline (the value
    would be)."""
    with contextlib.suppress(OSError):
        _drop_older_formats(folder)
    secret = cache_secret(folder)
    if secret is None or any(_inline_secret(spec) for spec in specs):
        return
    files, shapes = _Files(), _Shapes()
    items = [_spec_json(spec, files, shapes) for spec in specs]
    tables = {
        "files": files.names,
        "shapes": shapes.paths,
        "warnings": [_problem_json(problem, files) for problem in warnings],
        "specs": len(items),
    }
    lines = [orjson.dumps(tables)]
    lines += (orjson.dumps(items[at : at + LINE_SPECS]) for at in range(0, len(items), LINE_SPECS))
    body = b"\n".join(lines)
    header = {"format": FORMAT, "key": key, "mac": seal(secret, key, body)}
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
    of KeyValueEntries, secret ones included, before 5 they were not authenticated, and
    no run of this release reads them.
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
    for rank, (info, path) in enumerate(found):
        total += info.st_size
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


def _read_again(value_file: str) -> bytes:
    """The bytes of a cached entry's ``value_file``, kept as its symlinks resolved when
    it was validated inside the repository. A symlink made since (the file, or a folder
    on its way, now pointing out of the repository: a pull request can commit one while
    the spec files, and so the cache key, stay the same) makes it resolve elsewhere:
    that is an OSError, a miss, and the normal path judges the path again."""
    if os.path.realpath(value_file) != value_file:
        raise OSError(f"{value_file}: resolves elsewhere than when it was validated")
    path = Path(value_file)
    try:  # and the file opened is still in its folder (swapped after the check above?)
        return read_bytes(path, capped=False, within=path.parent)  # data: as validate reads it
    except Abort as abort:
        raise OSError(str(abort.problem)) from None


def _location(raw: Any, files: list[str]) -> Location | None:
    return None if raw is None else Location(str(files[raw[0]]), int(raw[1]))


def _spec_json(spec: Spec, files: _Files, shapes: _Shapes) -> list[Any]:
    config = spec.config
    if spec.value_file is not None:  # read again on load: never kept
        config = {key: value for key, value in config.items() if key != "value"}
    source = files.where(spec.source)
    assert source is not None  # every spec has one
    return [
        spec.kind,
        spec.name,
        config,
        spec.value_file,
        source[0],
        source[1],
        spec.stream,
        spec.external,
        _locations_json(spec, files, shapes),
        dict(spec.written),
        None if spec.lifecycle.is_default else spec.lifecycle.to_json(),
        None if spec.standby is None else spec.standby.to_json(),
    ]


def _locations_json(spec: Spec, files: _Files, shapes: _Shapes) -> list[Any] | dict[str, Any]:
    """A spec's field locations: as :class:`Lines` keeps them, when it does (the usual
    spec: its fields in its document's file), as [first line, shape, distances]; else
    by field."""
    locations = spec.locations
    if isinstance(locations, Lines) and locations.file == spec.source.file:
        start, paths, lines = locations.packed()
        if isinstance(paths, tuple) and lines is not None:
            return [start, shapes.index(paths), lines]
    return {path: files.where(where) for path, where in locations.items()}


class _Shapes:
    """The field paths of the documents of an entry, each set written once."""

    def __init__(self) -> None:
        self.paths: list[tuple[str, ...]] = []
        self._index: dict[tuple[str, ...], int] = {}

    def index(self, paths: tuple[str, ...]) -> int:
        index = self._index.get(paths)
        if index is None:
            index = self._index[paths] = len(self.paths)
            self.paths.append(paths)
        return index


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


def _spec(raw: list[Any], files: list[str], shapes: list[tuple[str, ...]]) -> Spec:
    (kind, name, config, value_file, file, line, stream, external) = raw[:8]
    locations, written, lifecycle, standby = raw[8:]
    if kind not in KINDS:
        raise ValueError("not a cached spec")
    if value_file is not None:  # OSError: a miss; the normal path says why
        config = entry_config(_read_again(value_file), bool(config["secret"]))
    source = Location(files[file], int(line))
    return Spec.restored(
        {
            "kind": kind,
            "name": str(name),
            "config": config,
            "value_file": value_file,
            "source": source,
            "stream": stream,
            "external": bool(external),
            "locations": _locations(locations, source.file, files, shapes),
            "written": written,
            "lifecycle": MANAGE if lifecycle is None else Lifecycle.from_json(lifecycle),
            "standby": None if standby is None else Standby.from_json(standby),
        }
    )


def _locations(
    raw: Any, file: str, files: list[str], shapes: list[tuple[str, ...]]
) -> LazyLocations:
    if isinstance(raw, dict):
        return _Lines(raw, files)
    start, shape, lines = raw
    paths = shapes[shape]
    if len(lines) != len(paths):
        raise ValueError("lines for other fields")
    return Lines.unpacked(file, (int(start), paths, tuple(lines)))


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
