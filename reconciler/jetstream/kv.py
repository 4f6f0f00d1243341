"""KeyValue primitives over the JetStream API (the apply lock, KeyValue entries): a
bucket is the stream ``KV_<bucket>``, a key the subject ``$KV.<bucket>.<key>``.

Every write names the stream that must store it (``Nats-Expected-Stream``): a stream
config is anyone's to change, and a ``KV_<bucket>`` moved off its subjects while
another stream took ``$KV.<bucket>.>`` would otherwise store the value (a secret) there
and ack it as written. The server refuses such a write (err_code 10060); nothing is
stored.

:meth:`KeyValueCalls.kv_scan` finds the keys a plan looks at in a bucket that may hold
millions of other keys (an application's sessions, a cache): it reads their last
messages in batches (ADR-31's batched direct get, ``multi_last``, server 2.11+), looks
only at their headers, and keeps only what carries the tool's marker."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, Callable, Collection, Mapping
from dataclasses import dataclass, field

import orjson

from reconciler.errors import NotFound, PermissionDenied, ServerError
from reconciler.identity import EXPECTED_REVISION, EXPECTED_STREAM, kv_subject, stream_of
from reconciler.jetstream.transport import (
    NO_MESSAGE,
    WRONG_LAST_SEQUENCE,
    Transport,
    header_lines,
    parse_headers,
)

#: The most keys one batched read asks for: a server answers a ``multi_last`` of at most
#: 1,024 subjects (more: ``413 Too Many Results``, and the batch is asked in halves).
BATCH_KEYS = 1024
#: The most bytes of messages one batched read's reply carries (``max_bytes``: the server
#: stops after the message that reaches it; the keys it did not answer are asked again).
BATCH_BYTES = 1 << 20
#: The most bytes of subjects one batched read sends (within the server's max_payload).
BATCH_REQUEST = 256 * 1024
#: Batched reads in flight at once (one parses replies while the server reads the next).
BATCHES_AT_ONCE = 2
#: Requests in flight when keys are read one by one.
READS_AT_ONCE = 32
#: The most deleted sequences a bucket's stream may have for a scan to ask which they are
#: (STREAM.INFO ``deleted_details``, a number each in one reply): with more, a key whose
#: last revision may be one of them is read from the leader instead.
DELETED_DETAILS = 100_000
#: Statuses a batched read is refused with where the server or the bucket cannot answer
#: it: ``408`` (a server before 2.11 knows no ``multi_last``: "Empty Request"), ``503``
#: (no responders: the stream takes no direct gets).
_REFUSED = frozenset({"408", "503"})
#: The lines the server adds to each message of a batched reply, after the message's own
#: headers (so the last line of each name is the server's).
_SEQUENCE = b"\r\nNats-Sequence:"
_SUBJECT = b"\r\nNats-Subject:"
_PENDING = b"\r\nNats-Num-Pending:"
_UPTO = b"\r\nNats-UpTo-Sequence:"
#: The lines a server appends to each message of a batched reply, in order.
_SERVER_LINES = (
    "Nats-Stream",
    "Nats-Subject",
    "Nats-Sequence",
    "Nats-Time-Stamp",
    "Nats-Num-Pending",
    "Nats-Last-Sequence",
)


async def between_batches(bucket: str) -> None:
    """Runs after each batched read of ``bucket``, before the next is asked: nothing. A
    seam for the tests that change a bucket while it is read."""


#: What a marker the server writes itself did to its key, by its ``Nats-Marker-Reason``
#: (ADR-48, as nats.go's ``jetstream/kv.go`` reads it): the last message of a key removed
#: by ``max_age`` or a per-message TTL on a bucket with ``limit_marker_ttl``
#: (``subject_delete_marker_ttl``) is such a marker, with no ``KV-Operation``.
MARKER_REASONS: Mapping[str, str] = {"MaxAge": "PURGE", "Purge": "PURGE", "Remove": "DEL"}


def operation_of(headers: Mapping[str, str]) -> str:
    """What a key's message did to it (PUT, DEL or PURGE), read from its headers as the
    official clients read them: ``KV-Operation`` when it has one (any value but DEL and
    PURGE a PUT), else the reason of a marker the server wrote (:data:`MARKER_REASONS`),
    else a PUT. The one reading, for a message read whole or in a batch."""
    said = headers.get("KV-Operation")
    if said:
        return said if said in ("DEL", "PURGE") else "PUT"
    return MARKER_REASONS.get(headers.get("Nats-Marker-Reason", ""), "PUT")


@dataclass(frozen=True)
class KvEntry:
    """The last message of a key in a KeyValue bucket."""

    key: str
    value: bytes
    revision: int
    operation: str = "PUT"  # PUT, DEL or PURGE
    headers: Mapping[str, str] = field(default_factory=dict)


class KeyValueCalls(Transport):
    """Read, write and list the keys of a KeyValue bucket."""

    async def kv_entry(self, bucket: str, key: str) -> KvEntry | None:
        """The last message of ``key``, delete markers included; None if never written."""
        body = {"last_by_subj": kv_subject(bucket, key)}
        try:
            reply = await self.request(f"STREAM.MSG.GET.{stream_of('KeyValue', bucket)}", body)
        except NotFound:
            raise
        except ServerError as err:
            if err.err_code == NO_MESSAGE:
                return None
            raise
        message = reply["message"]
        headers = parse_headers(message.get("hdrs"))
        return KvEntry(
            key=key,
            value=base64.b64decode(message.get("data") or ""),
            revision=int(message["seq"]),
            operation=operation_of(headers),
            headers=headers,
        )

    async def kv_get(self, bucket: str, key: str) -> KvEntry | None:
        """The current value of ``key``; None when missing or deleted."""
        entry = await self.kv_entry(bucket, key)
        return entry if entry is not None and entry.operation == "PUT" else None

    async def _kv_put(
        self,
        bucket: str,
        key: str,
        value: bytes,
        *,
        expect: int | None,
        operation: str = "",
        extra: Mapping[str, str] | None = None,
    ) -> int:
        headers = {**(extra or {}), EXPECTED_STREAM: stream_of("KeyValue", bucket)}
        if expect is not None:
            headers[EXPECTED_REVISION] = str(expect)
        if operation:
            headers["KV-Operation"] = operation
        ack = await self.publish(kv_subject(bucket, key), value, headers=headers or None)
        return int(ack["seq"])

    async def kv_create(
        self, bucket: str, key: str, value: bytes, *, headers: Mapping[str, str] | None = None
    ) -> int:
        """Write ``key`` only if it has no value; the new revision.

        Fails with ``ServerError`` err_code 10071 when the key holds a value.
        """
        try:
            return await self._kv_put(bucket, key, value, expect=0, extra=headers)
        except ServerError as err:
            if err.err_code != WRONG_LAST_SEQUENCE:
                raise
            entry = await self.kv_entry(bucket, key)
            if entry is None or entry.operation == "PUT":
                raise
            return await self._kv_put(bucket, key, value, expect=entry.revision, extra=headers)

    async def kv_update(
        self,
        bucket: str,
        key: str,
        value: bytes,
        revision: int,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> int:
        """Write ``key`` only if its last revision is ``revision`` (else err_code 10071)."""
        return await self._kv_put(bucket, key, value, expect=revision, extra=headers)

    async def kv_keys(self, bucket: str) -> list[str]:
        """Every key of ``bucket`` with a message (delete markers included), read from
        the stream's subject counts, page by page."""
        keys: set[str] = set()
        async for page in self._kv_pages(bucket):
            keys.update(page.keys)
        return sorted(keys)

    async def _kv_pages(self, bucket: str) -> AsyncGenerator[_Page, None]:
        """The keys of ``bucket`` a page at a time (STREAM.INFO ``subjects_filter``: the
        server's pages of at most 100,000 subjects, in order), each asked once the one
        before was taken: a key may come twice, or not at all, when keys come and go
        while it is listed."""
        prefix = kv_subject(bucket, "")
        offset = 0
        while True:
            body = {"subjects_filter": kv_subject(bucket), "offset": offset}
            info = await self.request(f"STREAM.INFO.{stream_of('KeyValue', bucket)}", body)
            state, config = info.get("state") or {}, info.get("config") or {}
            subjects = state.get("subjects") or {}
            yield _Page(
                [subject.removeprefix(prefix) for subject in subjects],
                config.get("allow_direct") is True,
                _count(state.get("last_seq")),
                _count(state.get("num_deleted")),
            )
            total = int(info.get("total") or 0)
            offset += len(subjects)
            if not subjects or offset >= total:
                return

    async def kv_scan(
        self, buckets: Mapping[str, Collection[str]], marker: str
    ) -> dict[tuple[str, str], KvEntry]:
        """The last message of each key of ``buckets`` a plan looks at, by (bucket, key):
        each key named (``buckets[bucket]``), and each other key of the bucket whose last
        message carries a header named ``marker`` (in any case). Delete markers are
        included; a key with no message (never written, or gone meanwhile) is not.

        The other keys are listed from the stream's subjects a page at a time, and each
        page's keys read before the next page is asked (no bucket's key names are held
        whole): their last messages read in batches (a direct get of up to
        :data:`BATCH_KEYS` subjects, ``multi_last``) whose headers alone are looked at:
        no value of theirs is kept but a marked one's (its header block holds the name).
        The keys named are read in batches too, their messages kept. A key's message
        from a batch is taken only as fresh as the leader's word: from the bucket's own
        stream (not a mirror with ``mirror_direct``), in a reply answered at or after
        the stream's last sequence the listing gave (any replica may answer a direct
        get, up to a tenth behind the leader), for a key the listing held (a purge moves
        no sequence: a replica behind it still holds a message the leader's listing did
        not), and not at a revision the leader deleted (a delete moves none either: a
        key whose last revision may be deleted, :meth:`_Page.doubtful`, has its
        revision checked against the stream's deleted sequences, asked once,
        :meth:`_kv_gone`). A key no page listed that such a reply leaves out has no
        message, nor one a batch of no message (``404``) leaves out; a key the listing
        held, left out, is the leader's to say (removed meanwhile, or a replica that
        lost it: one that lowered the history before a delete it applied after kept
        none of the key's revisions). Every named or marked key the batches did not answer so (a
        reply cut short, behind, or ignored), or whose answer was not taken, is read on
        its own from the leader (STREAM.MSG.GET). Where batches are not answered (a
        server before 2.11, a stream without direct gets, a user who may not use them),
        every key is read on its own, :data:`READS_AT_ONCE` at a time, and only the
        marked ones of the others kept. Requests are reads only (STREAM.INFO,
        DIRECT.GET, MSG.GET)."""
        found: dict[tuple[str, str], KvEntry] = {}
        for bucket in sorted(buckets):
            read = await self._kv_scan_bucket(bucket, set(buckets[bucket]), marker)
            found.update(((bucket, key), entry) for key, entry in sorted(read.items()))
        return found

    async def _kv_scan_bucket(
        self, bucket: str, named: set[str], marker: str
    ) -> dict[str, KvEntry]:
        """:meth:`kv_scan` of one bucket: its keys' last messages found, by key."""
        found: dict[str, KvEntry] = {}
        listed: set[str] = set()  # the keys named that a page listed
        held: dict[str, KvEntry] = {}  # marked keys a batch answered fresh
        doubtful: set[str] = set()  # listed keys whose last revision may be deleted
        batched = self.takes_raw_replies
        last = 0  # the stream's last sequence as its leader said, the latest
        deleted = 0  # its count of deleted sequences, the latest
        async with contextlib.aclosing(self._kv_pages(bucket)) as pages:
            async for page in pages:
                batched = batched and page.direct and not self._no_multi_last
                last, deleted = max(last, page.last), page.deleted
                on_page = {key for key in page.keys if key in named}
                listed.update(on_page)
                others = [key for key in page.keys if key not in named]
                marked: Collection[str] = ()
                if others and batched:
                    scanned = await self._kv_marked(bucket, others, marker, last)
                    if scanned is None:
                        batched = False
                    else:
                        taken, marked, unanswered = scanned
                        held.update(taken)
                        on_page.update(taken)
                        others = sorted(unanswered)
                doubtful.update(page.doubtful(on_page))
                found.update(await self._kv_read(bucket, sorted(marked), others, marker))
        batched = batched and not self._no_multi_last
        asked = doubtful & (held.keys() | (named if batched else set()))
        gone = await self._kv_gone(bucket, deleted) if asked else _none_gone
        alone: set[str] = set()
        for key, entry in held.items():
            if key in doubtful and gone(entry.revision):
                alone.add(key)
            else:
                found[key] = entry
        named_alone: Collection[str] = named
        if named and batched:
            read = await self._kv_named(bucket, sorted(named), listed, last, doubtful, gone)
            if read is not None:
                taken_named, named_alone = read
                found.update((k, entry) for k, entry in taken_named.items() if entry is not None)
        found.update(await self._kv_read(bucket, sorted(alone | set(named_alone)), (), marker))
        return found

    async def _kv_gone(self, bucket: str, deleted: int) -> Callable[[int], bool]:
        """Whether a sequence of ``bucket``'s stream is gone on its leader (deleted, or
        before its first sequence), as STREAM.INFO ``deleted_details`` says; every
        sequence when the stream has more than :data:`DELETED_DETAILS` deleted, or the
        leader lists none of them (then every doubtful key is read from the leader)."""
        if deleted > DELETED_DETAILS:
            return _all_gone
        info = await self.request(
            f"STREAM.INFO.{stream_of('KeyValue', bucket)}", {"deleted_details": True}
        )
        state = info.get("state") or {}
        listed = state.get("deleted")
        if not isinstance(listed, list) or (not listed and _count(state.get("num_deleted"))):
            return _all_gone
        first = _count(state.get("first_seq"))
        gone = {_count(seq) for seq in listed}
        return lambda seq: seq < first or seq in gone

    async def _kv_read(
        self, bucket: str, exact: Collection[str], unsure: Collection[str], marker: str
    ) -> dict[str, KvEntry]:
        """Keys of ``bucket`` read each on its own from the stream's leader,
        :data:`READS_AT_ONCE` at a time: ``exact`` kept whatever they hold, ``unsure``
        kept when marked (a value unmarked is dropped as soon as it is read)."""
        limit = asyncio.Semaphore(READS_AT_ONCE)
        wanted = marker.casefold()

        async def read(key: str, keep: bool) -> KvEntry | None:
            async with limit:
                entry = await self.kv_entry(bucket, key)
            if entry is None or keep or any(n.casefold() == wanted for n in entry.headers):
                return entry
            return None

        asked = [(key, True) for key in exact] + [(key, False) for key in unsure]
        read_back = await asyncio.gather(*(read(*one) for one in asked))
        return {
            key: entry
            for (key, _), entry in zip(asked, read_back, strict=True)
            if entry is not None
        }

    #: Set once a server answered a batched read as one that knows no ``multi_last``.
    _no_multi_last = False

    async def _kv_marked(
        self, bucket: str, keys: list[str], marker: str, last: int
    ) -> tuple[dict[str, KvEntry], set[str], set[str]] | None:
        """Batched reads of the last messages of ``keys`` (listed by the leader at
        ``last``, its last sequence): (the keys whose last message carries a header
        ``marker``, read from a reply as fresh as a declared key's must be, by key; the
        other marked keys, to read from the leader; the keys no reply answered); None
        when the first batch was refused (the server or the bucket answers no batched
        direct get, or the user may not ask: :meth:`kv_scan` reads every key on its
        own then)."""
        prefix = kv_subject(bucket, "")
        taken: dict[str, KvEntry] = {}
        marked: set[str] = set()
        unanswered: set[str] = set()

        def settle(answer: _Answer) -> None:
            fresh = _fresh(answer, last)
            for subject in answer.marked:
                entry = answer.found.get(subject)
                if fresh and entry is not None:
                    taken[entry.key] = entry
                else:
                    marked.add(subject.removeprefix(prefix))
            if answer.final:  # answered whole (the rest gone meanwhile), or an error
                unanswered.update(subject.removeprefix(prefix) for subject in answer.left)

        needle = marker.casefold().encode()
        if not await self._kv_batches(bucket, keys, needle, settle):
            return None
        return taken, marked, unanswered

    async def _kv_named(
        self,
        bucket: str,
        keys: list[str],
        listed: set[str],
        last: int,
        doubtful: set[str],
        gone: Callable[[int], bool],
    ) -> tuple[dict[str, KvEntry | None], set[str]] | None:
        """Batched reads of the last messages of ``keys``, kept: (the keys read, None
        for one with no message; the keys to read on their own), as :meth:`kv_scan`
        says; None when the first batch was refused. ``listed``: the keys the listing
        held; ``last``: the stream's last sequence when it was listed (the leader's);
        ``doubtful``: keys whose last revision may have been deleted
        (:meth:`_Page.doubtful`), whose answer is not taken when its revision is
        ``gone`` on the leader."""
        prefix = kv_subject(bucket, "")
        taken: dict[str, KvEntry | None] = {}
        alone: set[str] = set()

        def settle(answer: _Answer) -> None:
            fresh = _fresh(answer, last)
            for subject, entry in answer.found.items():
                # a key the listing did not hold: written since, or purged on the leader
                # and not yet on the replica (a purge moves no sequence): the leader's;
                # so is a revision deleted on the leader (a delete moves none either)
                behind = entry.key in doubtful and gone(entry.revision)
                if fresh and entry.key in listed and not behind:
                    taken[entry.key] = entry
                else:
                    alone.add(subject)
            if not answer.final:
                return
            for subject in answer.left:
                key = subject.removeprefix(prefix)
                # a key the listing held, left out: removed since, or a replica that
                # lost it (its history lowered before a delete it applied after: the
                # leader's kept an older revision), the leader's to say
                none = answer.ended == "404" and not answer.found and not answer.strange
                if key not in listed and ((fresh and answer.ended == "done") or none):
                    taken[key] = None
                else:
                    alone.add(subject)

        if not await self._kv_batches(bucket, keys, None, settle):
            return None
        return taken, {subject.removeprefix(prefix) for subject in alone}

    async def _kv_batches(
        self,
        bucket: str,
        keys: list[str],
        needle: bytes | None,
        settle: Callable[[_Answer], None],
    ) -> bool:
        """Batched reads (``multi_last``) of the last messages of ``keys``, two in
        flight, each answer handed to ``settle``: a batch over the server's 1,024
        subjects (``413``) asked again in halves, one cut short at ``max_bytes`` asked
        again for the rest (the answer then not ``final``). ``needle``: the marker's
        name the header blocks are searched for (None: the messages are kept, as
        :class:`KvEntry`). False when the first batch was refused (the server or the
        bucket answers no batched direct get, or the user may not ask)."""
        stream = stream_of("KeyValue", bucket)
        subject = self.subject(f"DIRECT.GET.{stream}")
        prefix = kv_subject(bucket, "")
        limit = getattr(self.nc, "max_payload", 0) or BATCH_REQUEST
        largest = min(BATCH_REQUEST, limit - 64)  # the body's own fields take the rest
        waiting = deque(_batches([prefix + key for key in keys], largest))
        first = True

        async def ask(subjects: list[str]) -> None:
            nonlocal first
            probe, first = first, False
            try:
                answer = await self._kv_batch(subject, stream, prefix, subjects, needle)
            except PermissionDenied:
                if probe:
                    raise _Refused from None
                answer = _Answer(left=subjects)
            left, ended = answer.left, answer.ended
            if probe and ended in _REFUSED and len(left) == len(subjects):
                if ended == "408":
                    self._no_multi_last = True
                raise _Refused
            if ended == "cut" and len(left) < len(subjects):
                waiting.append(left)  # max_bytes reached: the rest asked again
            elif ended == "413" and len(left) > 1:
                half = len(left) // 2
                waiting.extend((left[:half], left[half:]))
            else:
                answer.final = True
            settle(answer)
            await between_batches(bucket)

        async def worker() -> None:
            while waiting:
                await ask(waiting.popleft())

        try:
            await ask(waiting.popleft())
        except _Refused:
            return False
        workers = [asyncio.ensure_future(worker()) for _ in range(BATCHES_AT_ONCE)]
        try:
            await asyncio.gather(*workers)
        except BaseException:  # the other worker stopped too, its end taken
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise
        return True

    async def _kv_batch(
        self, subject: str, stream: str, prefix: str, subjects: list[str], needle: bytes | None
    ) -> _Answer:
        """One batched read (``multi_last``) of ``subjects``' last messages: those whose
        headers hold ``needle`` (a lower-case header name) are ``marked``, and kept
        (``found``, :func:`_entry`); with no ``needle``, each message is kept. The answer says
        the subjects no message answered, in order, and how the reply ended: ``done``
        (every message sent), ``cut`` (``max_bytes`` reached), the status of an error
        (``408``, ``404``, ``413``...), or ``""`` (a reply no server sends: more
        messages than subjects asked). A message naming a subject not asked, or one
        already answered, or (kept) another stream or no server's lines, is ignored and
        the answer ``strange``. A message kept, the reply is waited for to its end (its
        ``Nats-UpTo-Sequence``, the answering stream's last sequence, says how fresh)."""
        answer = _Answer(left=[])
        left = dict.fromkeys(subjects)
        budget = [len(subjects) + 16]
        keep = needle is None

        def on_reply(block: bytes, data: bytes) -> bool:
            budget[0] -= 1
            if _last_header(block, _SEQUENCE) is not None:  # a message: the server adds it
                named = _last_header(block, _SUBJECT)
                answered = named.decode(errors="replace") if named is not None else ""
                if answered not in left:
                    answer.strange = True
                elif keep:
                    entry = _entry(block, data, stream, answered.removeprefix(prefix))
                    if entry is None:
                        answer.strange = True
                    else:
                        del left[answered]
                        answer.found[answered] = entry
                else:
                    del left[answered]
                    if needle is not None and needle in block.lower():
                        answer.marked.add(answered)
                        entry = _entry(block, data, stream, answered.removeprefix(prefix))
                        if entry is not None:
                            answer.found[answered] = entry
                # a marked message kept: the reply waited for to its end (how fresh)
                return (not left and not keep and not answer.found) or budget[0] <= 0
            code = _status(block)
            if code == "204":
                pending = _last_header(block, _PENDING) or b"0"
                answer.ended = "cut" if pending.strip() not in (b"0", b"") else "done"
                upto = _last_header(block, _UPTO)
                answer.upto = _count(upto.decode(errors="replace")) if upto else None
            else:
                answer.ended = code or ""
            return True

        body = {"multi_last": subjects, "max_bytes": BATCH_BYTES}
        await self.replies(subject, orjson.dumps(body), on_reply)
        if not left and not answer.ended and not keep and not answer.found:
            answer.ended = "done"
        answer.left = list(left)
        return answer

    async def kv_delete(self, bucket: str, key: str, *, revision: int | None = None) -> None:
        """Put a delete marker on ``key`` (only at ``revision`` when given)."""
        await self._kv_put(bucket, key, b"", expect=revision, operation="DEL")


