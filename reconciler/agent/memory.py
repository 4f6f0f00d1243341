"""What one environment's agent keeps between cycles: the specs a full plan validated
(while their files are unchanged), what the last plans read of each stream (so a
targeted plan's resources replace only their streams', and a deleted stream's loss is
told until it is back), and, for the process, when to collect what the runs froze.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from reconciler.agent.status import Lost, Resources, ResourceStatus
from reconciler.execution.requests import PlanRequest
from reconciler.execution.standing import Planned, SpecIndex, index_of
from reconciler.model.state import StreamState
from reconciler.specs.spec import Spec

#: Specs validated once are reused while their files are unchanged, and validated again
#: at least this often (seconds) all the same.
REVALIDATE_SECONDS = 600.0
#: A full collection (over what runs froze) after a full cycle once this many seconds
#: passed since the last one, and every so many full cycles.
GC_SECONDS = 60.0
GC_CYCLES = 20


Files = tuple[tuple[str, int, int], ...]


def fingerprint(request: PlanRequest, named: tuple[Path, ...] = ()) -> Files | None:
    """Every spec and overlay file of ``request`` (and the files specs ``named``: a
    KeyValue entry's ``value_file``) with its size and modification time (None when one
    cannot be read): the same value means the same files, so the specs validated once
    serve the next plans (up to :data:`REVALIDATE_SECONDS`)."""
    found: list[tuple[str, int, int]] = []
    try:
        for root in (*request.paths, *request.overlays, *named):
            files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
            for path in files:
                stat = path.stat()
                found.append((str(path), stat.st_size, stat.st_mtime_ns))
    except OSError:
        return None
    return tuple(found)


class SpecCache:
    """The specs the last full plan validated, while their files are unchanged and the
    request is the same (a project file read again may name another lifecycle, other
    overlays or policies)."""

    def __init__(self) -> None:
        self._specs: dict[tuple[str | None, Files], tuple[Spec, ...]] = {}
        self._request: PlanRequest | None = None
        self._named: tuple[Path, ...] = ()  # value files the specs read
        self._validated_at = -REVALIDATE_SECONDS
        #: the kept specs by stream (``standing.index_of``): a targeted plan's share
        self.index: SpecIndex = {}

    def get(
        self, request: PlanRequest, commit: str | None, *, targeted: bool
    ) -> tuple[Spec, ...] | None:
        """The specs validated before for these files (a targeted plan takes them however
        old), or None: validate them."""
        if request != self._request:
            return None
        files = fingerprint(request, self._named)
        fresh = time.monotonic() - self._validated_at < REVALIDATE_SECONDS
        return self._specs.get((commit, files)) if files and (fresh or targeted) else None

    def keep(self, request: PlanRequest, commit: str | None, specs: tuple[Spec, ...]) -> None:
        self._named = tuple(Path(s.value_file) for s in specs if s.value_file)
        self._request = request
        files = fingerprint(request, self._named)
        self._specs = {(commit, files): specs} if files else {}
        self.index = index_of(specs) if files else {}
        self._validated_at = time.monotonic()


class Collector:
    """What the runs froze, collected now and then (``fewer_collections``: a cycle among
    frozen objects is never collected otherwise); one per process, every watch's cycles
    counted together.

    A collection over everything frozen walks the whole heap (0.3 to 1 s at 101,000
    resources): it runs only after a full cycle, which does work in proportion to the
    account anyway, never after a targeted one (an advisory's heal waits for nothing).
    A targeted cycle's own garbage is collected before it is frozen (:meth:`young`: the
    objects the cycle made and left alive, a few thousand)."""

    def __init__(self) -> None:
        self.full_cycles = 0
        self._at = time.monotonic()

    def young(self, *, full: bool) -> None:
        """Inside the cycle, before its survivors are frozen: a targeted cycle's reference
        cycles collected (the youngest generation holds only what the cycle made)."""
        if not full:
            gc.collect(0)

    def after_cycle(self, *, full: bool = True) -> None:
        if not full:
            return
        self.full_cycles += 1
        if self.full_cycles % GC_CYCLES == 1 or time.monotonic() - self._at > GC_SECONDS:
            gc.unfreeze()
            gc.collect()
            self._at = time.monotonic()


class Streams:
    """What the last plans read of each stream, and what deleted streams held."""

    def __init__(self) -> None:
        self.read: Mapping[str, StreamState] = {}
        self.lost: dict[str, Lost] = {}

    def full(self, found: list[ResourceStatus], planned: Planned) -> Resources:
        """A full plan's resources: they replace everything known."""
        self.read = planned.live.stream_state
        return Resources.of(self._with_lost(r) for r in found)

    def merged(
        self,
        last: Resources,
        found: list[ResourceStatus],
        scoped: frozenset[str],
        planned: Planned,
    ) -> Resources:
        """A targeted plan's resources in place of those streams' in the last full
        list (and their states in place of theirs): work in proportion to those streams."""
        streams = {k: v for k, v in self.read.items() if k not in scoped}
        self.read = {**streams, **planned.live.stream_state}
        return last.replaced(scoped, [self._with_lost(r) for r in found])

    def _with_lost(self, resource: ResourceStatus) -> ResourceStatus:
        """A deleted stream's loss is remembered until it is back in sync."""
        stream = resource.ref.stream_name
        if resource.lost is not None:
            self.lost[stream] = resource.lost
        elif resource.state in ("in_sync", "unmanaged"):
            self.lost.pop(stream, None)
        elif not resource.ref.is_child and stream in self.lost:
            return replace(resource, lost=self.lost[stream])
        return resource
