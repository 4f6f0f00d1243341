"""Which files of a backup folder a backup may write or remove, and the lock on the folder.

A backup is pointed at a folder that may hold anything: an earlier backup, someone's
files beside it, or a repository (``--out .``). It writes, replaces and removes only the
files an earlier backup of the same folder listed as its own, in its ``manifest.json``
(:meth:`~reconciler.backup.manifest.Manifest.own_files`) or in ``backup-in-progress.json``
(:data:`~reconciler.backup.layout.JOURNAL`: written before a backup's first file, removed
after its manifest, so an interrupted backup's files are known to the next one); files
it writes itself are listed there before they are written. Everything else stays:

- a folder that is neither empty nor a backup is refused, naming what is there;
- a folder the backup made (``--out`` and those above it) is removed again, while
  empty, when the backup fails before it writes anything;
- in a backup folder, anything else inside a folder the backup writes into (a stream's,
  the spec files') is refused, naming it, before any file is changed; anything else
  elsewhere stays as it is;
- a symbolic link below the folder is never followed (the folder itself may be one);
- one backup at a time: the folder is locked (``flock``) while a backup writes into it,
  and a second one is refused, naming the folder; so is a backup into a folder a
  restore reads (:func:`reading`), and a restore of a folder a backup writes into.

Both lists are read from disk, so someone else may have written them: each entry must be
a path of the layout (``<folder>/backup.json``, ``<folder>/stream.tar.s2``,
``<specs folder>/<name>.yaml``) before it names a file, and a file is removed only
through real folders below the backup folder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from reconciler.backup.layout import (
    DATA,
    FOLDER_MODE,
    JOURNAL,
    MANIFEST,
    METADATA,
    PARTIAL,
    SPEC_FOLDERS,
    SPECS,
    BackupError,
    BackupFileUnreadable,
    folder_name,
    read_json,
    sync_folder,
    valid_folder_name,
    write_json,
)
from reconciler.backup.manifest import Manifest, load
from reconciler.planning.export import case_twin_name

JOURNAL_FORMAT = "jetstream-gitops/backup-in-progress"
#: How many of a refused folder's entries the error names.
SHOWN = 6


def own_path(rel: object) -> bool:
    """Whether ``rel`` is a path a backup writes: ``<folder>/<file>`` of a stream or a
    spec file."""
    if not isinstance(rel, str):
        return False
    parts = rel.split("/")
    if len(parts) != 2:
        return False
    folder, name = parts
    if name in (DATA, METADATA) and valid_folder_name(folder):
        return True
    plain = Path(name).name == name and not name.startswith(".") and "\\" not in name
    return folder in SPEC_FOLDERS and plain and name.endswith(".yaml")


class Claim:
    """A backup's hold on its folder (:func:`claim`): what it may replace, and the list of
    files it is writing (the journal)."""

    def __init__(self, root: Path, manifest: Manifest | None, journal: set[str]) -> None:
        self.root = root
        self.manifest = manifest
        #: the files earlier backups wrote: replaced or removed by this one
        self.earlier = (manifest.own_files() if manifest else set()) | journal
        self.writing: set[str] = set()

    def owns(self, rel: str) -> bool:
        """A file of an earlier backup, one this backup writes, or either's partial file."""
        folder, _, name = rel.rpartition("/")
        if name.startswith(".") and name.endswith(PARTIAL):
            rel = f"{folder}/{name[1 : -len(PARTIAL)]}"
        return rel in self.earlier or rel in self.writing

    def holds(self, stream: str) -> bool:
        """Whether an earlier backup of the folder holds ``stream``'s snapshot: in the
        folder its manifest records, or (an interrupted backup's journal, which names no
        stream) in any folder either rule gives it: its
        :func:`~reconciler.backup.layout.folder_name`, that folder kept apart from a case
        twin's (``orders~<hash>``: ``planning.export.case_twin_name``), or the name as it
        is before that rule. A listed file no longer there (its folder removed to let the
        stream go, as the refusal advises) holds nothing."""
        records = self.manifest.streams if self.manifest else ()
        folders = [r.folder_name for r in records if r.name == stream]
        given = folder_name(stream)
        guessed = [given, case_twin_name(given, ""), stream]
        rels = [f"{f}/{DATA}" for f in [*folders, *guessed]]
        return any(self.owns(rel) and self._file(rel) is not None for rel in rels)

    def start(self, folders: Iterable[str]) -> None:
        """Before the first file: refuse anything not ours inside the folders this backup
        writes into (the streams' ``folders`` and the spec files'): a file there is ours
        only when an earlier backup listed it, never because this one is about to write
        a file of that name (another tool's ``nats stream backup``, or on a disk that
        ignores case a folder of another case, holds the same names). Then list every
        stream file it writes in the journal, and remove the earlier manifest (no longer
        true)."""
        folders = list(dict.fromkeys(folders))
        problems = [p for f in dict.fromkeys([*folders, SPECS]) for p in self._not_ours(f)]
        if problems:
            raise BackupError(_refusal(self.root, problems))
        self.writing = {f"{name}/{file}" for name in folders for file in (DATA, METADATA)}
        self._journal()
        if self.manifest is not None:
            (self.root / MANIFEST).unlink(missing_ok=True)
        sync_folder(self.root)

    def add(self, rels: Iterable[str]) -> None:
        """List more files this backup is about to write (the spec files) in the journal."""
        self.writing |= set(rels)
        self._journal()

    def finish(self, manifest: Manifest) -> None:
        """Write ``manifest`` once every file it lists is in place with its size (else
        :class:`BackupError`, and no manifest); then remove the files of the journal
        that the manifest does not list (an earlier backup's, a skipped stream's), and
        the journal."""
        if problems := self.missing(manifest):
            raise BackupError(
                "backup incomplete, no manifest was written: "
                + "; ".join(problems[:SHOWN])
                + (f" (and {len(problems) - SHOWN} more)" if problems[SHOWN:] else "")
            )
        write_json(self.root / MANIFEST, manifest.to_json())
        for rel in sorted((self.earlier | self.writing) - manifest.own_files()):
            self._remove(rel)
        (self.root / JOURNAL).unlink(missing_ok=True)
        sync_folder(self.root)

    def missing(self, manifest: Manifest) -> list[str]:
        """Each file ``manifest`` lists that is not in place as a file of its size, and
        streams whose folders are one (a file system that folds case)."""
        problems: list[str] = []
        seen: dict[tuple[int, int], str] = {}
        expected = {
            f"{s.folder_name}/{n}": f.size for s in manifest.streams for n, f in s.files.items()
        }
        expected |= {f"{manifest.specs_folder}/{n}": f.size for n, f in manifest.specs.items()}
        for rel, size in sorted(expected.items()):
            found = self._file(rel)
            if found is None or found.st_size != size:
                problems.append(f"{self.root / rel}: missing or not {size} bytes")
        for record in manifest.streams:
            with contextlib.suppress(OSError):
                info = os.lstat(self.root / record.folder_name)
                if (key := (info.st_dev, info.st_ino)) in seen:
                    problems.append(
                        f"streams {seen[key]} and {record.name} share the folder "
                        f"{self.root / record.folder_name} (a file system that ignores case?)"
                    )
                seen.setdefault(key, record.name)
        return problems

    def _not_ours(self, folder: str) -> list[str]:
        path = self.root / folder
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return []
        if stat.S_ISLNK(info.st_mode):
            return [f"{path} is a symbolic link (never followed)"]
        if not stat.S_ISDIR(info.st_mode):
            return [f"{path} is not a folder"]
        return [
            f"{entry} is not this backup's"
            for entry in sorted(path.iterdir())
            if not self.owns(f"{folder}/{entry.name}") or entry.is_dir()
        ]

    def _journal(self) -> None:
        files = sorted(self.earlier | self.writing)
        write_json(self.root / JOURNAL, {"format": JOURNAL_FORMAT, "files": files})

    def _file(self, rel: str) -> os.stat_result | None:
        """``rel``'s stat when it is a file reached through a real folder, else None."""
        folder, _, name = rel.partition("/")
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(self.root / folder).st_mode):
                info = os.lstat(self.root / folder / name)
                if stat.S_ISREG(info.st_mode):
                    return info
        return None

    def _remove(self, rel: str) -> None:
        """Remove an earlier backup's file (and its partial file) through real folders
        only, then its folder when that is left empty."""
        folder, _, name = rel.partition("/")
        parent = self.root / folder
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.lstat(parent).st_mode):
                return
        for path in (parent / name, parent / f".{name}{PARTIAL}"):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    path.unlink()
        with contextlib.suppress(OSError):
            parent.rmdir()  # only when empty