@dataclass
class _Page:
    """A page of a bucket's key listing: its keys, whether the stream takes direct gets,
    its last sequence and its count of deleted sequences (the leader answers
    STREAM.INFO)."""

    keys: list[str]
    direct: bool
    last: int
    deleted: int = 0

    def doubtful(self, keys: Collection[str]) -> set[str]:
        """Those of ``keys`` (listed on this page) whose last revision may have been
        deleted (STREAM.MSG.DELETE) with older ones left: a replica behind the delete
        still answers it, the key still listed and the stream's last sequence unmoved.
        Such a delete leaves the stream a deleted sequence (until its head passes the
        key's older ones): any key of a stream with no deleted sequence is not
        doubtful. Every key of one with some is, whatever it holds: a key holding as
        many messages as the bucket's history may have lost its last revision before
        the history was lowered (``max_msgs_per_subject``, a config update, moves no
        sequence either), as may a key of a bucket of history 1 that had more."""
        return set(keys) if self.deleted else set()


@dataclass
class _Answer:
    """What one batched read answered (:meth:`KeyValueCalls._kv_batch`)."""

    left: list[str]
    ended: str = ""
    final: bool = False  # no part of it asked again
    upto: int | None = None
    strange: bool = False
    marked: set[str] = field(default_factory=set)
    found: dict[str, KvEntry] = field(default_factory=dict)


