"""Which files a spec or project file may name: those inside the repository, one rule.

A spec file's ``value_file``, a project file's spec folders, overlays, resources and
credential files are paths written in a file someone may have changed in a pull request.
Read blindly, they would carry any local file into a server (``value_file: /etc/passwd``,
``../../.ssh/id_ed25519``, a symlink pointing out). So every such path must stay inside
the **repository root**, as :func:`repository_root` defines it, symlinks resolved; a
path that leaves it, an absolute path, or one through a ``.git`` folder (its ``config``
may hold the checkout's token) is an error at the line that names it.

The root is the nearest folder, at or above the folder holding every path the run was
given (the spec paths and overlays; the project file for its own paths), that holds a
project file (``reconcile.yaml``) or a ``.git``; without one, that common folder itself;
without any path, the current directory. Whoever can write the spec files cannot create
folders above the repository, so they cannot widen it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

#: What marks a repository's top folder (a project file, or git's folder).
ROOT_MARKERS = ("reconcile.yaml", ".git")
#: A folder no path may go through (git's own: its config may hold credentials), in
#: any case: on a case-insensitive disk (macOS, Windows) ``.GIT/config`` is git's config.
FORBIDDEN_PART = ".git"


def repository_root(paths: Sequence[str | Path]) -> Path:
    """The root every path named by the files under ``paths`` must stay inside."""
    folders = [_folder(Path(path)) for path in paths]
    if not folders:
        return Path(os.path.realpath(Path.cwd()))
    common = Path(os.path.commonpath([str(folder) for folder in folders]))
    for folder in (common, *common.parents):
        if any((folder / marker).exists() for marker in ROOT_MARKERS):
            return folder
    return common


def enclosing_root(path: Path) -> Path | None:
    """The repository ``path`` lies in as it is written (resolved), None when no folder
    above it holds a marker: its folders are not resolved first, so a file, or a folder
    on its way, that is a symlink pointing out still counts as in the repository and is
    judged by its rule (a file named on the command line, not walked: a policy file)."""
    absolute = Path(os.path.abspath(path))
    for folder in absolute.parents:
        if os.path.islink(folder):
            continue  # a folder on the way made a link (to another checkout) is no root
        if any((folder / marker).exists() for marker in ROOT_MARKERS):
            return Path(os.path.realpath(folder))
    return None


def _folder(path: Path) -> Path:
    real = Path(os.path.realpath(path))
    return real if real.is_dir() else real.parent


def outside_problem(root: Path, named: str, base: Path) -> str | None:
    """Why ``named``, written in a file of folder ``base``, may not be read (None when it
    may): absolute, out of ``root`` (by ``..`` or a symlink), through ``.git``, or
    holding a NUL byte (no file has one in its name)."""
    if "\0" in named:
        return f"{named!r} holds a NUL byte: not a file name"
    if Path(named).is_absolute():
        return f"{named!r} is an absolute path: {_rule(root)}"
    lexical = Path(os.path.normpath(Path(os.path.realpath(base)) / named))
    real = Path(os.path.realpath(base / named))
    if not lexical.is_relative_to(root):
        return f"{named!r} leads out of the repository: {_rule(root)}"
    if not real.is_relative_to(root):
        return f"{named!r} is a symlink pointing out of the repository: {_rule(root)}"
    if FORBIDDEN_PART in (part.lower() for part in real.relative_to(root).parts):
        return f"{named!r} is inside {FORBIDDEN_PART}: never read"
    return None


def opened_problem(root: Path, real: str) -> str | None:
    """Why a file found inside ``root`` may not be read now that it is open, its real
    path ``real`` as the kernel names the opened file (None when it may): the walk
    judged the path, but a folder or file swapped for a symlink between the walk and the
    open leads elsewhere, and the rule holds for what is read, not what was judged."""
    if not Path(real).is_relative_to(root):
        return f"swapped for a symlink pointing out of the repository while read: {_rule(root)}"
    if FORBIDDEN_PART in (part.lower() for part in Path(real).relative_to(root).parts):
        return f"swapped for a path inside {FORBIDDEN_PART} while read: never read"
    return None


def resolved(base: Path, named: str) -> Path:
    """``named`` (relative to ``base``) with its symlinks resolved: what is then read."""
    return Path(os.path.realpath(base / named))


def _rule(root: Path) -> str:
    return f"files named here stay inside the repository ({root})"
