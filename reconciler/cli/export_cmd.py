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
    "write_file",
    "write_files",
    "write_texts",
]


def write_file(folder: Path, name: str, text: str) -> None:
    """Write ``folder/name`` without following a link that stands there.

    The text goes to a new temporary file in ``folder`` that is then renamed over
    ``name``: a rename replaces the directory entry itself, so an existing symlink is
    replaced, never written through (nothing outside the folder is touched).
    """
    directory = os.open(folder, _FOLDER)
    try:
        _write_in(directory, name, text)
    finally:
        os.close(directory)


#: A folder to name files in (O_PATH: searching it is all that is asked, as a path is).
_FOLDER = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
#: A new file only: never an existing file, nor through a link (O_EXCL follows none).
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _write_in(directory: int, name: str, text: str) -> None:
    """:func:`write_file` in the folder open as ``directory``: each name is looked up in
    it, not walked from a path again (20,000 files of an import spent more in
    ``tempfile.mkstemp``'s and the text file's Python than in the kernel)."""
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
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        raise


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
    """Spec files into ``out`` (each by rename, with the schema header and the
    ``command`` that wrote them: export or import), or to stdout. A file of the same
    name that neither command wrote is refused before anything is written, unless
    ``overwrite`` (:func:`refuse_foreign`)."""
    if out is None:
        click.echo("---\n".join(_dump(f.documents) for f in files), nl=False)
        return 0
    texts = file_texts(files, command=command)
    refuse_foreign({out: texts}, overwrite=overwrite)
    write_texts(out, texts, command=command)
    return 0


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
    write."""
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
        more = f" (and {len(found) - SHOWN} more)" if found[SHOWN:] else ""
        raise ReconcileError(
            "refusing to replace files reconcile export or import did not write: "
            + "; ".join(found[:SHOWN])
            + more
            + "; nothing was written. Move them away"
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


def write_texts(out: Path, texts: Sequence[tuple[str, str]], *, command: str) -> None:
    """Each (file name, text) of ``texts`` into ``out`` (made when missing), by rename;
    says how many."""
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
                _write_in(directory, name, text)
            except OSError as err:
                raise ReconcileError(f"{out / name}: {err.strerror}") from None
            written.add(name)
    finally:
        os.close(directory)
    notice(f"{command}ed {len(written)} file(s) to {out}")
