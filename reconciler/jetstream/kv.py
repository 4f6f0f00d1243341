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
only at their headers, and reads on its own only what carries the tool's marker."""

from __future__ import annotations

import asyncio
import base64
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import orjson

from reconciler.errors import NotFound, PermissionDenied, ServerError
from reconciler.identity import EXPECTED_REVISION, EXPECTED_STREAM, kv_subject, stream_of
from reconciler.jetstream.transport import (
    NO_MESSAGE,
    WRONG_LAST_SEQUENCE,
    Transport,
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
#: Statuses a batched read is refused with where the server or the bucket cannot answer
#: it: ``408`` (a server before 2.11 knows no ``multi_last``: "Empty Request"), ``503``
#: (no responders: the stream takes no direct gets).
_REFUSED = frozenset({"408", "503"})
#: The lines the server adds to each message of a batched reply, after the message's own
#: headers (so the last line of each name is the server's).
_SEQUENCE = b"\r\nNats-Sequence:"
_SUBJECT = b"\r\nNats-Subject:"
_PENDING = b"\r\nNats-Num-Pending:"


async def between_batches(bucket: str) -> None:
    """Runs after each batched read of ``bucket``, before the next is asked: nothing. A
    seam for the tests that change a bucket while it is read."""


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
            operation=headers.get("KV-Operation", "PUT"),
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
        keys, _ = await self._kv_listing(bucket)
        return keys

    async def _kv_listing(self, bucket: str) -> tuple[list[str], bool]:
        """:meth:`kv_keys`, and whether the bucket's stream takes direct gets (its
        ``allow_direct``, as the first page says)."""
        prefix = kv_subject(bucket, "")
        keys: list[str] = []
        offset = 0
        direct: bool | None = None
        while True:
            body = {"subjects_filter": kv_subject(bucket), "offset": offset}
            info = await self.request(f"STREAM.INFO.{stream_of('KeyValue', bucket)}", body)
            if direct is None:
                direct = (info.get("config") or {}).get("allow_direct") is True
            subjects = (info.get("state") or {}).get("subjects") or {}
            keys.extend(subject.removeprefix(prefix) for subject in subjects)
            total = int(info.get("total") or 0)
            offset += len(subjects)
            if not subjects or offset >= total:
                return sorted(set(keys)), direct

    async def kv_scan(
        self, buckets: Mapping[str, Collection[str]], marker: str
    ) -> dict[tuple[str, str], KvEntry]:
        """The last message of each key of ``buckets`` a plan looks at, by (bucket, key):
        each key named (``buckets[bucket]``), and each other key of the bucket whose last
        message carries a header named ``marker`` (in any case). Delete markers are
        included; a key with no message (never written, or gone meanwhile) is not.

        The other keys are listed from the stream's subjects, and their last messages
        read in batches (a direct get of up to :data:`BATCH_KEYS` subjects,
        ``multi_last``) whose headers alone are looked at: no value of theirs is kept.
        Each key found marked (its header block holds the name: a false match costs one
        read), and each key named, is then read on its own from the stream's leader
        (STREAM.MSG.GET), as every key was read before: what is returned is the
        leader's word at that moment, not a replica's (any replica of the stream, or a
        mirror taking direct gets for it, may answer a direct get, a moment behind). A
        key the batches did not answer (deleted meanwhile, or a reply cut short) is read
        on its own too. Where batches are not answered (a
        server before 2.11, a stream without direct gets, a user who may not use them),
        every key is read on its own, :data:`READS_AT_ONCE` at a time, and only the
        marked ones kept. Requests are reads only (STREAM.INFO, DIRECT.GET, MSG.GET)."""
        exact: list[tuple[str, str]] = []  # kept whatever they hold
        unsure: list[tuple[str, str]] = []  # kept when marked
        for bucket in sorted(buckets):
            named = set(buckets[bucket])
            listed, direct = await self._kv_listing(bucket)
            others = [key for key in listed if key not in named]
            exact += ((bucket, key) for key in sorted(named))
            found = None
            if others and direct and self.takes_raw_replies and not self._no_multi_last:
                found = await self._kv_marked(bucket, others, marker)
            if found is None:
                unsure += ((bucket, key) for key in others)
            else:
                marked, unanswered = found
                exact += ((bucket, key) for key in sorted(marked))
                unsure += ((bucket, key) for key in sorted(unanswered))
        limit = asyncio.Semaphore(READS_AT_ONCE)
        wanted = marker.casefold()

        async def read(bucket: str, key: str, keep: bool) -> KvEntry | None:
            async with limit:
                entry = await self.kv_entry(bucket, key)
            if entry is None or keep or any(n.casefold() == wanted for n in entry.headers):
                return entry
            return None  # not marked: its value is dropped as soon as it is read

        asked = [(bucket, key, True) for bucket, key in exact]
        asked += [(bucket, key, False) for bucket, key in unsure]
        read_back = await asyncio.gather(*(read(*one) for one in asked))
        return {
            (bucket, key): entry
            for (bucket, key, _), entry in zip(asked, read_back, strict=True)
            if entry is not None
        }

    #: Set once a server answered a batched read as one that knows no ``multi_last``.
    _no_multi_last = False

    async def _kv_marked(
        self, bucket: str, keys: list[str], marker: str
    ) -> tuple[set[str], set[str]] | None:
        """Batched reads of the last messages of ``keys``: (the keys whose last message
        carries a header ``marker``, the keys no reply answered); None when the first
        batch was refused (the server or the bucket answers no batched direct get, or
        the user may not ask: :meth:`kv_scan` reads every key on its own then)."""
        stream = stream_of("KeyValue", bucket)
        subject = self.subject(f"DIRECT.GET.{stream}")
        prefix = kv_subject(bucket, "")
        limit = getattr(self.nc, "max_payload", 0) or BATCH_REQUEST
        largest = min(BATCH_REQUEST, limit - 64)  # the body's own fields take the rest
        waiting = deque(_batches([prefix + key for key in keys], largest))
        marked: set[str] = set()
        unanswered: set[str] = set()
        needle = marker.casefold().encode()
        first = True

        async def ask(subjects: list[str]) -> None:
            nonlocal first
            probe, first = first, False
            try:
                left, ended = await self._kv_batch(subject, subjects, needle, marked)
            except PermissionDenied:
                if probe:
                    raise _Refused from None
                left, ended = subjects, ""
            if probe and ended in _REFUSED and len(left) == len(subjects):
                if ended == "408":
                    self._no_multi_last = True
                raise _Refused
            if ended == "cut" and len(left) < len(subjects):
                waiting.append(left)  # max_bytes reached: the rest asked again
            elif ended == "413" and len(left) > 1:
                half = len(left) // 2
                waiting.extend((left[:half], left[half:]))
            else:  # answered whole (the rest gone meanwhile), or an error: one by one
                unanswered.update(left)
            await between_batches(bucket)

        async def worker() -> None:
            while waiting:
                await ask(waiting.popleft())

        try:
            await ask(waiting.popleft())
        except _Refused:
            return None
        workers = [asyncio.ensure_future(worker()) for _ in range(BATCHES_AT_ONCE)]
        try:
            await asyncio.gather(*workers)
        except BaseException:  # the other worker stopped too, its end taken
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise
        return {s.removeprefix(prefix) for s in marked}, {
            s.removeprefix(prefix) for s in unanswered
        }

    async def _kv_batch(
        self, subject: str, subjects: list[str], needle: bytes, marked: set[str]
    ) -> tuple[list[str], str]:
        """One batched read (``multi_last``) of ``subjects``' last messages: those whose
        headers hold ``needle`` (a lower-case header name) are added to ``marked``.
        Returns the subjects no message answered, in order, and how the reply ended:
        ``done`` (every message sent), ``cut`` (``max_bytes`` reached), the status of
        an error (``408``, ``404``, ``413``...), or ``""`` (a reply no server sends: more
        messages than subjects asked). A message naming a subject not asked, or one
        already answered, is ignored."""
        left = dict.fromkeys(subjects)
        ended = [""]
        budget = [len(subjects) + 16]

        def on_reply(block: bytes, _: bytes) -> bool:
            budget[0] -= 1
            if _last_header(block, _SEQUENCE) is not None:  # a message: the server adds it
                named = _last_header(block, _SUBJECT)
                answered = named.decode(errors="replace") if named is not None else ""
                if answered in left:
                    del left[answered]
                    if needle in block.lower():
                        marked.add(answered)
                return not left or budget[0] <= 0
            code = _status(block)
            if code == "204":
                pending = _last_header(block, _PENDING) or b"0"
                ended[0] = "cut" if pending.strip() not in (b"0", b"") else "done"
            else:
                ended[0] = code or ""
            return True

        body = {"multi_last": subjects, "max_bytes": BATCH_BYTES}
        await self.replies(subject, orjson.dumps(body), on_reply)
        if not left and not ended[0]:
            ended[0] = "done"
        return list(left), ended[0]

    async def kv_delete(self, bucket: str, key: str, *, revision: int | None = None) -> None:
        """Put a delete marker on ``key`` (only at ``revision`` when given)."""
        await self._kv_put(bucket, key, b"", expect=revision, operation="DEL")


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


def _status(block: bytes) -> str:
    """The status of a reply that is no message (``NATS/1.0 204 EOB``: ``204``); "" when
    it has none."""
    words = block.split(b"\r\n", 1)[0].split(None, 2)
    if len(words) < 2 or not words[1].isdigit():
        return ""
    return words[1].decode()
