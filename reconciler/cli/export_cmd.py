"""``reconcile export``: live state → spec files (a plan on them is empty)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reconciler.cli.options import (
    connection_options,
    overwrite_option,
    owner_option,
    project_options,
    resolve_target,
)
from reconciler.cli.output import notice
from reconciler.errors import ReconcileError
from reconciler.planning.export_text import HEAD_BYTES, HEADER, file_texts, written_by_tool
from reconciler.planning.export_text import dump as _dump

if TYPE_CHECKING:
    from reconciler.planning.export import ExportedFile

#: HEADER and _dump: the export format's (planning.export_text), named here for the tests.
__all__ = [
    "HEADER",
    "_dump",
    "export",
    "refuse_foreign",
    "write_files",
    "write_folders",
]


#: A folder to name files in (O_PATH: searching it is all that is asked, as a path is).
_FOLDER = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
#: A new file only: never an existing file, nor through a link (O_EXCL follows none).
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: What a hard link fails with on a file system without them (FAT, some network shares).
_NO_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})


def _write_in(directory: int, name: str, text: str, *, overwrite: bool) -> str | None:
    """Write ``name`` in the folder open as ``directory`` (each name is looked up in it,
    not walked from a path again: 20,000 files of an import spent more in
    ``tempfile.mkstemp``'s and the text file's Python than in the kernel), as
    :func:`refuse_foreign` allows at this moment, not at its check: None when written,
    else why it is refused, nothing written.

    The text goes to a new temporary file in the folder, written in full, then takes
    the name (:func:`_place`): a name nothing holds is made by a hard link, which fails
    if anything (a file, a link) took it since the check; a name holding a file export
    or import wrote (or anything but a folder, with ``overwrite``) is replaced by a
    rename, which replaces the directory entry itself, a link too, never writing through
    it. No temporary file stays.
    """
    if Path(name).name != name or name in ("", ".", ".."):
        raise ReconcileError(f"refusing to write {name!r}: not a plain file name")
    data = text.encode("utf-8")
    for _ in range(tempfile.TMP_MAX):
        temporary = f".export-{os.urandom(6).hex()}.tmp"
        try:
            handle = os.open(temporary, _NEW_FILE, 0o600, dir_fd=directory)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no usable temporary file name found")
    try:
        try:
            written = 0
            while written < len(data):
                written += os.write(handle, data[written:])
        finally:
            os.close(handle)
        why = _place(directory, temporary, name, overwrite=overwrite)
    finally:
        with contextlib.suppress(OSError):  # renamed away, or the new name's other link
            os.unlink(temporary, dir_fd=directory)
    return why


def _place(directory: int, temporary: str, name: str, *, overwrite: bool) -> str | None:
    """The written ``temporary`` as ``name`` (see :func:`_write_in`); why not, or None.

    Between the look at a file that is ours and the rename over it, another process can
    still swap in its own file (POSIX has no rename-if-unchanged): the window is that
    of two system calls, not of the whole export."""
    if overwrite:
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
        return None
    try:  # a new name: appears whole, or not at all when anything took it meanwhile
        os.link(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
        return None
    except FileExistsError:
        pass
    except OSError as err:
        if err.errno not in _NO_LINKS:
            raise
        if _claimed(directory, name):  # no hard links: an empty file of ours claims it
            os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
            return None
    why = _foreign(directory, name)
    if why is None:  # ours (or gone again: the rename makes it)
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    return why


def _claimed(directory: int, name: str) -> bool:
    """Whether an empty file ``name`` was made, nothing standing there before."""
    try:
        os.close(os.open(name, _NEW_FILE, 0o600, dir_fd=directory))
    except FileExistsError:
        return False
    return True


@click.command(name="export")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write one file per stream or bucket into this folder (default: stdout).",
)
@overwrite_option
@owner_option
@click.option(
    "--all-owners",
    is_flag=True,
    help="Also export resources other owners manage (left out by default, so that "
    "applying the export, even with --prune, never touches them).",
)
@project_options
@connection_options
@click.pass_context
def export(
    ctx: click.Context,
    /,
    out: Path | None,
    overwrite: bool,
    owner: str,
    all_owners: bool,
    project_file: Path | None,
    env_name: str | None,
    **conn: Any,
) -> int:
    """Write the server's streams, consumers and buckets as spec files.

    File names are stream-NAME.yaml, kv-NAME.yaml and objectstore-NAME.yaml, with every
    character other than letters, digits, '_' and '-' written as %XX, so no two
    resources share a file; a name met again in other case (orders after ORDERS: one
    file on a case-insensitive disk) gains '~' and a hash. A plan on the exported files
    is empty. Exporting again into the same folder refreshes the files export or import
    wrote; a file of the same name they did not write is refused, and nothing written,
    unless --overwrite.
    """
    from reconciler.execution import stages
    from reconciler.planning.export import export_state

    target = resolve_target(
        ctx,
        paths=(),
        conn=conn,
        owner=owner,
        project_file=project_file,
        env_name=env_name,
        needs_paths=False,
    )
    live = asyncio.run(stages.fetch_live(target.options, on_notice=notice))
    files = export_state(live, owner=None if all_owners else target.owner, on_skip=notice)
    return write_files(files, out, command="export", overwrite=overwrite)


def write_files(
    files: list[ExportedFile], out: Path | None, *, command: str, overwrite: bool = False
) -> int:
    """Spec files into ``out`` (with the schema header and the ``command`` that wrote
    them: export or import; :func:`write_folders`), or to stdout."""
    if out is None:
        click.echo("---\n".join(_dump(f.documents) for f in files), nl=False)
        return 0
    write_folders({out: file_texts(files, command=command)}, command=command, overwrite=overwrite)
    return 0


def write_folders(
    folders: Mapping[Path, Sequence[tuple[str, str]]], *, command: str, overwrite: bool
) -> None:
    """Each folder's (file name, text) pairs into it, the one way export and import
    write an ``--out`` folder: every folder checked (:func:`refuse_foreign`) before any
    file is written, then each file written as the rule allows when it is written
    (:func:`_write_in`): a file or a link that appeared since the check is refused as
    the check refuses it, never replaced nor followed (with ``overwrite``, replaced as
    one there at the check would be, a link never followed)."""
    refuse_foreign(folders, overwrite=overwrite)
    written = 0
    for out, texts in folders.items():
        written += _write_texts(out, texts, command=command, overwrite=overwrite, before=written)


#: How many refused files the error names.
SHOWN = 6


def refuse_foreign(
    folders: Mapping[Path, Sequence[tuple[str, str]]], *, overwrite: bool = False
) -> None:
    """Refuse, naming them, the files the ``folders``' texts would replace that neither
    ``reconcile export`` nor ``import`` wrote (:func:`~reconciler.planning.export_text.
    written_by_tool`: a hand-written file of the same name, a link), unless
    ``overwrite``, and a folder of such a name in any case (a rename cannot replace it):
    before anything is written, the one rule of both commands, for every folder they
    write (:func:`write_folders`; each write applies it again)."""
    found: list[str] = []
    for out, texts in folders.items():
        try:
            directory = os.open(out, _FOLDER)
        except FileNotFoundError:
            continue  # a new folder: nothing to replace
        except OSError:
            continue  # not a folder: said when it is written
        try:
            for name, _ in texts:
                why = _foreign(directory, name)
                if why is not None and (not overwrite or why == _FOLDER_THERE):
                    found.append(f"{out / name} ({why})")
        finally:
            os.close(directory)
    if found:
        raise _refusal(found, overwrite=overwrite, written=0)


def _refusal(found: Sequence[str], *, overwrite: bool, written: int) -> ReconcileError:
    """The one refusal of files export or import did not write (``found``: each file and
    why), saying how many files were ``written`` before it (by then, all whole)."""
    more = f" (and {len(found) - SHOWN} more)" if found[SHOWN:] else ""
    done = (
        "nothing was written"
        if not written
        else f"{written} file(s) were written before it was found, the others were not"
    )
    return ReconcileError(
        "refusing to replace files reconcile export or import did not write: "
        + "; ".join(found[:SHOWN])
        + more
        + f"; {done}. Move them away"
        + ("" if overwrite else ", or give --overwrite to replace them")
    )


def _foreign(directory: int, name: str) -> str | None:
    """Why the entry ``name`` of the folder open as ``directory`` is not a file export
    or import wrote; None when there is none, or it is one."""
    try:
        info = os.lstat(name, dir_fd=directory)
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"cannot be read: {err.strerror}"
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if stat.S_ISDIR(info.st_mode):
        return _FOLDER_THERE
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    try:
        handle = os.open(name, _READ, dir_fd=directory)
    except OSError as err:
        return f"cannot be read: {err.strerror}"
    try:
        head = os.read(handle, HEAD_BYTES)
    except OSError as err:
        return f"cannot be read: {err.strerror}"
    finally:
        os.close(handle)
    return None if written_by_tool(head) else "no header saying reconcile wrote it"


#: Why a folder of a file's name is refused, even with ``--overwrite``.
_FOLDER_THERE = "a folder"
#: An existing file read, never through a link, never waiting on a FIFO put there.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _write_texts(
    out: Path, texts: Sequence[tuple[str, str]], *, command: str, overwrite: bool, before: int
) -> int:
    """Each (file name, text) of ``texts`` into ``out`` (made when missing); says how
    many, and returns it. A file refused when it is written (:func:`_write_in`) ends the
    writing (``before``: how many files other folders got)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ReconcileError(f"{out}: cannot create the folder: {err.strerror}") from None
    written: set[str] = set()
    try:
        directory = os.open(out, _FOLDER)
    except OSError as err:
        raise ReconcileError(f"{out}: cannot open the folder: {err.strerror}") from None
    try:
        for name, text in texts:
            try:
                why = _write_in(directory, name, text, overwrite=overwrite)
            except OSError as err:
                raise ReconcileError(f"{out / name}: {err.strerror}") from None
            if why is not None:
                found = [f"{out / name} ({why})"]
                raise _refusal(found, overwrite=overwrite, written=before + len(written))
            written.add(name)
    finally:
        os.close(directory)
    notice(f"{command}ed {len(written)} file(s) to {out}")
    return len(written)
