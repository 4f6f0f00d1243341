"""Standby pairs read on both sides: each stream's info, the origin's consumers' ack
floors, the promoted side's consumers; each pair's health as plan and drift show it
(docs/dr.md). Reads only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.errors import NotFound, ReconcileError
from reconciler.execution.environments import environment_target
from reconciler.jetstream import ConnectionOptions, JetStreamClient, open_client
from reconciler.model.standby import (
    PairHealth,
    fence_subject,
    is_fenced,
    left_paused,
    pair_health,
)
from reconciler.model.timestamps import rfc3339
from reconciler.model.values import printable
from reconciler.planning.standby import Pair
from reconciler.specs.project import Project
from reconciler.specs.spec import Spec
from reconciler.specs.standby import Standby

__all__ = [
    "PairState",
    "SidedHealth",
    "health_line",
    "loss_line",
    "pair_state",
    "pair_states",
    "pairs_health",
]


@dataclass(frozen=True)
class PairState:
    """What a pair is now, read on both sides, and what the failover will do to it."""

    pair: Pair
    health: PairHealth
    origin_fenced: bool
    promoted: bool  # the standby is no mirror any more
    standby_exists: bool
    consumers_missing: tuple[str, ...]
    starts: Mapping[str, int | None]  # consumer -> its start on the promoted side

    @property
    def name(self) -> str:
        return self.pair.name

    @property
    def subjects(self) -> list[str]:
        return list(self.pair.stream.config.get("subjects") or [])

    @property
    def done(self) -> bool:
        return self.promoted and not self.consumers_missing and self.origin_fenced

    def actions(self, *, unplanned: bool, rollback: bool) -> list[str]:
        """What a failover (or its rollback) does to this pair, in order."""
        subjects = ", ".join(self.subjects)
        if rollback:
            if self.promoted:
                return []
            return ["give the origin its subjects back"] if self.origin_fenced else []
        steps: list[str] = []
        if not self.origin_fenced and not unplanned:
            steps.append(f"fence the origin: subjects {subjects} -> {fence_subject(self.name)}")
        if self.done:
            return steps
        if not self.promoted:
            if not unplanned:
                steps.append("wait until the mirror's last sequence is the origin's")
            steps.append(f"promote the mirror: drop `mirror`, subjects {subjects}")
        for name in self.consumers_missing:
            start = self.starts.get(name)
            at = "the stream's first message" if start is None else f"sequence {start}"
            steps.append(f"create consumer {name} from {at}")
        if steps:
            steps.append("verify: last sequences, message counts, a probe answered")
        return steps


def health_line(health: PairHealth) -> str:
    lag = "unknown" if health.lag is None else str(health.lag)
    seen = "never" if health.active_seconds is None else f"{health.active_seconds:.1f}s ago"
    origin = "unread" if health.origin_last_seq is None else str(health.origin_last_seq)
    mirror = "unread" if health.mirror_last_seq is None else str(health.mirror_last_seq)
    verdict = "healthy" if health.healthy else "NOT healthy: " + "; ".join(health.problems)
    return f"last seq origin {origin}, mirror {mirror}, lag {lag}, last contact {seen}: {verdict}"


def loss_line(health: PairHealth) -> str:
    seen = (
        "never"
        if health.active_seconds is None
        else f"{health.active_seconds:.1f}s before {rfc3339(time.time())}"
    )
    return (
        f"the mirror holds up to sequence {health.mirror_last_seq}, its last contact with "
        f"the origin was {seen} (it then reported lag {health.reported_lag}); every write "
        "the origin acknowledged after that is not on the standby"
    )


# --- reading both sides -------------------------------------------------------------------


async def _info(client: JetStreamClient | None, stream: str) -> dict[str, Any] | None:
    if client is None:
        return None
    try:
        return await client.stream_info(stream)
    except NotFound:
        return None


async def _ack_floor(client: JetStreamClient | None, stream: str, name: str) -> int | None:
    """The origin consumer's ack floor (stream sequence); None when it cannot be read."""
    if client is None:
        return None
    try:
        info = await client.consumer_info(stream, name)
    except NotFound:
        return None
    return int((info.get("ack_floor") or {}).get("stream_seq", 0))


async def _paused(client: JetStreamClient, stream: str, name: str) -> str:
    """``name`` when an interrupted failover left that consumer paused (it creates it
    paused, then moves and resumes it), else empty."""
    try:
        info = await client.consumer_info(stream, name)
    except NotFound:
        return ""
    return name if left_paused(info) else ""


