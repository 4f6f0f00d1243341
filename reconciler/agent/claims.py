"""A seat claimed on the server, so agents of other processes (other shards, a pod
started on the wrong shard) see it: :class:`~reconciler.agent.seats.Seats` compares the
seats of one process only.

Each environment healed, once seated (:func:`~reconciler.agent.seats.seat_of`), writes
a claim in the apply lock's bucket (``RECONCILE_LOCKS``, in the account the seat is in)
under the key ``seat-<digest>``: a digest of the seat (the account, its domain) and the
project's owner. Not the user: two users of one account write the same streams. Not
its lineage: the bucket is the account's own, and a
lineage deleted (to make saved plans stale) and written again by the next agent to seat
itself must not give that agent a key no claim is under. The claim holds the environment's name and
when it was renewed and goes stale (``expires_at``: :func:`ttl_for` and twice the last
cycle's duration from the renewal, by the writer's clock, as the lock's lease: the
hosts' clocks are assumed to agree within seconds). Then:

- no claim, a stale one, or one of the same environment name (another agent of the same
  environment: an old pod still stopping; the apply lock keeps their heals apart): the
  claim is written (a KV create where none is, else an update at the revision read:
  of two agents starting at once, one wins; a fresh one of the same environment is
  left as it is, and renewed before the first cycle: it may be a stopped run's, about
  to go stale) and the environment heals;
- a fresh claim of another environment: the environment is refused before its first
  plan (:func:`~reconciler.agent.seats.claimed_error`), tried again at its next
  connection, so it takes the seat once the other's agent stopped renewing;
- renewed before each cycle (one KV write: an update at our revision; read again only
  when someone else wrote the key, and not written when that was a fresh claim of the
  same environment: two agents of it share one claim). A renewal not written (the
  bucket deleted, a permission taken away, no answer in time) is never a blip the cycle
  goes on after: the claim may be gone, and another shard take the seat meanwhile. It is
  taken again, as at a connection (said once in the log), before the cycle, which fails
  when it cannot be (the connection opened again asks the seat again);
- deleted (at our revision) when the environment writes nothing there from now on (an
  edit or a commit putting it in ``lifecycle: {mode: observe}``, a commit removing it,
  connection settings changed: a connection opened again takes the seat it says), and
  taken again, as at a connection, when it writes again; an edit of the project's
  owner (the key's) deletes it and takes the new key's
  (:meth:`~reconciler.agent.cycles.Watch._keep_seat`);
- deleted so too when the agent stops (SIGTERM, SIGINT: :meth:`SeatClaim.stopping`),
  waiting :data:`STOP_WITHIN` seconds at most (then left to go stale, said in the log),
  so another environment of that seat (an environment renamed, a shard re-assigned)
  takes it at once; left to go stale when another agent of the same environment wrote
  it lately (an old pod stopping beside its successor, which goes on renewing it).

A claim read back may be forged by anyone who may write the bucket: it can only refuse
a heal (a name never printed unescaped; an unreadable claim counts as another's), never
make one. A server that does not say the seat (no account told), or a bucket
the user may not write, leaves the cross-process check out, said once in the log; one
that does not answer now (:func:`~reconciler.agent.seats.unanswered`) fails the
connection, and the seat is asked again at the next.
``--once`` reads the claim and writes none (it heals once, it does not hold the seat),
and deletes none.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from reconciler.agent.logs import Log
from reconciler.agent.seats import claimed_error, unanswered
from reconciler.errors import NotFound, ReconcileError, ServerError, SpecError, brief
from reconciler.execution.lock import (
    LockSettings,
    LockStore,
    prepare,
    replicas_for,
    seconds_from_env,
)
from reconciler.identity import LOCK_BUCKET
from reconciler.jetstream.transport import WRONG_LAST_SEQUENCE
from reconciler.model.server_identity import Seat
from reconciler.model.timestamps import rfc3339
from reconciler.specs.project import Environment

#: A claim not renewed for this many intervals is stale ...
TTL_INTERVALS = 3
#: ... and never sooner than this (seconds): a slow cycle must not lose its seat.
TTL_FLOOR = 60.0
#: Seconds a claim lasts, overriding the rule above (tests: a short one).
TTL_VARIABLE = "RECONCILE_SEAT_CLAIM_TTL"
#: Seconds a stopping agent waits for its claim's delete: a server that does not answer
#: never holds up the stop (Kubernetes' and systemd's grace periods); the claim is then
#: left to go stale.
STOP_WITHIN = 2.0
#: How a claimed seat is shared, as the refusal says it.
CLAIMED = "another agent heals it in that seat, as its claim on the server says"


class Contended(ReconcileError):
    """The claim changed at each of several reads (agents racing): tried again later."""


def ttl_for(interval: float, text: str | None = None) -> float:
    """How long a claim lasts (seconds): ``RECONCILE_SEAT_CLAIM_TTL`` when set (a number
    above 0, else an error), else ``TTL_INTERVALS`` intervals, at least ``TTL_FLOOR``."""
    text = os.environ.get(TTL_VARIABLE, "") if text is None else text
    return seconds_from_env(TTL_VARIABLE, text, max(TTL_INTERVALS * interval, TTL_FLOOR))


def claim_key(found: Seat, owner: str) -> str | None:
    """The key of ``found``'s claim for the project ``owner``; None when the server did
    not say the seat (its account unknown). The claim is kept in the account's own
    bucket, so the key names no lineage: one written again (the old one deleted) is the
    same seat; nor the user: another user of the account writes the same streams."""
    server = found.server
    if server.account is None:
        return None
    facts = [owner, server.account, server.domain]
    return "seat-" + hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Claim:
    """A claim as stored: the environment's name, renewed at, stale from."""

    env: str
    renewed_at: float
    expires_at: float

    def stale(self, now: float) -> bool:
        return now >= self.expires_at

    def to_bytes(self) -> bytes:
        body = {
            "env": self.env,
            "renewed_at": rfc3339(self.renewed_at),
            "expires_at": rfc3339(self.expires_at),
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Claim:
        """A stored claim; an unreadable one is another's that never goes stale (a
        forged claim refuses a heal, never makes one)."""
        try:
            body = json.loads(data)
            return cls(
                str(body["env"]),
                _parse_time(body["renewed_at"]),
                _parse_time(body["expires_at"]),
            )
        except (ValueError, KeyError, TypeError):
            return cls("<unreadable claim>", 0.0, math.inf)


def _parse_time(text: object) -> float:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


class SeatClaim:
    """One environment's claim of its seat (one :class:`~reconciler.agent.cycles.Watch`'s)."""

    def __init__(self, log: Log, interval: float) -> None:
        self.log = log
        self.ttl = ttl_for(interval)
        self.settings = LockSettings(bucket=LOCK_BUCKET)
        self.env: Environment | None = None
        self.peers: Mapping[str, Environment] = {}
        self.owner: str | None = None  # the project's owner the seat was taken for (its key)
        self.key: str | None = None  # held on this connection (renewed each cycle)
        self.revision = 0
        self.fresh = False  # just written (by take): the first cycle's renewal skipped
        self._said: str | None = None  # the last reason the check is left out, logged
        self.slack = 0.0  # added to the claim's life: twice the last cycle's duration
        #: when a fresh claim of this environment was last found written by another
        #: agent (monotonic): one that renews it beside us, left to it at a stop
        self.shared_at = -math.inf

    @property
    def lasting(self) -> float:
        """How long a claim written now lasts (seconds)."""
        return self.ttl + self.slack

    async def take(
        self,
        client: LockStore,
        env: Environment,
        found: Seat | None,
        owner: str,
        *,
        peers: Mapping[str, Environment],
        write: bool,
    ) -> None:
        """Claim ``found`` for ``env`` (only read it unless ``write``); the refusal
        (:class:`~reconciler.errors.SpecError`, at ``env``'s line, and the other's when
        one of ``peers``) when another environment holds it."""
        self.key, self.env, self.peers, self.owner = None, env, peers, owner
        key = claim_key(found, owner) if found is not None else None
        if found is not None:  # the bucket made as the lock makes it: 3 replicas clustered
            clustered = found.server.cluster is not None
            self.settings = replace(self.settings, replicas=replicas_for(clustered))
        if key is None:
            self._left_out("the server does not say which account it is")
            return
        await self._take(client, env, key, write=write)

    async def _take(self, client: LockStore, env: Environment, key: str, *, write: bool) -> None:
        """:meth:`take` of ``key``: at a connection, and after a renewal not written."""
        try:
            revision, wrote = await self._claim(client, env, key, write=write)
        except (SpecError, Contended):
            raise  # refused, or tried again at the next connection: never healed unchecked
        except ReconcileError as err:  # not allowed to write the bucket, no JetStream
            if unanswered(err):
                raise  # no answer now (a leader elected): asked again at the next connection
            self._left_out(f"its claim cannot be read or written here ({brief(str(err))})")
            return
        self._said = None
        if write:  # one of the same environment taken as it is: renewed before the
            # first cycle (it may be an old run's, about to go stale)
            self.key, self.revision, self.fresh = key, revision, wrote

    async def renew(self, client: LockStore, *, slow: float = 0.0) -> None:
        """Before a cycle: the claim held renewed (at our revision, one write), refused
        when another environment has taken the seat meanwhile; one that could not be
        written is taken again as at a connection (raising when it cannot be: the cycle
        heals nothing unclaimed). ``slow``: how long the
        last cycle took (seconds), added twice to the claim's life (a huge project's
        plans must not let it go stale between two renewals)."""
        self.slack = 2 * max(slow, 0.0)
        if self.key is None or self.env is None or self.fresh:
            self.fresh = False  # written as the connection took it: renewed from the next
            return
        key, env, now = self.key, self.env, time.time()
        mine = Claim(env.name, now, now + self.lasting)
        try:
            self.revision = await client.kv_update(
                self.settings.bucket, key, mine.to_bytes(), self.revision
            )
            return
        except ReconcileError as err:
            if isinstance(err, ServerError) and err.err_code == WRONG_LAST_SEQUENCE:
                self.key = None  # someone else wrote the key: read it (refused if another's)
                self.revision, wrote = await self._claim(client, env, key, write=True)
                self.key = key
                if not wrote:  # another agent of this environment renews it: ours too, so
                    # that agent sees it shared (its stop leaves the claim to us)
                    with contextlib.suppress(ReconcileError):
                        self.revision = await client.kv_update(
                            self.settings.bucket, key, mine.to_bytes(), self.revision
                        )
                return
            failed = brief(str(err))
        # not written (the bucket deleted, the user's permission taken away, no answer in
        # time): the claim may be gone, and another shard may take the seat meanwhile; it
        # is taken again as at a connection, or the cycle does not run (an error: the
        # connection is opened again and the seat asked then)
        self.key = None
        self.log.event(
            "notice", f"the seat's claim could not be renewed ({failed}): claiming it again"
        )
        await self._take(client, env, key, write=True)
        self.fresh = False  # written now, before this cycle: renewed from the next

    async def release(self, client: LockStore, *, within: float | None = None) -> None:
        """The environment writes nothing from now on (put in ``lifecycle: {mode:
        observe}``, removed by a commit, the agent stopping): the claim held is deleted,
        at our revision (one written by another agent meanwhile is left), so another
        environment takes the seat at its next try. ``within``: seconds the delete may
        take (:meth:`stopping`). One not deleted (in time, or at all) is left to go
        stale, said in the log."""
        key, revision = self.key, self.revision
        self.key, self.fresh = None, False
        if key is None:
            return
        try:
            delete = client.kv_delete(self.settings.bucket, key, revision=revision)
            await asyncio.wait_for(delete, within)
            return
        except TimeoutError:
            failed = f"no answer within {within:g} s"
        except ReconcileError as err:
            if isinstance(err, ServerError) and err.err_code == WRONG_LAST_SEQUENCE:
                return  # written by another agent since: its claim, left as it is
            failed = brief(str(err))
        self.log.event(
            "notice",
            f"the seat's claim could not be deleted ({failed}): it goes stale "
            f"{self.lasting:g} s after its last renewal",
        )

    async def stopping(self, client: LockStore) -> None:
        """The agent stops (SIGTERM, SIGINT): the claim held is released within
        :data:`STOP_WITHIN` seconds, so an environment refused this seat (another name
        for it after a rename, another shard's after a re-assignment) takes it at its
        next try, not three intervals later. Not when another agent of this environment
        wrote it lately (an old pod stopping beside its successor: they share it, and
        the successor goes on renewing it): it is left to that agent, said in the log."""
        if self.key is not None and time.monotonic() - self.shared_at < self.ttl:
            self.key, self.fresh = None, False
            self.log.event(
                "notice",
                "the seat's claim is left to go stale: another agent of this environment "
                "(or its last run) wrote it lately, and may go on renewing it",
            )
            return
        await self.release(client, within=STOP_WITHIN)

    async def _claim(
        self, client: LockStore, env: Environment, key: str, *, write: bool
    ) -> tuple[int, bool]:
        """The claim's revision (0 when only read) and whether it was written now (not:
        a fresh one of the same environment, left as it is), or the refusal."""
        bucket = self.settings.bucket
        for _ in range(5):
            try:
                entry = await client.kv_entry(bucket, key)
            except NotFound:
                if not write:
                    return 0, False
                await prepare(client, replace(self.settings, key=key))
                entry = None
            now = time.time()
            if entry is not None and entry.operation == "PUT":
                theirs = Claim.from_bytes(entry.value)
                if theirs.env != env.name and not theirs.stale(now):
                    raise claimed_error(env, theirs.env, f"{CLAIMED} ({bucket}/{key})", self.peers)
                if theirs.env == env.name and not theirs.stale(now):
                    self.shared_at = time.monotonic()  # not deleted at a stop for a while
                    return entry.revision, False  # another agent of it renews it: no write
            if not write:
                return 0, False
            value = Claim(env.name, now, now + self.lasting).to_bytes()
            try:
                if entry is None or entry.operation != "PUT":
                    return await client.kv_create(bucket, key, value), True
                return await client.kv_update(bucket, key, value, entry.revision), True
            except ServerError as err:
                if err.err_code != WRONG_LAST_SEQUENCE:
                    raise
                continue  # another agent wrote it meanwhile: read again
        raise Contended(f"the seat claim {bucket}/{key} keeps changing: tried again later")

    def _left_out(self, why: str) -> None:
        """Said once (until it changes): heals go on without the cross-process check."""
        if why != self._said:
            self._said = why
            self.log.event(
                "notice",
                f"seat not claimed on the server: {why}; agents of other processes "
                "(other shards) cannot see this environment's seat",
            )
