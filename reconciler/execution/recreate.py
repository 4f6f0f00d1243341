"""Create a stream this apply has just deleted, and make sure it is a new one.

nats-server answers a file stream's delete once its folder is renamed to ``.NAME``, and
removes that folder in the background. Deleting ``NAME`` again while ``.NAME`` is still
there fails to rename, the server ignores the failure and answers success, and the next
create of ``NAME`` reads the old folder back: the "new" stream holds the old messages,
sequences and duplicate-detection ids (measured on 2.15.1; docs/jetstream-notes.md). A
replace or migration of the same stream twice in a row is enough.

So a stream created right after its delete is checked (``holds_leftovers``): one that
came back with old messages is deleted and created again until the server has removed
the old files, or the apply stops with :class:`LeftoverStream` and the stream deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any, Protocol

from reconciler.errors import LeftoverStream, NotFound, ServerError
from reconciler.jetstream import JetStreamClient
from reconciler.model.migration import copies_when_created
from reconciler.model.state import StreamState, holds_leftovers

#: How long a stream that keeps coming back with old messages is deleted and created
#: again before the apply gives up.
LEFTOVER_SECONDS = 10.0
#: The first wait between two tries; it doubles up to MAX_WAIT.
FIRST_WAIT = 0.05
MAX_WAIT = 1.0
#: STREAM.CREATE: "error creating store for stream" (the old folder half removed).
STORE_NOT_CREATED = 10049


class StreamMaker(Protocol):
    """What :func:`create_stream` sends its STREAM.CREATE through (a client, a lock store)."""

    async def create_stream(self, config: dict[str, Any]) -> dict[str, Any]: ...


async def create_stream(
    client: StreamMaker, config: Mapping[str, Any], *, patience: float | None = None
) -> dict[str, Any]:
    """STREAM.CREATE, a 10049 ("error creating store for stream": a deleted stream's
    folder of that name still being removed, by this apply or anyone) asked again with a
    growing wait for up to ``patience`` seconds; any other refusal at once."""
    deadline = time.monotonic() + (LEFTOVER_SECONDS if patience is None else patience)
    wait = FIRST_WAIT
    while True:
        try:
            return await client.create_stream(dict(config))
        except ServerError as err:
            if err.err_code != STORE_NOT_CREATED or time.monotonic() > deadline:
                raise
        await asyncio.sleep(wait)
        wait = min(wait * 2, MAX_WAIT)


async def create_afresh(
    client: JetStreamClient, config: Mapping[str, Any], *, patience: float | None = None
) -> dict[str, Any]:
    """Create the stream of ``config`` that was deleted a moment ago; its StreamInfo.

    A stream that copies when created (a mirror, a source not held back) cannot be told
    from a leftover by its state and is created once, unchecked.
    """
    name = str(config["name"])
    if copies_when_created(config):
        return await create_stream(client, config, patience=patience)
    patience = LEFTOVER_SECONDS if patience is None else patience
    deadline = time.monotonic() + patience
    wait = FIRST_WAIT
    while True:
        info = await create_stream(client, config, patience=deadline - time.monotonic())
        state = StreamState.from_info(info)
        if not holds_leftovers(config, state):
            return info
        with contextlib.suppress(NotFound):
            await client.delete_stream(name)
        if time.monotonic() > deadline:
            raise LeftoverStream(
                f"stream {name} was deleted, but each time it was created again the "
                f"server brought back the deleted stream's files ({state.messages} "
                f"messages, up to sequence {state.last_seq}) for {patience:g}s; it is "
                "left deleted: apply again once the server has removed the old files"
            )
        await asyncio.sleep(wait)
        wait = min(wait * 2, MAX_WAIT)
