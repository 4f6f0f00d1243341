"""What a restore compares: a restored stream against its backup, and a live stream
against what this tool's own interrupted restore of it would have left.

**Verification** compares what ``$JS.API.STREAM.RESTORE`` guarantees, read in
nats-server's source (``1787eee``, the 2.15 line) and measured on 2.10.26, 2.12.8,
2.14.6 and 2.15.1 (``tests/integration/test_restore_verify.py``):

- the message count, bytes, last sequence and both times exactly, and the first
  sequence, except for a stream holding no message: 2.15 restores it "at the right
  sequence number" (``stream_backup.go`` ``RestoreStreamV2``: ``Compact(FirstSeq)``), so
  a stream never written to (first 0, last 0) comes back with first 1, last 0: both
  say "empty, the next message is last + 1";
- each consumer's positions, except a stream sequence below the stream's first
  message: a consumer the server loads onto a stream whose first message is ``F``
  starts no lower than ``F - 1`` (``consumer.go`` ``selectStartingSeqNo``: "there are no
  messages there anymore, so move the sequence up"; 2.15 raises a consumer the limits
  had passed from 0 to ``F - 1``). Nothing is delivered again and nothing skipped.

**A leftover** of an interrupted restore is proven, never guessed: the restore writes a
marker into the stream's metadata (:data:`RESTORING_KEY`, a digest of the backup's
files and manifest entry for this stream: :func:`marker`) and removes it only once the
stream verified.
The marker is data anyone could write, so it is necessary, not sufficient: the stream
must also hold nothing the backup does not (:func:`leftover`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from reconciler.backup.layout import DATA, METADATA, file_digest
from reconciler.backup.manifest import (
    Contents,
    StreamRecord,
    mark,
    positions,
    state_of,
    stream_json,
)
from reconciler.backup.memory import DELIVERED, FLOOR
from reconciler.execution.migrate import without_server_metadata
from reconciler.jetstream import JetStreamClient
from reconciler.model.migration import resettable
from reconciler.model.normalize import epoch_nanoseconds
from reconciler.specs.lifecycle import PROTECT_KEY

#: Metadata key of a stream this tool's restore is writing (valued with :func:`marker`).
RESTORING_KEY = "io.jetstream-gitops/restoring"
#: The consumer positions counted in stream sequences (the others count deliveries).
STREAM_POSITIONS = ("delivered.stream_seq", "ack_floor.stream_seq")


#: The marker's version: 2 covers the stream's whole manifest entry (its ``marks``,
#: state and consumer positions, which :func:`leftover` reads); 1 covered the name and the
#: two files' digests only, so a hand-edited ``marks`` kept the marker valid.
MARKER_VERSION = 2


def marker(contents: Contents, record: StreamRecord) -> str:
    """The value of :data:`RESTORING_KEY` for ``record`` of this backup: a SHA-256 over
    the stream's name, the digests of its two files (the manifest's, checked before
    anything is sent; computed for a folder without a manifest) and its entry as the
    manifest records it (``marks``, state, consumers, configs: every value
    :func:`leftover` compares a live stream with), so an entry edited since the restore
    that wrote the marker no longer matches it."""
    folder = contents.folder(record.name)
    digests = []
    for name, path in ((METADATA, folder.metadata), (DATA, folder.data)):
        known = record.files.get(name)
        digests.append(known.sha256 if known is not None else file_digest(path)[0])
    entry = stream_json(record)
    body = json.dumps(
        ["jetstream-gitops/restore", MARKER_VERSION, record.name, *digests, entry],
        sort_keys=True,
        separators=(",", ":"),
    )
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def marked(config: Mapping[str, Any] | None) -> str | None:
    """The restore marker a live config carries (None: none). Untrusted."""
    metadata = (config or {}).get("metadata")
    if not isinstance(metadata, Mapping) or RESTORING_KEY not in metadata:
        return None
    return str(metadata[RESTORING_KEY])


def with_marker(config: Mapping[str, Any], value: str | None) -> dict[str, Any]:
    """``config`` as a restore writes it while it runs: the server's own metadata
    (``_nats.``) left out, no recorded ``prevent_destroy`` (the stream is not the
    user's yet: its own leftover is never protected), and the marker ``value`` (None:
    none, the config once verified, protection included). A marker ``config`` carries
    itself (a stream backed up while some restore had marked it) is never kept."""
    plain = without_server_metadata(config)
    kept = {k: v for k, v in (plain.get("metadata") or {}).items() if k != RESTORING_KEY}
    if value is None:  # a marker the backed-up stream carried (someone's restore) goes too
        return {**plain, "metadata": kept} if "metadata" in plain else plain
    metadata = {k: v for k, v in kept.items() if k != PROTECT_KEY}
    return {**plain, "metadata": {**metadata, RESTORING_KEY: value}}


def differences(
    record: StreamRecord, info: Mapping[str, Any], consumers: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Where the live stream differs from the backup: state fields, consumers missing,
    and positions (within the range the backup saw for a consumer at work)."""
    found = []
    expected, live = state_of(record.state), state_of(info.get("state") or {})
    for name, value in expected.items():
        got = live.get(name)
        if value is None or got == value or _empty_first(name, got, live):
            continue
        found.append(f"{record.name}: {name} is {got}, the backup has {value}")
    first = int(live.get("first_seq") or 0)
    return found + consumer_differences(record, consumers, first_seq=first)


