"""The temporary file mirror through which a memory stream is backed up and restored.

nats-server has no snapshot for memory storage (``memStore.Snapshot`` is not
implemented). A mirror keeps every message's sequence, time, subject and headers, so a
backup snapshots a FILE stream mirroring the memory stream, and a restore brings the
snapshot back under the temporary name and makes the memory stream a mirror of it. The
temporary stream is named :func:`~reconciler.identity.backup_mirror` (reserved: never
planned or exported) and is deleted when the backup or restore is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reconciler.backup.layout import BackupError
from reconciler.backup.manifest import StreamRecord
from reconciler.errors import NotFound, ReconcileError, ServerError
from reconciler.execution.migrate import HELD_UNTIL, reset_until_moved, without_server_metadata
from reconciler.identity import backup_mirror
from reconciler.jetstream import JetStreamClient
from reconciler.jetstream.snapshots import restore_stream
from reconciler.model.migration import can_keep_positions, can_mirror, resettable
from reconciler.model.standby import NOT_ON_A_MIRROR
from reconciler.model.state import ServerInfo, lacking, same_stored

#: How long a mirror may copy nothing before it is given up.
STALL_SECONDS = 60.0
POLL_SECONDS = 0.1
#: The consumer positions a restored memory stream's consumers are moved to.
FLOOR = "ack_floor.stream_seq"
DELIVERED = "delivered.stream_seq"


def mirror_of(origin: str, name: str, storage: str = "file") -> dict[str, Any]:
    """The config of stream ``name`` mirroring ``origin``."""
    return {"name": name, "storage": storage, "mirror": {"name": origin}}


def _mirrors(config: Mapping[str, Any], origin: str) -> bool:
    return str((config.get("mirror") or {}).get("name", "")) == origin


async def drop_mirror(client: JetStreamClient, name: str, origin: str) -> None:
    """Delete ``name`` when it is a temporary mirror of ``origin`` an interrupted run
    left; anything else of that name is an error (never deleted)."""
    try:
        info = await client.stream_info(name, deleted=True)
    except NotFound:
        return
    config = info.get("config") or {}
    if config.get("storage") != "file" or not _mirrors(config, origin):
        raise BackupError(
            f"stream {name} exists and is not a file mirror of {origin}: the temporary "
            "mirror cannot be made; delete or rename it"
        )
    try:
        kept = (await client.stream_info(origin, deleted=True)).get("state") or {}
    except NotFound:
        kept = {}
    if not _only_copies(info.get("state") or {}, kept) or not await _same_last(
        client, name, origin, info.get("state") or {}
    ):
        raise BackupError(
            f"stream {name} mirrors {origin} and holds messages {origin} does not have (an "
            "archive, not a backup's leftover): the temporary mirror cannot be made; rename it"
        )
    await client.delete_stream(name)


def _only_copies(mirror: Mapping[str, Any], origin: Mapping[str, Any]) -> bool:
    """Whether a copy holds nothing its origin lost: a killed backup's mirror copied the
    origin a moment ago (a killed restore's stream, the backup), so every message it
    holds is still there (an empty copy holds nothing). Anyone can make a stream under
    the reserved name; one that kept what its origin dropped is someone's archive, and
    deleting it would lose that: a message it holds inside the origin's sequences that
    the origin deleted counts too (both read with their deleted details)."""
    if not int(mirror.get("messages") or 0):
        return True
    if not int(origin.get("messages") or 0):
        return False
    first, last = int(mirror.get("first_seq") or 0), int(mirror.get("last_seq") or 0)
    inside = int(origin.get("first_seq") or 0) <= first and last <= int(origin.get("last_seq") or 0)
    return inside and not lacking(mirror, origin, last)[0]  # none deleted from the origin


async def _same_last(
    client: JetStreamClient, name: str, origin: str, state: Mapping[str, Any]
) -> bool:
    """Whether mirror ``name``'s last message is ``origin``'s at that sequence (an empty
    mirror: yes). A mirror of an earlier stream of the origin's name (deleted and made
    again since) holds other messages at the same sequences: someone's archive."""
    last = int(state.get("last_seq") or 0)
    if not int(state.get("messages") or 0) or not last:
        return True
    theirs, ours = await asyncio.gather(
        client.stored_message(origin, {"seq": last}), client.stored_message(name, {"seq": last})
    )
    return same_stored(theirs, ours) is True


