"""Spec files parsed ahead in a forked child, while the command goes on (Linux).

A command that will validate spec files calls :func:`parse_ahead` as soon as it knows
their paths, before it imports the rest of the engine. A child process, forked then,
walks the paths as the loader does (:func:`~reconciler.specs.files.real_spec_files`, and
only the files inside the repository root: :func:`~reconciler.specs.files.inside`),
reads each file (:func:`~reconciler.specs.files.read_text`) and parses the plainest
YAML (:func:`~reconciler.specs.yaml_block.block_documents`) on the machine's other
core, while the parent imports, connects and starts reading the server. It sends one
frame a file, in the walk's order: the file's documents, or None for a file it leaves
to the loader. When the parent's loader gets to the files (:meth:`ParsedAhead.load`)
it reads them itself from the last one back while the child's frames come in from the
first, until the two meet: on a machine whose other core is busy (the server answering
the read, say) nobody waits for the child.

The child only parses: every decision stays the parent's. The parent walks the paths
itself and uses a frame only for a file of its own walk; a file the child left (JSON,
YAML beyond the plainest, a file with a problem to say: read and said by the loader as
before), never saw or did not reach is read by the parent, and an answer that is not
whole frames is not used at all. A cold re-plan of 21,000 resources (1,000 files) as a
whole process took 0.86-0.88x the time before.

The child's documents of a file are used only for the very text the parent reads when
it gets to them: each frame carries the SHA-256 of the text parsed, and the parent reads
the file again and compares (:func:`_as_read_now`). A file rewritten since the child read
it is parsed by the parent as it reads now, as by a process parsing alone.

No child is forked but on Linux, in a process with no other thread (a fork copies one
thread only: one holding a lock would leave it held in the child), nor when
``RECONCILE_PARSE_AHEAD=0``. Every signal is blocked while the process forks: a Ctrl-C
reaching the child ends it as soon as it takes SIGINT's default action, never through
the parent's handler; one reaching the parent is raised from :func:`parse_ahead`, the
child ended first. The child never writes but to its pipe and ends with ``os._exit`` (no
cleanup of the parent's runs twice). It is killed once the parent has what it needs, and
it ends when the parent does, however the parent ends (``PR_SET_PDEATHSIG``: a parent
killed while the child parsed a large file left it parsing on, until its next write
failed; one stopped then stayed for ever).
"""

from __future__ import annotations

import contextlib
import hashlib
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
from reconciler.specs.document import Abort, Document, Loaded, ReadFile, read_one
from reconciler.specs.files import inside, read_text, real_spec_files
from reconciler.specs.paths import repository_root
from reconciler.specs.yaml_block import block_documents

#: Each file's answer is one frame: its length, then its marshal bytes.
_LENGTH = struct.Struct("<Q")
#: The child's marshal format (a fork runs the parent's own interpreter).
_MARSHAL_VERSION = 4
#: ``RECONCILE_PARSE_AHEAD=0`` (or ``false``, ``no``, ``off``): every file parsed in the
#: process itself.
ENV = "RECONCILE_PARSE_AHEAD"