def _empty_first(name: str, got: Any, live: Mapping[str, Any]) -> bool:
    """A stream holding no message whose first sequence is its next one (last + 1)."""
    if name != "first_seq" or live.get("messages"):
        return False
    return bool(got == int(live.get("last_seq") or 0) + 1)


def consumer_differences(
    record: StreamRecord,
    consumers: Mapping[str, Mapping[str, Any]],
    *,
    missing: bool = True,
    first_seq: int = 0,
) -> list[str]:
    """Where the live consumers' positions are not the backup's (``missing``: a consumer
    of the backup that is not there counts). ``first_seq``: the live stream's first
    sequence; a stream position below it may have been moved up to just below it."""
    found = []
    for consumer in record.consumers:
        got = consumers.get(consumer.name)
        if got is None:
            if missing:
                found.append(f"{record.name}: consumer {consumer.name} is missing")
            continue
        now = positions(got)
        low = consumer.earliest or consumer.positions
        if record.through_mirror:  # moved by CONSUMER.RESET: pending ones come again
            if consumer.config is not None and not resettable(consumer.config):
                continue  # made as it is (a reset refuses its deliver policy)
            floor = consumer.positions.get(FLOOR, 0)
            if now.get(FLOOR) != floor or now.get(DELIVERED) != floor:
                found.append(
                    f"{record.name}: consumer {consumer.name} is at {now.get(FLOOR)} "
                    f"(delivered {now.get(DELIVERED)}), the backup has its ack floor at {floor}"
                )
            continue
        for key, high in consumer.positions.items():
            lowest, at = min(low.get(key, high), high), now.get(key, -1)
            if lowest <= at <= high or _moved_up(key, high, at, first_seq):
                continue
            found.append(
                f"{record.name}: consumer {consumer.name} {key} is {at}, the backup has {high}"
            )
    return found


def _moved_up(key: str, high: int, at: int, first_seq: int) -> bool:
    """A stream position the server moved up to just below the stream's first message."""
    return key in STREAM_POSITIONS and high < first_seq - 1 and at == first_seq - 1


def holds_only_the_backups(record: StreamRecord, info: Mapping[str, Any]) -> bool:
    """The live stream's sequences and count stay within the backup's: its last sequence
    is not past the backup's, it holds no more messages than the backup, and when it
    holds any, its first sequence is the backup's."""
    state, backup = info.get("state") or {}, record.state
    first, last = int(state.get("first_seq") or 0), int(state.get("last_seq") or 0)
    count = int(state.get("messages") or 0)
    if last > int(backup.get("last_seq") or 0) or count > int(backup.get("messages") or 0):
        return False
    return count == 0 or (first == int(backup.get("first_seq") or -1) and count <= last - first + 1)