def _fresh(answer: _Answer, last: int) -> bool:
    """Whether the messages ``answer`` kept are taken as the leader's word: no message
    of it strange, and answered at or after ``last``, the stream's last sequence the
    leader's listing said (any replica answers a direct get, up to a tenth behind)."""
    return not answer.strange and answer.upto is not None and answer.upto >= last


def _none_gone(seq: int) -> bool:
    """No sequence gone (:meth:`KeyValueCalls._kv_gone` not asked: no key doubtful)."""
    return False


def _all_gone(seq: int) -> bool:
    """Every sequence taken for gone: the leader's deleted sequences unknown."""
    return True


class _Refused(Exception):
    """The first batched read of a bucket was refused: read every key on its own."""


def _batches(subjects: list[str], largest: int) -> list[list[str]]:
    """``subjects`` cut into batches of at most :data:`BATCH_KEYS` subjects and
    ``largest`` bytes of them (each subject in one batch, a long one alone)."""
    out: list[list[str]] = []
    batch: list[str] = []
    size = 0
    for subject in subjects:
        cost = len(subject.encode()) + 3  # its quotes and comma
        if batch and (len(batch) >= BATCH_KEYS or size + cost > largest):
            out.append(batch)
            batch, size = [], 0
        batch.append(subject)
        size += cost
    if batch:
        out.append(batch)
    return out


