"""KeyValue primitives over the JetStream API (the apply lock, KeyValue entries): a
bucket is the stream ``KV_<bucket>``, a key the subject ``$KV.<bucket>.<key>``.

Every write names the stream that must store it (``Nats-Expected-Stream``): a stream
config is anyone's to change, and a ``KV_<bucket>`` moved off its subjects while
another stream took ``$KV.<bucket>.>`` would otherwise store the value (a secret) there
and ack it as written. The server refuses such a write (err_code 10060); nothing is
stored."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.errors import NotFound, ServerError
from reconciler.identity import kv_subject, stream_of
from reconciler.jetstream.transport import (
    NO_MESSAGE,
    WRONG_LAST_SEQUENCE,
    Transport,
    parse_headers,
)

#: The header that has the server store a write only in the stream it names.
EXPECTED_STREAM = "Nats-Expected-Stream"


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
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expect)
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
        prefix = kv_subject(bucket, "")
        keys: list[str] = []
        offset = 0
        while True:
            body = {"subjects_filter": kv_subject(bucket), "offset": offset}
            info = await self.request(f"STREAM.INFO.{stream_of('KeyValue', bucket)}", body)
            subjects = (info.get("state") or {}).get("subjects") or {}
            keys.extend(subject.removeprefix(prefix) for subject in subjects)
            total = int(info.get("total") or 0)
            offset += len(subjects)
            if not subjects or offset >= total:
                return sorted(set(keys))

    async def kv_delete(self, bucket: str, key: str, *, revision: int | None = None) -> None:
        """Put a delete marker on ``key`` (only at ``revision`` when given)."""
        await self._kv_put(bucket, key, b"", expect=revision, operation="DEL")
