"""What a saved plan was made from: a digest of every file the run read, and the git
commit of the repository they sit in (docs/saved-plans.md).

The files are the spec files (the same walk as :func:`~reconciler.specs.files.spec_files`),
the overlays, the project file and every ``value_file`` a KeyValueEntry names. Each is
named by its path relative to the **root**: the nearest folder at or above the current
one holding a project file or a ``.git`` (:func:`~reconciler.specs.paths.repository_root`),
so a plan made in one checkout of a repository is checked in another. Each file's digest
is HMAC-SHA256 keyed with a random salt the plan records: a spec file may hold a secret
value (a ``secret: true`` entry), and a plain hash of it could be looked up in a table
of precomputed guesses. (Someone who knows the rest of such a file can still test
guesses of the secret against its digest: keep secrets in ``value_file`` s of good
entropy, which is what secrets should be anyway.)

The commit is read from ``.git`` directly (``HEAD``, a loose ref or ``packed-refs``),
with ``git rev-parse HEAD`` as the fallback when git is installed; None outside a work
tree. It is recorded for people, never compared: a pull request's plan is applied from
the merge commit, and the digests are what say the files are the same.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from reconciler.errors import Problem
from reconciler.specs.document import Abort
from reconciler.specs.files import feed_bytes, spec_files
from reconciler.specs.paths import repository_root

__all__ = ["FileDigest", "SpecDigest", "digest_files", "git_commit", "plan_root"]

#: What each file is to the run (a spec folder's file, an overlay, the project file, a
#: KeyValueEntry's value file).
ROLES = ("spec", "overlay", "project", "value")


@dataclass(frozen=True)
class FileDigest:
    """One file the run read: its path relative to the root (``/``-separated), what it
    is, and its keyed digest (``None``: it could not be read)."""

    path: str
    role: str
    digest: str | None


@dataclass(frozen=True)
class SpecDigest:
    """Every file a plan was made from, the salt their digests are keyed with, and the
    commit they were at."""

    salt: str
    files: tuple[FileDigest, ...]
    commit: str | None = None

    @property
    def digest(self) -> str:
        """One digest over every file's path, role and digest."""
        lines = "".join(f"{f.role}\0{f.path}\0{f.digest}\n" for f in self.files)
        return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()

    def changes(self, now: SpecDigest) -> list[str]:
        """Which files differ from ``now`` (made with the same salt): one line each."""
        before = {f.path: f for f in self.files}
        after = {f.path: f for f in now.files}
        found = []
        for path in sorted(before.keys() | after.keys()):
            old, new = before.get(path), after.get(path)
            if new is None and old is not None and old.role == "project":
                found.append(
                    f"{path}: the project file the plan was made with is not read by this "
                    "apply: name it as the plan did"
                )
            elif new is None or (new.digest is None and old is not None and old.digest):
                found.append(f"{path}: removed (or no longer read) since the plan was saved")
            elif old is None:
                found.append(f"{path}: new since the plan was saved")
            elif old.digest != new.digest or old.role != new.role:
                found.append(f"{path}: changed since the plan was saved")
        return found


def plan_root() -> Path:
    """The folder saved plans name files relative to (the repository the run is in)."""
    return repository_root([Path.cwd()])


def relative(path: Path, root: Path) -> str:
    """``path`` relative to ``root``, ``/``-separated (``..`` when outside it)."""
    real = os.path.realpath(path)
    return Path(os.path.relpath(real, root)).as_posix()


def digest_files(
    roles: Mapping[str, Sequence[Path]],
    *,
    root: Path,
    salt: str | None = None,
) -> SpecDigest:
    """The digests of the files under each role's paths (folders walked as the spec
    loader walks them), keyed with ``salt`` (a new random one when None)."""
    salt = salt or secrets.token_hex(16)
    key = bytes.fromhex(salt)
    found: dict[str, FileDigest] = {}
    for role in ROLES:
        for path in _walk(roles.get(role, ())):
            name = relative(path, root)
            found.setdefault(name, FileDigest(name, role, _digest(key, name, path)))
    return SpecDigest(salt, tuple(sorted(found.values(), key=lambda f: f.path)), git_commit(root))


def _walk(paths: Iterable[Path]) -> list[Path]:
    problems: list[Problem] = []  # unreadable ones are digested as None below
    walked = []
    for path in paths:
        walked += spec_files([path], problems) if path.is_dir() else [path]
    return walked


def _digest(key: bytes, name: str, path: Path) -> str | None:
    """The keyed digest of ``path``'s bytes under ``name``, read a chunk at a time (a
    value file is any size; a file dropped beside the specs may be huge); None when it
    cannot be read (a pipe is refused, never waited on)."""
    mac = hmac.new(key, name.encode() + b"\0", hashlib.sha256)
    try:
        feed_bytes(path, mac.update)
    except Abort:
        return None
    return mac.hexdigest()


# --- git ------------------------------------------------------------------------------


def git_commit(root: Path) -> str | None:
    """The commit checked out in the work tree at or above ``root``; None outside one."""
    for folder in (root, *root.parents):
        dot_git = folder / ".git"
        if dot_git.exists():
            return _read_head(dot_git) or _rev_parse(folder)
    return None


def _read_head(dot_git: Path) -> str | None:
    """HEAD's commit read from the files (a ``.git`` file of a linked work tree, a
    detached HEAD, a loose ref or ``packed-refs``); None when they say otherwise."""
    try:
        if dot_git.is_file():
            pointer = dot_git.read_text().strip()
            if not pointer.startswith("gitdir:"):
                return None
            dot_git = (dot_git.parent / pointer.removeprefix("gitdir:").strip()).resolve()
        head = (dot_git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return _commit_id(head)
        ref = head.removeprefix("ref:").strip()
        loose = dot_git / ref
        if loose.is_file():
            return _commit_id(loose.read_text().strip())
        common = dot_git / "commondir"
        base = (dot_git / common.read_text().strip()).resolve() if common.is_file() else dot_git
        if (base / ref).is_file():
            return _commit_id((base / ref).read_text().strip())
        for line in (base / "packed-refs").read_text().splitlines():
            commit, _, name = line.partition(" ")
            if name == ref:
                return _commit_id(commit)
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _commit_id(text: str) -> str | None:
    ok = len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)
    return text if ok else None


def _rev_parse(folder: Path) -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    try:
        done = subprocess.run(
            [git, "-C", str(folder), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return _commit_id(done.stdout.strip()) if done.returncode == 0 else None