class ParsedAhead:
    """The documents a forked child parses (:func:`parse_ahead`), file by file, as they
    come."""

    def __init__(self, pid: int, reader: int) -> None:
        self._pid: int | None = pid
        self._reader: int | None = reader
        self._buffer = bytearray()
        #: by file: the digest of the text parsed and its documents, or None (the child
        #: left it to the loader)
        self._seen: dict[str, tuple[bytes, list[Document]] | None] = {}
        #: the files of the frames, in the order they came (the child's walk)
        self._arrived: list[str] = []
        self._lock = threading.RLock()

    def load(self, files: Sequence[Path], read_file: ReadFile) -> list[Loaded]:
        """Every file's documents and problems, in order, as ``read_file`` gives them:
        the child's from the first file on, this thread's (``read_file``) from the last
        file back, until the two meet (a child slower than the parent, on a machine whose
        other core is busy, costs no wait); then the child is stopped. A file the child
        left, never saw, or did not reach is read here."""
        with self._lock:
            return self._load(files, read_file)

    def _load(self, files: Sequence[Path], read_file: ReadFile) -> list[Loaded]:
        out: list[Loaded | None] = [None] * len(files)
        names = [str(path) for path in files]
        end = len(files)
        while end and self._reader is not None:
            self._drain(block=False)
            if names[end - 1] in self._seen:
                break  # the child has come this far: the files before are its share
            end -= 1
            out[end] = read_one(files[end], read_file)
        position = {name: at for at, name in enumerate(names)}
        furthest, looked = -1, 0  # the last of these files the child sent, so far
        done = 0
        while done < end:
            for name in self._arrived[looked:]:
                furthest = max(furthest, position.get(name, -1))
            looked = len(self._arrived)
            if names[done] in self._seen or furthest > done:
                done += 1  # the child's, or one it went past (its walk lacked it): here
            elif self._reader is not None:
                self._drain(block=True)
            else:
                break  # the child ended before this file: the rest is read here
        self._close()
        for index in range(len(files)):
            if out[index] is None:
                out[index] = _as_read_now(files[index], self._seen.pop(names[index], None))
            if out[index] is None:
                out[index] = read_one(files[index], read_file)
        self._seen, self._arrived = {}, []
        return [item for item in out if item is not None]

    def close(self) -> None:
        """Stop the child (killed if it still runs; its next write would fail anyway) and
        reap it; what it sent and was not taken is let go by the next load."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._reader is not None:
            os.close(self._reader)
            self._reader = None
        if self._pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self._pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._pid, 0)
            self._pid = None

    def _drain(self, *, block: bool) -> None:
        """Read what the child sent (``block``: wait for something, or its end) and take
        each whole frame; an answer that is not frames leaves everything to the loader."""
        reader = self._reader
        assert reader is not None
        os.set_blocking(reader, block)
        try:
            while chunk := os.read(reader, 1 << 20):
                self._buffer += chunk
                if block:
                    break
            else:
                self._close()  # its end
        except BlockingIOError:
            pass
        try:
            self._take_frames()
        except (ValueError, TypeError, EOFError, struct.error):
            self._seen, self._arrived = {}, []  # nothing of a garbled answer is used
            self._buffer.clear()
            self._close()

    def _take_frames(self) -> None:
        buffer = self._buffer
        at = 0
        while len(buffer) - at >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(buffer, at)
            if len(buffer) - at - _LENGTH.size < size:
                break  # the rest of it is still coming
            start = at + _LENGTH.size
            name, digest, packed = _frame(bytes(buffer[start : start + size]))
            self._arrived.append(name)
            self._seen[name] = (
                None
                if packed is None
                else (
                    digest,
                    [
                        Document(body, Location(name, line), Lines.unpacked(name, lines))
                        for body, line, lines in packed
                    ],
                )
            )
            at = start + size
        del buffer[:at]


def _as_read_now(path: Path, parsed: tuple[bytes, list[Document]] | None) -> Loaded | None:
    """The child's documents of ``path`` when the file's text now is the text it parsed
    (read again, with the same guards: 1,000 files read and digested in 16-20 ms); else
    None, and the loader reads it (a file rewritten since, by a checkout under way or an
    editor saving, is planned as it reads now, and the spec cache, keyed by the text the
    parent reads, never keeps the old text's specs under the new one's key)."""
    if parsed is None:
        return None
    digest, documents = parsed
    try:
        text = read_text(path)  # another text (swapped since?): read by the loader's rule
    except Abort:
        return None  # the loader reads it again, and says why it cannot
    return (documents, []) if _digest(text) == digest else None


def parse_ahead(paths: Sequence[Path]) -> ParsedAhead | None:
    """A child parsing the spec files under ``paths`` (:class:`ParsedAhead`), or None:
    not on Linux, another thread running, turned off (:data:`ENV`), or the fork failed."""
    turned_off = os.environ.get(ENV, "").strip().lower() in ("0", "false", "no", "off")
    if not paths or not sys.platform.startswith("linux") or turned_off:
        return None
    if threading.active_count() != 1:
        return None
    return _fork(paths)


def _fork(paths: Sequence[Path]) -> ParsedAhead | None:
    try:
        reader, writer = os.pipe()
    except OSError:
        return None
    parent = os.getpid()
    # no handler of the parent's runs in the child (nor in an at-fork hook of either)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        pid = os.fork()
    except OSError:
        os.close(reader)
        os.close(writer)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return None
    if pid == 0:  # the child: parse, write, and end without the parent's cleanup
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it at once
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one meanwhile: now
            _end_with(parent)
            os.close(reader)
            _let_go_of_the_terminal()
            _parse_into(writer, list(paths))
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    parsed = ParsedAhead(pid, reader)
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a Ctrl-C meanwhile: raised here
    except BaseException:
        parsed.close()
        raise
    return parsed


def _let_go_of_the_terminal() -> None:
    """The child's standard streams on /dev/null: it writes nothing to them, and it never
    keeps the parent's output open (a pipe read to its end, ``reconcile plan | ...``,
    ends when the parent does)."""
    null = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1, 2):
        os.dup2(null, stream)
    os.close(null)


#: prctl(2)'s option: the signal the calling process gets when its parent ends.
_PR_SET_PDEATHSIG = 1


def _end_with(parent: int) -> None:
    """The child is killed when its parent ends, however it ends (or ends now, when it
    already has): else a parent killed while the child parses a large file leaves the
    child parsing on until its next write fails (a stopped one, for ever)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        pass  # no prctl to call: it ends at its next write
    if os.getppid() != parent:
        os._exit(1)


def _parse_into(writer: int, paths: list[Path]) -> None:
    """A frame to ``writer`` for each file under ``paths`` the loader would read, in its
    order: the file's documents, or None (left to the loader)."""
    problems: list[Problem] = []
    root = repository_root(paths)
    for path in inside(root, real_spec_files(paths, problems), problems):
        name = str(path)
        packed, digest = None, b""
        if path.suffix != ".json":
            try:
                text = read_text(path, within=root)
                documents = block_documents(text, name)
                if documents is not None:
                    packed = [(d.body, d.source.line, _packed(d)) for d in documents]
                    digest = _digest(text)
            except (Abort, ValueError):
                packed = None
        try:
            data = marshal.dumps((name, digest, packed), _MARSHAL_VERSION)
        except ValueError:  # a value marshal does not take: the loader reads the file
            data = marshal.dumps((name, b"", None), _MARSHAL_VERSION)
        _write_all(writer, _LENGTH.pack(len(data)) + data)


def _packed(document: Document) -> Any:
    locations = document.locations
    if not isinstance(locations, Lines):
        raise ValueError("not a block document's lines")
    return locations.packed()


def _frame(data: bytes) -> tuple[str, bytes, list[Any] | None]:
    """One frame's (file, the digest of the text parsed, packed documents or None)."""
    name, digest, packed = marshal.loads(data)
    if not (isinstance(name, str) and isinstance(digest, bytes)):
        raise TypeError("not a frame")
    if not (packed is None or isinstance(packed, list)):
        raise TypeError("not a frame")
    return name, digest, packed


def _digest(text: str) -> bytes:
    """What tells one text of a file from another (the child parsed it, the parent reads
    it now): SHA-256 of its UTF-8."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _write_all(writer: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(writer, view) :]
