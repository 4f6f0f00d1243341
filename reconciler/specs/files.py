"""The files to read: explicit files as given, folders walked (sorted, hidden folders
skipped, symlink loops refused), and one file's text (size cap, UTF-8, regular files
only). Problems are collected, never raised. And one way to write a text file whole
(:func:`write_renamed`: the saved plans, reports and snapshots the doors write).

A file a spec names as its data (a KeyValueEntry's ``value_file``: ``flags.json`` next
to the specs) is not a spec, whatever its suffix: :func:`data_files` says which files
the documents read name so, and the loader leaves them out (``loader.load_spec_files``)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

from reconciler.errors import Problem
from reconciler.locations import Location
from reconciler.specs.document import Abort, Document, file_problem
from reconciler.specs.paths import opened_problem

SPEC_SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILE_BYTES = 16 * 1024 * 1024  # a spec file larger than this is refused unread
#: The most :func:`feed_bytes` reads at once.
FEED_CHUNK = 1 << 20
NOT_REGULAR = "not a regular file (a device, pipe or socket?)"
#: What a folder read as a file is (a ``value_file`` naming one): the OS's own word.
A_FOLDER = "cannot read: Is a directory"


def spec_files(paths: Sequence[str | Path], problems: list[Problem]) -> list[Path]:
    """The files to read: explicit files as given, folders walked (sorted, loop-safe)."""
    return [path for path, _ in real_spec_files(paths, problems)]


def real_spec_files(paths: Sequence[str | Path], problems: list[Problem]) -> list[tuple[Path, str]]:
    """:func:`spec_files`, each with its real path (``os.path.realpath``: what is read)."""
    files: list[tuple[Path, str]] = []
    seen: set[str] = set()
    for raw in paths:
        path = Path(raw)
        try:
            is_dir = path.is_dir()
            exists = path.exists()
        except OSError as err:  # ELOOP on a self-referencing link, too long names, ...
            problems.append(file_problem(path, os_message(err)))
            continue
        if is_dir:
            candidates = list(_walk(path, problems))
        elif exists:
            candidates = [(path, os.path.realpath(path))]
        else:
            message = "symlink loop or broken link" if path.is_symlink() else "no such file"
            problems.append(file_problem(path, message))
            continue
        for candidate, real in candidates:
            if real not in seen:
                seen.add(real)
                files.append((candidate, real))
    return files


def _walk(root: Path, problems: list[Problem]) -> Iterator[tuple[Path, str]]:
    """The spec files under ``root``, each with its real path: its folder's real path
    and its name, but for a symlink, resolved (a realpath per file was a twentieth of
    a re-plan of 1,000 files)."""

    def unreadable(err: OSError) -> None:
        problems.append(file_problem(Path(err.filename or root), os_message(err)))

    # realpaths of the folders on the way down to each folder: a link back to one is a loop
    real_root = os.path.realpath(root)
    trail: dict[str, frozenset[str]] = {str(root): frozenset({real_root})}
    reals = {str(root): real_root}
    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable, followlinks=True):
        above = trail.pop(dirpath, frozenset())
        real_dir = reals.pop(dirpath, None) or os.path.realpath(dirpath)
        kept = []
        for name in sorted(dirnames):
            if name.startswith("."):
                continue
            target = os.path.realpath(os.path.join(dirpath, name))
            if target in above:
                link = Path(dirpath, name)
                problems.append(file_problem(link, f"symlink loop: points back to {target}"))
                continue
            kept.append(name)
            trail[os.path.join(dirpath, name)] = above | {target}
            reals[os.path.join(dirpath, name)] = target
        dirnames[:] = kept
        for name in sorted(filenames):
            if name.endswith(SPEC_SUFFIXES) and not name.startswith("."):
                path = os.path.join(dirpath, name)
                real = (
                    os.path.realpath(path) if os.path.islink(path) else os.path.join(real_dir, name)
                )
                yield Path(path), real


def inside(root: Path, files: list[tuple[Path, str]], problems: list[Problem]) -> list[Path]:
    """``files`` (each with its real path) but those whose real path is out of ``root``
    (a symlink in a folder), each such one a problem."""
    kept = []
    top = str(root)
    under = top if top.endswith(os.sep) else top + os.sep  # a string test: a Path a file cost
    for path, real in files:
        if real == top or real.startswith(under):
            kept.append(path)
        else:
            message = f"a symlink pointing out of the repository ({root}): not read"
            problems.append(Problem(Location(str(path), 1), "", message))
    return kept


#: The fields of a document that name a file holding data (by kind).
DATA_FIELDS = {"KeyValueEntry": "value_file"}


def data_files(documents: Iterable[Document]) -> frozenset[str]:
    """The real paths of the files ``documents`` name as data (``value_file``, relative
    to the naming file's folder). Whether such a file may be read at all is
    ``specs.paths``' rule, checked where it is read (``validate``)."""
    named: set[str] = set()
    for document in documents:
        field = DATA_FIELDS.get(str(document.body.get("kind")))
        value = document.body.get(field) if field else None
        if isinstance(value, str) and value and "\0" not in value:
            folder = Path(document.source.file).parent
            named.add(os.path.realpath(folder / value))
    return frozenset(named)


def os_message(err: OSError) -> str:
    if getattr(err, "errno", None) == errno.ELOOP:
        return "symlink loop: the link points (indirectly) at itself"
    return f"cannot read: {err.strerror or err}"


def read_text(path: Path, *, within: Path | None = None) -> str:
    """A file's text: :func:`read_bytes`, UTF-8 (a byte-order mark dropped)."""
    data = read_bytes(path, within=within)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        message = f"not a text file (invalid UTF-8 at byte {err.start}); expected YAML or JSON"
        raise Abort(Problem(Location(str(path), line), "", message)) from None


def read_bytes(path: Path, *, capped: bool = True, within: Path | None = None) -> bytes:
    """A file's bytes: a regular file, at most ``MAX_FILE_BYTES`` when ``capped`` (else any
    size: a KeyValueEntry's ``value_file`` is data, as large as the server's
    ``max_payload`` takes, and the plan judges it against that). What is not a regular
    file is refused before it is opened (opening a device can do something, reading a
    pipe can wait for ever), and the file opened is judged again (it may have been
    swapped since): opened without blocking on a pipe, never taking a terminal.
    ``within``: the repository root the file was found in, which the file opened must
    still be in (:func:`_opened`)."""
    try:
        fd, size = _opened(path, within)
        try:
            data = _read_all(fd, size, capped) if size <= MAX_FILE_BYTES or not capped else None
            if data is None:
                limit = MAX_FILE_BYTES // (1024 * 1024)
                size = max(size, MAX_FILE_BYTES + 1)
                message = f"file too large: {size / 2**20:.1f} MiB (limit {limit} MiB); split it"
                raise Abort(file_problem(path, message))
        finally:
            os.close(fd)
    except OSError as err:
        raise Abort(file_problem(path, os_message(err))) from None
    return data


def feed_bytes(path: Path, into: Callable[[bytes], object], *, within: Path | None = None) -> None:
    """A file's bytes, any size, handed to ``into`` a chunk at a time (``FEED_CHUNK``
    bytes at most), so that digesting a huge file holds one chunk, not the file:
    :func:`read_bytes`'s guards (a regular file, judged again once opened)."""
    try:
        fd, _ = _opened(path, within)
        try:
            while chunk := os.read(fd, FEED_CHUNK):
                into(chunk)
        finally:
            os.close(fd)
    except OSError as err:
        raise Abort(file_problem(path, os_message(err))) from None


def _opened(path: Path, within: Path | None = None) -> tuple[int, int]:
    """``path`` opened for reading when it is a regular file, and its size then (raises
    Abort for what is not one, before opening it and again once it is opened). With
    ``within``, the file opened must be inside that folder, judged by where the kernel
    says the open file is (:func:`opened_at`): a folder on the way, or the file, swapped
    for a symlink since the walk judged the path would otherwise be followed out."""
    flags = os.O_RDONLY
    for name in ("O_NONBLOCK", "O_NOCTTY", "O_BINARY"):
        flags |= getattr(os, name, 0)
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise Abort(file_problem(path, A_FOLDER if stat.S_ISDIR(mode) else NOT_REGULAR))
    fd = os.open(path, flags)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise Abort(file_problem(path, NOT_REGULAR))
        if within is not None:
            real = opened_at(fd, path)
            why = opened_problem(within, real) if real is not None else None
            if why is not None:
                raise Abort(file_problem(path, why))
    except BaseException:
        os.close(fd)
        raise
    return fd, status.st_size


def opened_at(fd: int, path: Path) -> str | None:
    """The real path of the file open as ``fd``: the kernel's own (Linux ``/proc``, the
    BSDs' and macOS's ``F_GETPATH``), else ``path``'s real path now, when it is still
    the file open (same device and inode); None when neither can say (judged as found)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    try:
        import fcntl

        getpath = getattr(fcntl, "F_GETPATH", None)
        if getpath is not None:
            named = fcntl.fcntl(fd, getpath, bytes(1024))
            return os.fsdecode(named.split(b"\0", 1)[0])
    except (ImportError, OSError):
        pass
    try:
        real = os.path.realpath(path)
        now, opened = os.stat(real), os.fstat(fd)
    except OSError:
        return None
    return real if (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino) else None


def _read_all(fd: int, size: int, capped: bool = True) -> bytes | None:
    """The bytes of an opened regular file ``size`` bytes long when it was judged; None
    when it has grown past ``MAX_FILE_BYTES`` since (``capped``: never read whole)."""
    chunks: list[bytes] = []
    total = 0
    while total <= MAX_FILE_BYTES or not capped:
        chunk = os.read(fd, max(size + 1 - total, 1 << 16))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
    return None


def write_renamed(path: Path, write: Callable[[TextIO], object], *, mode: int = 0o644) -> None:
    """Write the text file ``path`` whole or not at all: ``write`` fills a temporary file
    beside it (UTF-8, then given ``mode``), which is renamed over ``path``: a symlink at
    ``path`` is replaced, never followed, and the temporary file is removed when anything
    fails. Raises OSError (the folder must exist)."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            write(file)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        tmp = None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
