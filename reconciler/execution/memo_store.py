"""Where the plan memo (:mod:`reconciler.planning.memo`) is kept between runs.

In the cache folder (``RECONCILE_SPEC_CACHE``, next to the cached specs), one file per
(planning code, server facts, owner): ``plans-<salt>.bin``, the 16-byte digests of the
resources the last plan found unchanged, nothing else (no names, no configs, no
secrets). Written atomically, only when it changed; an unreadable or torn file counts
as empty; a failure to write never fails a run. Safe to delete at any time.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from reconciler.model.state import ServerInfo
from reconciler.planning.memo import DIGEST_SIZE, Memo
from reconciler.specs.cache import prune


def _path(folder: Path, memo: Memo) -> Path:
    return folder / f"plans-{memo.salt.hex()}.bin"


def load(folder: Path | None, server: ServerInfo, owner: str) -> Memo | None:
    """The memo for plans of ``owner`` on this server (empty when nothing is kept yet);
    None without a cache folder."""
    if folder is None:
        return None
    memo = Memo.for_plan(server, owner)
    try:
        data = _path(folder, memo).read_bytes()
    except OSError:
        return memo
    if len(data) % DIGEST_SIZE:
        return memo  # torn or foreign: start again
    known = (data[i : i + DIGEST_SIZE] for i in range(0, len(data), DIGEST_SIZE))
    return Memo(memo.salt, known)


#: Digests kept beyond twice what one plan found (a small project's neighbours).
SPARE = 10_000


def kept(memo: Memo) -> set[bytes]:
    """What to keep of ``memo``: what this plan found unchanged, and (up to as many again,
    plus ``SPARE``) what the plans before it found that this one did not meet. Several
    environments on servers of the same release, planned by the same owner, share a file:
    each keeps the other's answers instead of replacing them; digests of states that no
    longer exist fall out once they outgrow the bound."""
    others = memo.known - memo.found
    if len(others) > len(memo.found) + SPARE:
        return set(memo.found)
    return memo.found | others


def store(folder: Path | None, memo: Memo | None) -> None:
    """Keep what ``memo`` found (when that changes what the file holds)."""
    if folder is None or memo is None:
        return
    keep = kept(memo)
    if keep == memo.known:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".plans-", dir=folder)
        with os.fdopen(fd, "wb") as out:
            out.write(b"".join(sorted(keep)))
        os.replace(tmp, _path(folder, memo))
        prune(folder, "plans-*.bin")
    except OSError:
        return
