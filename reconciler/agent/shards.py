"""Which agent process serves which environment: ``--shard I/N`` (docs/agent.md#many-environments).

Rendezvous hashing (highest random weight): environment ``e`` belongs to the shard ``i``
of ``0..N-1`` with the highest ``sha256(f"{i}/{e}")``. Every process computes the same
answer from the names alone (no coordination, no state), and changing N moves only the
environments the added (or removed) shard wins: about 1/N of them, never a swap between
shards that stay. A StatefulSet's pod names its shard: ``I`` may be written as the pod's
name (``reconcile-watch-2``), whose trailing ordinal is the index.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from reconciler.errors import ReconcileError

#: More shards than this is a typo, not a deployment.
MAX_SHARDS = 10_000
_ORDINAL = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9.-]*-)?([0-9]{1,5})\Z")
#: ASCII digits only: ``str.isdigit`` also takes ``²`` and ``٣``, which int() refuses
#: or reads, and a number of thousands of digits that int() refuses.
_COUNT = re.compile(r"[0-9]{1,9}\Z")


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, env: str) -> bool:
        return owner(env, self.count) == self.index

    def select(self, envs: Iterable[str]) -> list[str]:
        """The environments of ``envs`` this shard serves (in their order)."""
        return [env for env in envs if self.owns(env)]


def _weight(index: int, env: str) -> bytes:
    return hashlib.sha256(f"{index}/{env}".encode()).digest()


def owner(env: str, count: int) -> int:
    """The shard (0..count-1) that serves environment ``env``."""
    return max(range(count), key=lambda index: _weight(index, env))


def parse_shard(text: str) -> Shard:
    """``I/N``: shard I (from 0) of N. I may be a StatefulSet pod's name ending in its
    ordinal (``reconcile-watch-2/3`` is shard 2 of 3)."""
    index_text, slash, count_text = text.strip().rpartition("/")
    found = _ORDINAL.match(index_text)
    if not slash or found is None or _COUNT.match(count_text) is None:
        raise ReconcileError(
            f"--shard {text!r}: expected I/N (0/2, 1/2) or POD-NAME-ORDINAL/N (reconcile-watch-1/2)"
        )
    index, count = int(found.group(1)), int(count_text)
    if not 1 <= count <= MAX_SHARDS:
        raise ReconcileError(f"--shard {text!r}: N must be between 1 and {MAX_SHARDS}")
    if index >= count:
        raise ReconcileError(f"--shard {text!r}: the index counts from 0 and must be below {count}")
    return Shard(index, count)