def _refusal(root: Path, problems: list[str]) -> str:
    more = f" (and {len(problems) - SHOWN} more)" if problems[SHOWN:] else ""
    return (
        f"refusing to back up into {root}; nothing was changed: "
        + "; ".join(problems[:SHOWN])
        + more
        + ". A backup replaces only files an earlier backup in this folder wrote"
    )


def _journal_files(root: Path) -> set[str] | None:
    """The files an interrupted backup listed; None when there is no journal of ours."""
    path = root / JOURNAL
    if not path.is_file() or path.is_symlink():
        return None
    try:
        body: dict[str, Any] = read_json(path)
    except BackupFileUnreadable:
        raise  # named: it may well be ours
    except BackupError:
        return None
    files = body.get("files")
    if body.get("format") != JOURNAL_FORMAT or not isinstance(files, list):
        return None
    return {str(rel) for rel in files if own_path(rel)}


def _manifest(root: Path) -> Manifest | None:
    path = root / MANIFEST
    if not path.is_file() or path.is_symlink():
        return None
    try:
        return load(root)
    except BackupFileUnreadable:
        raise  # another user's, or chmod 000: named, never taken for someone else's
    except BackupError:
        return None  # someone else's manifest.json


def _entries(root: Path) -> list[str]:
    return sorted(
        p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in root.iterdir()
    )


