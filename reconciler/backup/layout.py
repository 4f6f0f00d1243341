"""A backup folder on disk, in the nats CLI's layout (natscli v0.4.0, jsm.go ``snapshots.go``):

```
DIR/<folder>/backup.json      {"config": ..., "state": ...}: the SNAPSHOT reply, indented
DIR/<folder>/stream.tar.s2    the server's snapshot bytes, verbatim (an S2-compressed tar)
DIR/specs.d/<file>.yaml       ours: the streams' configuration as spec files
DIR/manifest.json             ours, written last: what a complete backup holds
DIR/backup-in-progress.json   ours, while a backup writes: the files it may write
```

A stream's ``<folder>`` is its name as the export names its files
(:func:`folder_name`: ``ORDERS`` stays, ``A<ESC>B`` is ``A%1BB``), recorded in the
manifest (``folder``), where a restore finds it; backups made before that rule named the
folder after the stream as it is, and their manifests say so too. ``nats stream backup
STREAM DIR`` writes the two files straight into ``DIR``; ``nats account backup DIR`` one
folder per stream. Both restore here; ``nats stream restore DIR/<folder>`` reads ours.
The backup's own names all hold a dot, which no stream's folder holds: a stream's folder
never collides with them, whatever the stream is called.
(Backups made before ``specs.d`` kept the spec files in ``DIR/specs``: the manifest
says which, :data:`SPEC_FOLDERS`.)

Files are written under a temporary name (``.<name>.partial``), synced and renamed, so
an interrupted write never leaves a file that looks complete; a stream's ``backup.json``
comes after its ``stream.tar.s2`` (a folder without it is no stream to natscli or us).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

from reconciler.errors import ReconcileError
from reconciler.planning.export import MAX_FILE_NAME, encoded_name

METADATA = "backup.json"
DATA = "stream.tar.s2"
MANIFEST = "manifest.json"
#: The spec files' folder; a dot in it, so no stream's folder is ever this one.
SPECS = "specs.d"
#: Where a manifest may say its spec files are: ``specs`` in backups made before ``specs.d``.
SPEC_FOLDERS = (SPECS, "specs")
#: The files a backup at work may write or remove (:mod:`reconciler.backup.folder`).
JOURNAL = "backup-in-progress.json"
PARTIAL = ".partial"
READ_SIZE = 1024 * 1024

#: A stream name JetStream takes: no white space a subject refuses (space, tab, CR, LF,
#: FF), no dots, wildcards or path separators. It may hold a control or invisible
#: character (nats-server 2.15.1 took ESC, VT, U+0085, U+00A0, U+200B and U+2028 in a
#: name): a subject takes it, a path never (:func:`folder_name`).
_STREAM_NAME = re.compile(r"^[^ \t\r\n\f.*>/\\]{1,255}\Z")
#: A folder a backup may have written a stream into (:func:`folder_name`'s, or before it a
#: stream's name as it is): one path part, no dots (``.``, ``..``), no control characters.
_FOLDER_NAME = re.compile(r"^[^\s.*>/\\\x00-\x1f\x7f]{1,255}\Z")


class BackupError(ReconcileError):
    """A backup folder that cannot be used as it is (the file is named)."""


class BackupFileUnreadable(BackupError):
    """A file of the folder that cannot be read (:func:`unreadable`): never taken for a
    file of another shape, or for no file."""


def valid_stream_name(name: object) -> bool:
    return isinstance(name, str) and bool(_STREAM_NAME.match(name))


def valid_folder_name(folder: object) -> bool:
    """Whether ``folder`` (read from a manifest or a journal) may name a stream's folder:
    one plain path part that never leaves the backup folder."""
    return isinstance(folder, str) and bool(_FOLDER_NAME.match(folder))


def folder_name(name: str) -> str:
    """The folder stream ``name`` is backed up into: the name as the export writes it in
    a file name (``planning.export.encoded_name``, one rule: letters, digits, ``_`` and
    ``-`` as they are, every other byte ``%XX``, a long name shortened with a hash), so
    any name the server holds has a folder, and none holds a raw control or invisible
    character. Names differing only in case: ``planning.export.apart_in_case``."""
    return encoded_name(name, MAX_FILE_NAME)


@dataclass(frozen=True)
class StreamFolder:
    """One stream's two files in a backup folder."""

    name: str
    folder: Path

    @property
    def metadata(self) -> Path:
        return self.folder / METADATA

    @property
    def data(self) -> Path:
        return self.folder / DATA


