"""Spec files parsed ahead in a forked child, while the command goes on (Linux).

A command that will validate spec files calls :func:`parse_ahead` as soon as it knows
their paths, before it imports the rest of the engine. A child process, forked then,
walks the paths as the loader does (:func:`~reconciler.specs.files.real_spec_files`, and
only the files inside the repository root: :func:`~reconciler.specs.files.inside`),
reads each file (:func:`~reconciler.specs.files.read_text`) and parses the plainest
YAML (:func:`~reconciler.specs.yaml_block.block_documents`), on the machine's other
core, while the parent imports, connects and starts reading the server. The parent's
loader then takes each file's documents (:meth:`ParsedAhead.take`) instead of parsing it
(``loader.load_spec_files``).

The child only parses: every decision stays the parent's. The parent walks the paths
itself and asks only for the files of its own walk; a file the child left (JSON, YAML
beyond the plainest, a file it could not read: anything with a problem to report) or a
file it never saw is read and parsed by the parent as before, and says its problems as
before. When the child fails, is killed, or answers with anything but what it was asked
for, the parent parses everything itself. A re-plan of 21,000 resources (1,000 files):
the process took 0.88x the time (the parse off the parent's core, against 0.03 s of
unpacking).

No child is forked but on Linux, in a process with no other thread (a fork copies one
thread only: one holding a lock would leave it held in the child), nor when
``RECONCILE_PARSE_AHEAD=0``; the child never writes but to its pipe and ends with
``os._exit`` (no cleanup of the parent's runs twice). The child ends when the parent
does: its next write fails.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import signal
import struct
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reconciler.errors import Problem
from reconciler.locations import Lines, Location
from reconciler.specs.document import Abort, Document
from reconciler.specs.files import inside, read_text, real_spec_files
from reconciler.specs.paths import repository_root
from reconciler.specs.yaml_block import block_documents

#: Each file's answer is one frame: its length, then its marshal bytes.
_LENGTH = struct.Struct("<Q")
#: The child's marshal format (a fork runs the parent's own interpreter).
_MARSHAL_VERSION = 4
#: ``RECONCILE_PARSE_AHEAD=0``: every file parsed in the process itself.
ENV = "RECONCILE_PARSE_AHEAD"


class ParsedAhead:
    """The documents a forked child parses (:func:`parse_ahead`), by file."""

    def __init__(self, pid: int, reader: int) -> None:
        self._pid = pid
        self._reader: int | None = reader
        self._documents: dict[str, list[Document]] = {}
        self._lock = threading.Lock()

    def take(self, path: Path) -> list[Document] | None:
        """The documents of ``path`` as the loader would read them (once: the next
        take of it is None), or None: the child left it, or failed."""
        with self._lock:
            if self._reader is not None:
                self._collect()
            return self._documents.pop(str(path), None)

    def close(self) -> None:
        """Stop listening: the child ends (killed if it still runs) and is reaped; the
        documents not taken are let go."""
        with self._lock:
            self._documents = {}
            if self._reader is not None:
                os.close(self._reader)
                self._reader = None
                with contextlib.suppress(OSError):
                    os.kill(self._pid, signal.SIGKILL)
                self._reap()

    def _collect(self) -> None:
        reader, self._reader = self._reader, None
        assert reader is not None
        try:
            data = _read_all(reader)
        finally:
            os.close(reader)
        if not self._reap():
            return  # a child that did not end well: everything parsed again, here
        documents: dict[str, list[Document]] = {}
        try:
            for name, packed in _frames(data):
                documents[name] = [
                    Document(body, Location(name, line), Lines.unpacked(name, lines))
                    for body, line, lines in packed
                ]
        except (ValueError, TypeError, EOFError, struct.error):
            return
        self._documents = documents

    def _reap(self) -> bool:
        """Wait for the child; whether it ended with 0."""
        try:
            _, status = os.waitpid(self._pid, 0)
        except ChildProcessError:
            return False
        return os.waitstatus_to_exitcode(status) == 0


def parse_ahead(paths: Sequence[Path]) -> ParsedAhead | None:
    """A child parsing the spec files under ``paths`` (:class:`ParsedAhead`), or None:
    not on Linux, another thread running, turned off (:data:`ENV`), or the fork failed."""
    if not paths or not sys.platform.startswith("linux") or os.environ.get(ENV) == "0":
        return None
    if threading.active_count() != 1:
        return None
    return _fork(paths)


def _fork(paths: Sequence[Path]) -> ParsedAhead | None:
    try:
        reader, writer = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(reader)
        os.close(writer)
        return None
    if pid == 0:  # the child: parse, write, and end without the parent's cleanup
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it at once
            os.close(reader)
            _parse_into(writer, list(paths))
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    return ParsedAhead(pid, reader)


def _parse_into(writer: int, paths: list[Path]) -> None:
    """Each file under ``paths`` the loader would read, parsed, as a frame to ``writer``."""
    problems: list[Problem] = []
    root = repository_root(paths)
    for path in inside(root, real_spec_files(paths, problems), problems):
        if path.suffix == ".json":
            continue
        name = str(path)
        try:
            documents = block_documents(read_text(path), name)
        except Abort:
            continue
        if documents is None:
            continue
        try:
            packed = [(d.body, d.source.line, _packed(d)) for d in documents]
            data = marshal.dumps((name, packed), _MARSHAL_VERSION)
        except ValueError:
            continue  # a value marshal does not take (a YAML timestamp): the parent's
        _write_all(writer, _LENGTH.pack(len(data)) + data)


def _packed(document: Document) -> Any:
    locations = document.locations
    if not isinstance(locations, Lines):
        raise ValueError("not a block document's lines")
    return locations.packed()


def _frames(data: bytes) -> list[tuple[str, Any]]:
    frames = []
    view, at = memoryview(data), 0
    while at < len(view):
        (size,) = _LENGTH.unpack_from(view, at)
        at += _LENGTH.size
        if at + size > len(view):
            raise EOFError("a frame cut short")
        name, packed = marshal.loads(view[at : at + size])
        if not isinstance(name, str) or not isinstance(packed, list):
            raise TypeError("not a frame")
        frames.append((name, packed))
        at += size
    return frames


def _read_all(reader: int) -> bytes:
    chunks = []
    while chunk := os.read(reader, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _write_all(writer: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(writer, view) :]