def _as_a_restore_leaves_it(record: StreamRecord, info: Mapping[str, Any]) -> bool:
    """What a restore of the backup can leave, besides :func:`holds_only_the_backups`:
    a first part of the backup's messages (nats-server 2.15 keeps what had arrived,
    measured: 519 of 3,000, sequences 1-519) or all of them. So a stream holding none
    is one that none of the backup's messages reached (its last sequence below the
    backup's first), unless the backup holds none; one holding some has no more gaps
    between its first and last sequence than the backup has. A workqueue a worker
    emptied since the backup (0 messages, last sequence the backup's last), or whose
    jobs between the first and the last were done, is someone's work."""
    state, backup = info.get("state") or {}, record.state
    first, last = int(state.get("first_seq") or 0), int(state.get("last_seq") or 0)
    count = int(state.get("messages") or 0)
    b_first, b_last = int(backup.get("first_seq") or 0), int(backup.get("last_seq") or 0)
    b_count = int(backup.get("messages") or 0)
    if count == 0:
        return b_count == 0 or last < b_first
    return last - first + 1 - count <= max(0, b_last - b_first + 1 - b_count)


async def leftover(
    client: JetStreamClient,
    record: StreamRecord,
    info: Mapping[str, Any],
    consumers: Mapping[str, Any],
    expected: str,
    *,
    stream: str | None = None,
) -> bool:
    """Whether the live stream (``record``'s, or ``stream``: a memory stream's temporary
    one) is what this tool's interrupted restore of ``record`` (of this backup:
    ``expected``, its :func:`marker`) left. All of this must hold:

    - its metadata carries the marker ``expected``;
    - its last sequence is not past the backup's, it holds no more messages than the
      backup, and when it holds any its first sequence is the backup's
      (:func:`holds_only_the_backups`);
    - it holds what a restore of the backup leaves: none of the backup's messages
      reached it, or it has no more gaps than the backup (:func:`_as_a_restore_leaves_it`);
    - it has only the backup's consumers, none moved past its backup position;
    - when it holds messages: its first message is the backup's (sequence, time,
      subject, headers and payload, as the manifest marks them), its last one no
      later than the backup's last (and that very message at the same sequence): a
      message published by anyone since the backup is later.
    """
    if marked(info.get("config")) != expected or not holds_only_the_backups(record, info):
        return False
    if not _as_a_restore_leaves_it(record, info):
        return False
    if set(consumers) - {c.name for c in record.consumers}:
        return False
    state = info.get("state") or {}
    first_seq = int(state.get("first_seq") or 0)
    if consumer_differences(record, consumers, missing=False, first_seq=first_seq):
        return False  # a consumer moved since: someone's work
    if not int(state.get("messages") or 0):
        return True
    name, backup_last = stream or record.name, int(record.state.get("last_seq") or 0)
    first_mark, last_mark = record.marks.get("first"), record.marks.get("last")
    if first_mark is None or last_mark is None:
        return False  # a nats CLI folder, or a backup taken before marks were recorded
    first = await client.stored_message(name, {"seq": int(state["first_seq"])})
    last = await client.stored_message(name, {"seq": int(state["last_seq"])})
    if first is None or last is None or mark(first) != first_mark:
        return False
    if int(last["seq"]) == backup_last:
        return mark(last) == last_mark
    when, latest = epoch_nanoseconds(last.get("time")), epoch_nanoseconds(last_mark.get("time"))
    return when is not None and latest is not None and when <= latest


def lookalike_hint(record: StreamRecord, info: Mapping[str, Any]) -> str:
    """A hint for a refused stream that holds only sequences of the backup but is not
    proven this restore's own leftover (:func:`leftover` said no)."""
    if not holds_only_the_backups(record, info):
        return ""
    if marked(info.get("config")) is None:
        return ": no restore of this backup left it (it carries no restore marker)"
    return ": its messages, consumers or restore marker are not certainly this backup's"