async def _consumer_names(client: JetStreamClient, stream: str) -> set[str]:
    try:
        return set(await client.consumer_names(stream))
    except NotFound:
        return set()


async def pair_state(
    pair: Pair, origin: JetStreamClient | None, standby: JetStreamClient, unread: str = ""
) -> PairState:
    """One pair read on both sides (``origin`` None: it could not be reached)."""
    origin_info, mirror_info = await asyncio.gather(
        _info(origin, pair.name), _info(standby, pair.name)
    )
    health = pair_health(pair.name, origin_info, mirror_info, unread=unread)
    origin_config = (origin_info or {}).get("config") or {}
    mirror_config = (mirror_info or {}).get("config") or {}
    promoted = mirror_info is not None and not mirror_config.get("mirror")
    present = await _consumer_names(standby, pair.name) if mirror_info else set()
    paused = await asyncio.gather(
        *(_paused(standby, pair.name, c.name) for c in pair.consumers if c.name in present)
    )
    left = {name for name in paused if name}  # created paused by a run that was stopped
    missing = tuple(c.name for c in pair.consumers if c.name not in present or c.name in left)
    floors = await asyncio.gather(*(_ack_floor(origin, pair.name, n) for n in missing))
    starts = {name: None if f is None else f + 1 for name, f in zip(missing, floors, strict=True)}
    return PairState(
        pair=pair,
        health=health,
        origin_fenced=origin_info is not None and is_fenced(origin_config),
        promoted=promoted,
        standby_exists=mirror_info is not None,
        consumers_missing=missing,
        starts=starts,
    )


async def pair_states(
    selected: Sequence[Pair], origin: JetStreamClient | None, standby: JetStreamClient, unread: str
) -> list[PairState]:
    limit = asyncio.Semaphore(32)

    async def one(pair: Pair) -> PairState:
        async with limit:
            return await pair_state(pair, origin, standby, unread)

    return list(await asyncio.gather(*(one(pair) for pair in selected)))


# --- each pair's health, for plan and drift ---------------------------------------------


@dataclass(frozen=True)
class SidedHealth:
    """A pair's health with the environments on each side."""

    primary: str
    standby: str
    health: PairHealth

    def line(self) -> str:
        pair = f"standby {self.health.stream} ({self.primary} -> {self.standby})"
        return printable(f"{pair}: {health_line(self.health)}")


async def pairs_health(
    project: Project,
    environment: str,
    specs: Sequence[Spec],
    base: ConnectionOptions,
    owner: str,
) -> list[SidedHealth]:
    """The health of every standby pair of ``specs`` that ``environment`` is a side of
    (the agent passes the specs it planned: no second validation)."""
    found = [
        (spec, spec.standby)
        for spec in specs
        if spec.kind == "Stream"
        and spec.standby is not None
        and environment in (spec.standby.primary, spec.standby.environment)
    ]
    out: list[SidedHealth] = []
    for (primary, standby), group in _by_sides(found).items():
        origin_info, mirror_info, unread = await _both_sides(
            project, (primary, standby), [s.name for s in group], base, owner
        )
        for spec in group:
            health = pair_health(
                spec.name, origin_info.get(spec.name), mirror_info.get(spec.name), unread=unread
            )
            out.append(SidedHealth(primary, standby, health))
    return out


def _by_sides(found: Sequence[tuple[Spec, Standby]]) -> dict[tuple[str, str], list[Spec]]:
    groups: dict[tuple[str, str], list[Spec]] = {}
    for spec, standby in found:
        groups.setdefault((standby.primary, standby.environment), []).append(spec)
    return groups


async def _both_sides(
    project: Project,
    sides: tuple[str, str],
    streams: Sequence[str],
    base: ConnectionOptions,
    owner: str,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], str]:
    """Each side's STREAM.INFO of ``streams`` (name -> info; a side that could not be
    read is empty) and why a side could not be read."""
    read: list[dict[str, dict[str, Any]]] = []
    problems: list[str] = []
    for env in sides:
        try:
            options = environment_target(project, env, base, owner).options
            async with open_client(options) as client:
                infos = await asyncio.gather(*(_info(client, name) for name in streams))
            read.append({n: i for n, i in zip(streams, infos, strict=True) if i is not None})
        except ReconcileError as err:
            problems.append(f"{env} could not be read: {err}")
            read.append({})
    return read[0], read[1], "; ".join(problems)