def _make(out: Path, made: list[Path]) -> None:
    """Make ``out`` (``0700``) and the folders above it that are missing (as ``mkdir -p``
    does), each one this call made added to ``made``: a folder someone else made
    meanwhile is not."""
    missing = []
    path = out
    while not os.path.lexists(path) and path != path.parent:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=FOLDER_MODE if folder == out else 0o777)
        except FileExistsError:
            continue
        made.append(folder)
    if not missing:
        out.mkdir(mode=FOLDER_MODE, exist_ok=True)  # a file there: FileExistsError


def _unmake(made: list[Path]) -> None:
    """Remove the folders :func:`_make` made, deepest first, each only while it is empty
    (``rmdir``): never a file, never a folder this backup did not make."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            return  # not empty (someone's file), or gone: it and those above it stay


@contextlib.contextmanager
def claim(out: Path) -> Iterator[Claim]:
    """Hold ``out`` for one backup: created when missing, locked, read; refused when it
    is neither empty nor a backup, or when another backup holds it. A backup that fails
    (or is interrupted) before it writes anything leaves no folder it made: the folders
    made here are removed again while they are empty."""
    made: list[Path] = []
    try:
        _make(out, made)
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        _unmake(made)
        raise BackupError(f"{out}: cannot use it as the backup folder: {err.strerror}") from None
    except BaseException:
        _unmake(made)
        raise
    try:
        if not _locked(fd, fcntl.LOCK_EX):
            raise BackupError(
                f"{out}: another backup is writing into this folder, or a restore is "
                "reading it; nothing was changed"
            )
        manifest, journal = _manifest(out), _journal_files(out)
        if journal is None and os.path.lexists(out / JOURNAL):
            raise BackupError(_refusal(out, [f"{out / JOURNAL} is not a list of this tool's"]))
        if manifest is None and journal is None and (there := _entries(out)):
            shown = ", ".join(there[:SHOWN]) + (
                f" (and {len(there) - SHOWN} more)" if there[SHOWN:] else ""
            )
            raise BackupError(
                f"refusing to back up into {out}: it is neither empty nor a backup (no "
                f"{MANIFEST} of this tool) and holds {shown}; nothing was changed. Choose "
                "an empty or new folder"
            )
        yield Claim(out, manifest, journal or set())
    except BaseException:
        _unmake(made)  # under the lock: no other backup writes into it meanwhile
        raise
    finally:
        os.close(fd)  # the lock goes with it


@contextlib.contextmanager
def reading(root: Path) -> Iterator[None]:
    """Hold ``root`` while a restore reads it (a shared ``flock``, as :func:`claim`
    takes its own): a backup into it meanwhile is refused, since it would replace the
    files whose digests the restore checked and whose plan it showed with others; and a
    restore is refused while a backup writes into it. Where the file system has no such
    lock, the restore goes on without it."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        raise BackupError(f"{root}: cannot read it as a backup folder: {err.strerror}") from None
    try:
        try:
            held = _locked(fd, fcntl.LOCK_SH)
        except OSError:  # no such lock on this file system
            held = True
        if not held:
            raise BackupError(f"{root}: a backup is writing into this folder; nothing was changed")
        yield
    finally:
        os.close(fd)  # the lock goes with it


def _locked(fd: int, how: int) -> bool:
    """``fd`` locked (``flock``; ``how``: shared or exclusive) without waiting; False
    when another holds it. Raises OSError when the file system cannot lock."""
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True