async def caught_up(
    client: JetStreamClient, name: str, origin: str, goal: int, *, stall: float = STALL_SECONDS
) -> dict[str, Any]:
    """Wait until mirror ``name`` holds ``origin`` up to sequence ``goal`` (its info
    then); :class:`BackupError` naming both when it copies nothing for ``stall`` s."""
    seen, moved = -1, time.monotonic()
    while True:
        info = await client.stream_info(name)
        at = int((info.get("state") or {}).get("last_seq") or 0)
        lag = (info.get("mirror") or {}).get("lag")
        if at >= goal and not lag:
            return info
        if at != seen:
            seen, moved = at, time.monotonic()
        elif time.monotonic() - moved > stall:
            error = ((info.get("mirror") or {}).get("error") or {}).get("description")
            why = f": {error}" if error else ""
            raise BackupError(
                f"stream {name} mirroring {origin} stopped at sequence {at} of {goal}{why}"
            )
        await asyncio.sleep(POLL_SECONDS)


# -- restore -----------------------------------------------------------------------------
def memory_refused(record: StreamRecord, server: ServerInfo) -> str | None:
    """Why ``server`` cannot take memory stream ``record`` back: its mirror must become a
    plain stream (nats-server 2.12+), its consumers be moved (CONSUMER.RESET, 2.14+)."""
    if not record.through_mirror:
        return None
    if not can_mirror(server):
        need = "2.12"
    elif record.consumers and not can_keep_positions(server):
        need = "2.14 (CONSUMER.RESET moves its consumers to their positions)"
    else:
        return None
    return (
        f"{record.name}: a memory stream, restored through a mirror that must then become "
        f"a plain stream: needs nats-server {need}; this server is {server.version}"
    )


def temp_config(record: StreamRecord) -> dict[str, Any]:
    """The snapshot's stream, restored as a plain file stream under the temporary name."""
    config = {k: v for k, v in (record.mirror_config or {}).items() if k != "mirror"}
    return {**without_server_metadata(config), "name": backup_mirror(record.name)}


def restoring(record: StreamRecord) -> dict[str, Any]:
    """Memory stream ``record`` while it mirrors its restored snapshot."""
    # what a mirror cannot have: the memory stream gets it back when it stops mirroring
    config = {k: v for k, v in record.config.items() if k not in NOT_ON_A_MIRROR}
    return {**without_server_metadata(config), "mirror": {"name": backup_mirror(record.name)}}


async def restore_memory(
    client: JetStreamClient,
    record: StreamRecord,
    chunks: Iterable[bytes],
    on_chunk: Callable[[int], None],
    *,
    marked: Callable[[Mapping[str, Any]], dict[str, Any]] = dict,
) -> None:
    """Memory stream ``record``: its snapshot restored under the temporary name, the
    stream made as a mirror of it, caught up, turned into its real config (nats-server
    2.12+), the temporary stream deleted, then its consumers made and moved. The
    temporary stream and both configs of the memory stream are written as ``marked``
    makes them (the restore's marker: ``backup.restore_checks.with_marker``); an
    interrupted restore's temporary stream is the caller's to clear first
    (``backup.restore``: only when it is proven that restore's)."""
    temp = backup_mirror(record.name)
    await restore_stream(
        client, marked(temp_config(record)), record.state, chunks, on_chunk=on_chunk
    )
    try:
        await client.create_stream(marked(restoring(record)))
        await caught_up(client, record.name, temp, int(record.state.get("last_seq") or 0))
        await client.update_stream(marked(record.config))
    finally:
        with contextlib.suppress(ReconcileError):
            await client.delete_stream(temp)
    for consumer in record.consumers:
        if consumer.config is not None:
            await _consumer(client, record.name, consumer.name, consumer.config, consumer.positions)


async def _consumer(
    client: JetStreamClient,
    stream: str,
    name: str,
    config: Mapping[str, Any],
    at: Mapping[str, int],
) -> None:
    """Make a durable consumer and move it past its ack floor (pending messages are
    delivered again), paused until it is there."""
    moved = resettable(config)
    made = dict(config)
    if moved and not config.get("pause_until"):
        made["pause_until"] = HELD_UNTIL  # a push consumer would deliver from the start
    try:
        await client.create_consumer(stream, made, action="create")
    except ServerError as err:
        raise BackupError(f"consumer {stream}/{name}: {err}") from None
    if moved:
        await reset_until_moved(client, stream, name, at.get(FLOOR, 0) + 1)
        if not config.get("pause_until"):
            await client.pause_consumer(stream, name, None)