def _last_header(block: bytes, line: bytes) -> bytes | None:
    """The value of the last header ``line`` (``\\r\\nName:``) of a reply's header block;
    None when there is none. The server adds its own lines after a message's own."""
    at = block.rfind(line)
    if at < 0:
        return None
    start = at + len(line)
    end = block.find(b"\r\n", start)
    return block[start : end if end >= 0 else len(block)].strip()


def _entry(block: bytes, data: bytes, stream: str, key: str) -> KvEntry | None:
    """The message of ``key`` a batched reply holds: its own headers are the block's
    lines before the server's (:data:`_SERVER_LINES`, appended), read as
    STREAM.MSG.GET's are; None when the block does not end in the server's lines of
    ``stream`` (a mirror's answer, or no server's)."""
    lines = block.decode(errors="replace").split("\r\n")
    while lines and not lines[-1]:
        lines.pop()
    own, server = lines[1 : -len(_SERVER_LINES)], lines[-len(_SERVER_LINES) :]
    if len(lines) <= len(_SERVER_LINES):
        return None
    said = dict(line.split(":", 1) for line in server if ":" in line)
    if tuple(said) != _SERVER_LINES or said["Nats-Stream"].strip() != stream:
        return None
    revision = said["Nats-Sequence"].strip()
    if not revision.isdigit() or int(revision) <= 0:
        return None
    headers = header_lines(own)
    return KvEntry(key, bytes(data), int(revision), operation_of(headers), headers)


def _count(value: object) -> int:
    """A count the server said (a sequence): 0 when it is none."""
    text = str(value) if isinstance(value, int | str) else ""
    return int(text) if text.isdigit() else 0


def _status(block: bytes) -> str:
    """The status of a reply that is no message (``NATS/1.0 204 EOB``: ``204``); "" when
    it has none."""
    words = block.split(b"\r\n", 1)[0].split(None, 2)
    if len(words) < 2 or not words[1].isdigit():
        return ""
    return words[1].decode()