def partial_of(path: Path) -> Path:
    """The temporary name ``path`` is written under (:class:`AtomicFile`)."""
    return path.with_name(f".{path.name}{PARTIAL}")


def stream_folder(root: Path, name: str, folder: str) -> StreamFolder:
    """Stream ``name``'s files under ``root``, in ``folder`` (:func:`folder_name`, or what
    a manifest records); refuses a folder that is no folder name of a backup."""
    if not valid_folder_name(folder):
        raise BackupError(f"{folder!r} is not a stream's folder: not used as a folder name")
    return StreamFolder(name, root / folder)


#: A backup holds every message, KeyValue values too (secrets, often): its folders and
#: files are its owner's alone, as the nats CLI makes its own (an existing folder given
#: keeps the permissions its owner chose).
FOLDER_MODE = 0o700
FILE_MODE = 0o600


class AtomicFile:
    """A file written under ``.<name>.partial``, hashed (SHA-256) as it is written, synced
    and renamed into place by :meth:`commit`; :meth:`discard` removes the partial file."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.partial = partial_of(target)
        target.parent.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
        self.partial.unlink(missing_ok=True)  # an interrupted write's (or a link: not followed)
        fd = os.open(self.partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        self._handle: IO[bytes] | None = os.fdopen(fd, "wb")
        self._digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        assert self._handle is not None, "written after commit"
        self._handle.write(data)
        self._digest.update(data)
        self.size += len(data)

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()

    def commit(self) -> None:
        """Sync the data, rename it into place, sync the folder."""
        assert self._handle is not None
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        self._handle = None
        os.replace(self.partial, self.target)
        sync_folder(self.target.parent)

    def discard(self) -> None:
        """Remove the partial file, also when closing it fails (a full disk: the buffered
        bytes cannot be flushed)."""
        handle, self._handle = self._handle, None
        try:
            if handle is not None:
                with contextlib.suppress(OSError):
                    handle.close()
        finally:
            self.partial.unlink(missing_ok=True)


def sync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(target: Path, body: Any) -> tuple[str, int]:
    """``body`` as indented JSON at ``target``, atomically; its (SHA-256, size)."""
    out = AtomicFile(target)
    try:
        out.write(json.dumps(body, indent=2).encode() + b"\n")
        out.commit()
    except BaseException:
        out.discard()
        raise
    return out.sha256, out.size


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; a missing, unreadable or broken file is an error
    naming it. A backup folder comes from elsewhere (an artifact, another machine): what
    is not a regular file (a FIFO: never waited on) and JSON nested past the
    interpreter's stack are errors too, never a hang or a RecursionError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without a writer
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise BackupError(f"{path}: not a regular file")
            body = json.loads(file.read().decode("utf-8"))
    except FileNotFoundError:
        raise BackupError(f"{path}: missing") from None
    except OSError as err:
        raise unreadable(path, err) from None
    except RecursionError:
        raise BackupError(f"{path}: not a JSON file (nested too deep)") from None
    except (UnicodeDecodeError, ValueError) as err:
        raise BackupError(f"{path}: not a JSON file ({type(err).__name__})") from None
    if not isinstance(body, dict):
        raise BackupError(f"{path}: not a JSON object")
    return body


def unreadable(path: Path, err: OSError) -> BackupFileUnreadable:
    """A file of the folder that cannot be read (another user's ``0600`` file, removed
    meanwhile), as an error naming it."""
    return BackupFileUnreadable(f"{path}: cannot be read ({err.strerror or type(err).__name__})")


def is_file(path: Path) -> bool:
    """Whether ``path`` is a file; a folder on the way that cannot be read (another
    user's ``0700`` folder) is an error naming the file, never a ``PermissionError``."""
    try:
        return path.is_file()
    except OSError as err:
        raise unreadable(path, err) from None


def file_digest(path: Path) -> tuple[str, int]:
    """(SHA-256, size) of ``path``, read a MiB at a time."""
    digest = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as handle:
            while block := handle.read(READ_SIZE):
                digest.update(block)
                size += len(block)
    except OSError as err:
        raise unreadable(path, err) from None
    return digest.hexdigest(), size


def chunks(path: Path, size: int) -> Iterator[bytes]:
    """``path`` in pieces of ``size`` bytes, read as they are asked for."""
    try:
        with open(path, "rb") as handle:
            while block := handle.read(size):
                yield block
    except OSError as err:
        raise unreadable(path, err) from None


def stream_folders(root: Path) -> list[StreamFolder]:
    """The streams of a backup folder without a manifest: ``root`` itself when it holds
    a ``backup.json`` (``nats stream backup``), else each sub-folder that does (``nats
    account backup``). The name is the one in ``backup.json`` (checked later)."""
    if not root.is_dir():
        raise BackupError(f"{root}: not a folder")
    if (root / METADATA).is_file():
        return [StreamFolder(_declared_name(root / METADATA), root)]
    found = []
    for child in sorted(root.iterdir()):
        if child.is_dir() and is_file(child / METADATA):
            found.append(StreamFolder(_declared_name(child / METADATA), child))
    return found


def _declared_name(metadata: Path) -> str:
    config = read_json(metadata).get("config")
    name = config.get("name") if isinstance(config, dict) else None
    if not valid_stream_name(name):
        raise BackupError(f"{metadata}: config.name is not a stream name")
    assert isinstance(name, str)
    return name


# -- the S2 stream's framing --------------------------------------------------------------
_S2_MAGIC = b"\xff\x06\x00\x00S2sTwO"
_SNAPPY_MAGIC = b"\xff\x06\x00\x00sNaPpY"
_DATA_CHUNKS = (0x00, 0x01)


def s2_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole S2 stream (a truncated or damaged snapshot), or None.

    Walks the frames (a type byte, a 3-byte little-endian length): the stream must start
    with the S2 (or Snappy) identifier, no frame may be of a reserved type or run past the
    end, and it must hold data. Reads the frame headers only (seeks past the bodies)."""
    try:
        return _s2_problem(path)
    except OSError as err:
        raise unreadable(path, err) from None


def _s2_problem(path: Path) -> str | None:
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if handle.read(len(_S2_MAGIC)) not in (_S2_MAGIC, _SNAPPY_MAGIC):
            return "not an S2 stream (no stream identifier)"
        frames = 0
        for offset, header in _frames(handle, size):
            if len(header) < 4:
                return f"truncated: a frame header cut at byte {offset}"
            kind, length = header[0], int.from_bytes(header[1:], "little")
            if 0x02 <= kind <= 0x7F:
                return f"damaged: a reserved frame type {kind:#x} at byte {offset}"
            if kind in _DATA_CHUNKS and length < 4:
                return f"damaged: a data frame too short at byte {offset}"
            if offset + 4 + length > size:
                return f"truncated: a frame runs {offset + 4 + length - size} bytes past the end"
            frames += kind in _DATA_CHUNKS
    return None if frames else "empty: no data frames"


def _frames(handle: BinaryIO, size: int) -> Iterator[tuple[int, bytes]]:
    """Each frame's offset and header (a type byte, a 3-byte little-endian length; fewer
    than 4 bytes when cut short at the end, the last yielded), from just past the stream
    identifier to the end of the file: the frames' walk both readers share, seeking past
    the bodies."""
    offset = len(_S2_MAGIC)
    while offset < size:
        handle.seek(offset)
        header = handle.read(4)
        yield offset, header
        if len(header) < 4:
            return
        offset += 4 + int.from_bytes(header[1:], "little")


def s2_unpacked(path: Path) -> int:
    """The bytes the S2 stream at ``path`` unpacks to, from its frames' headers: a
    compressed frame's block starts with the length it decodes to (a varint, after the
    frame's 4-byte checksum), an uncompressed frame holds its bytes after the checksum.
    A snapshot of compressible messages is a small fraction of what they take on the
    server. Reads a few bytes per frame (seeks past the bodies); a frame cut short
    counts what it says it holds."""
    try:
        return _s2_unpacked(path)
    except OSError as err:
        raise unreadable(path, err) from None


def _s2_unpacked(path: Path) -> int:
    total = 0
    with open(path, "rb") as handle:
        for offset, header in _frames(handle, path.stat().st_size):
            if len(header) < 4:
                break
            kind, length = header[0], int.from_bytes(header[1:], "little")
            if kind == 0x01:
                total += max(length - 4, 0)
            elif kind == 0x00:
                handle.seek(offset + 8)  # past the header and the checksum
                total += _varint(handle.read(min(10, max(length - 4, 0))))
    return total


def _varint(data: bytes) -> int:
    """The unsigned varint at the start of ``data`` (what it holds of one: 0 for none)."""
    value = 0
    for shift, byte in enumerate(data):
        value |= (byte & 0x7F) << (7 * shift)
        if not byte & 0x80:
            break
    return value
