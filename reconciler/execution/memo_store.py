"""Where the plan memo (:mod:`reconciler.planning.memo`) is kept between runs.

In the cache folder (``RECONCILE_SPEC_CACHE``, next to the cached specs), one file per
(planning code, server facts, owner, key): ``plans-<tag>.bin``. Each entry is a 16-byte
digest of a resource some plan found unchanged and the 4-byte number of the plan that
last found it (plans are numbered per file); nothing else: no names, no configs, no
secrets.

Several plans share a file: environments on servers of the same release planned by the
same owner, a plan of one folder and a plan of the whole repository, the Pulumi
provider's per-resource plans. A plan therefore never replaces what the others found: it
renews the entries it met and keeps the rest until ``KEEP_PLANS`` plans have passed
without meeting them (states that are gone), and the file never holds more than
``MAX_ENTRIES``, the least recently met dropped first. Written atomically; an
unreadable or torn file counts as empty; a failure to write never fails a run. Safe to
delete at any time.

Every digest is keyed by the cache's key (:func:`reconciler.specs.cache.cache_secret`):
an entry someone else wrote (a forged or restored folder) matches no input, so it can
never make a changed resource look unchanged. Without a key no memo is kept.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from reconciler.model.state import ServerInfo
from reconciler.planning.memo import DIGEST_SIZE, Memo
from reconciler.specs.cache import cache_secret, prune

#: Plans an entry survives without being met.
KEEP_PLANS = 200
#: Entries one file holds at most (20 bytes each).
MAX_ENTRIES = 1_000_000
_ENTRY = DIGEST_SIZE + 4


def _path(folder: Path, memo: Memo) -> Path:
    return folder / f"plans-{memo.tag.hex()}.bin"


def _read(path: Path) -> dict[bytes, int]:
    """digest → the number of the plan that last met it; {} when absent or torn."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    if len(data) % _ENTRY:
        return {}
    return {
        data[i : i + DIGEST_SIZE]: int.from_bytes(data[i + DIGEST_SIZE : i + _ENTRY], "big")
        for i in range(0, len(data), _ENTRY)
    }


def load(folder: Path | None, server: ServerInfo, owner: str) -> Memo | None:
    """The memo for plans of ``owner`` on this server (empty when nothing is kept yet);
    None without a cache folder or without its key."""
    secret = None if folder is None else cache_secret(folder)
    if folder is None or secret is None:
        return None
    memo = Memo.for_plan(server, owner, secret=secret)
    return Memo(memo.salt, _read(_path(folder, memo)), secret=secret)


def kept(entries: dict[bytes, int], found: set[bytes]) -> dict[bytes, int]:
    """The file's entries after a plan that found ``found`` unchanged."""
    plan = max(entries.values(), default=0) + 1
    out = {key: seen for key, seen in entries.items() if plan - seen < KEEP_PLANS}
    out.update(dict.fromkeys(found, plan))
    if len(out) > MAX_ENTRIES:
        recent = sorted(out.items(), key=lambda item: item[1], reverse=True)[:MAX_ENTRIES]
        out = dict(recent)
    return out


def store(folder: Path | None, memo: Memo | None) -> None:
    """Renew what ``memo`` found in its file, keep what other plans found."""
    if folder is None or memo is None:
        return
    path = _path(folder, memo)
    entries = kept(_read(path), memo.found)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".plans-", dir=folder)
        with os.fdopen(fd, "wb") as out:
            out.write(b"".join(key + seen.to_bytes(4, "big") for key, seen in entries.items()))
        os.replace(tmp, path)
        prune(folder, "plans-*.bin")
    except OSError:
        return
