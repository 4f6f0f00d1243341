"""The live read: everything on a server as a :class:`~reconciler.model.state.LiveState`.

Lists are always paged (:meth:`~reconciler.jetstream.transport.Transport.paged`);
:meth:`LiveRead.fetch_live` lists each stream's consumers as the stream list's pages
arrive, and shares equal values of a large account (:class:`SharedValues`);
:meth:`LiveRead.confirm` looks again for what a list may have missed while it was read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import orjson

from reconciler.errors import NotFound, PermissionDenied
from reconciler.jetstream.transport import Transport
from reconciler.model.normalize import CONSUMER_NAME_FIELDS, VERBATIM_FIELDS
from reconciler.model.state import LiveState, StreamState

LIST_CONCURRENCY = 32
#: Resources (streams listed, and the consumers they count) from which a read of the
#: live state shares equal values (:class:`SharedValues`). Below, the walk costs more
#: than it saves: a sixth of the read at 12,000 resources (6,000 consumer and stream
#: configs held twice over would be a few MiB).
SHARE_FROM = 20_000


#: The fields in which consumers declared alike differ: their names and the fields taken
#: verbatim (a filter subject, a description). :meth:`SharedValues.consumer` makes the
#: rest of a config from one template per shape.
_OWN_FIELDS = (*CONSUMER_NAME_FIELDS, *VERBATIM_FIELDS["Consumer"])
#: Shapes of consumer configs a read keeps templates of, at most (a few MiB where every
#: consumer has a shape of its own; those are walked as before).
SHAPES = 1024


class SharedValues:
    """Makes equal strings and integers in freshly decoded configs one object each.

    100,000 consumer configs repeat the same few values ("explicit", "all", 30000000000,
    their owner's marker): the JSON decoder makes a new object for every one. Sharing
    them takes a third off the memory of a large live state and is no slower than
    keeping the copies (measured with 200,000 consumers: 333 -> 212 MiB).

    The values are replaced in place: a dict or list given here must be one the decoder
    just made and nothing else holds (rebuilding every dict instead took 40% longer at
    21,000 consumers). A consumer's config is made from a template of its shape instead
    (:meth:`consumer`), which shares its field names too: orjson made a new ``name``,
    ``max_waiting`` and ``metadata`` key, and new metadata keys, for nearly every
    consumer (30 MiB at 100,000).
    """

    def __init__(self) -> None:
        self._seen: dict[Any, Any] = {}
        # a shape's template, and how to copy each dict or list in it
        self._shapes: dict[bytes, tuple[dict[str, Any], tuple[tuple[str, Copier], ...]]] = {}

    def __call__(self, value: Any) -> Any:
        kind = type(value)
        if kind is dict:
            return self._dict(value)
        if kind is list:
            return self._list(value)
        if kind is str or kind is int:
            return self._seen.setdefault(value, value)
        return value

    def consumer(self, config: Any) -> Any:
        """A consumer's freshly decoded config, its values shared: equal to ``config``
        in every field, type and the order of its fields, and a dict of its own (so are
        the dicts and lists in it).

        Configs equal but for their own fields (:data:`_OWN_FIELDS`) have one shape:
        the JSON of the config with those fields' values set to 0, which tells apart
        every value orjson decodes (``1``, ``1.0`` and ``true`` too). The first of a
        shape is walked and copied as its template; the others are a copy of the
        template with their own fields set (a copy made in C: no walk). A config whose
        JSON holds ``null`` (NaN or an infinity, which only the standard library's
        decoder makes, are written so too) or that orjson cannot write (an integer
        beyond 64 bits) is walked as before."""
        if type(config) is not dict:
            return self(config)
        own = [(field, config[field]) for field in _OWN_FIELDS if field in config]
        for field, _ in own:
            config[field] = 0
        try:
            shape = orjson.dumps(config)
        except TypeError:
            shape = b"null"
        found = self._shapes.get(shape)  # never one with null: see below
        if found is None:
            for field, value in own:
                config[field] = value
            self._dict(config)
            if b"null" not in shape and len(self._shapes) < SHAPES:
                template = _copied(config)
                template.update((field, 0) for field, _ in own)  # each copy sets its own
                nested = tuple(
                    (k, _copier(v)) for k, v in template.items() if type(v) in (dict, list)
                )
                self._shapes[shape] = (template, nested)
            return config
        template, nested = found
        kept = template.copy()
        seen = self._seen
        for field, value in own:
            kind = type(value)
            kept[field] = seen.setdefault(value, value) if kind is str or kind is int else value
        for field, copy in nested:
            kept[field] = copy(template[field])
        return kept

    # The two walks below are __call__ inlined, one call per dict or list rather than
    # one per value: half the time of the plain recursion (a warm re-plan at 21,000).

    def _dict(self, value: dict[str, Any]) -> dict[str, Any]:
        seen = self._seen
        for name, item in value.items():
            kind = type(item)
            if kind is str or kind is int:
                value[name] = seen.setdefault(item, item)
            elif kind is dict:
                self._dict(item)
            elif kind is list:
                self._list(item)
        return value

    def _list(self, value: list[Any]) -> list[Any]:
        seen = self._seen
        for index, item in enumerate(value):
            kind = type(item)
            if kind is str or kind is int:
                value[index] = seen.setdefault(item, item)
            elif kind is dict:
                self._dict(item)
            elif kind is list:
                self._list(item)
        return value


class _KeptAsIs:
    """What a read below ``SHARE_FROM`` does: every decoded value kept as it is."""

    def __call__(self, value: Any) -> Any:
        return value

    def consumer(self, config: Any) -> Any:
        return config


KEPT_AS_IS = _KeptAsIs()


Copier = Callable[[Any], Any]


def _copier(value: dict[str, Any] | list[Any]) -> Copier:
    """How to copy ``value`` as :func:`_copied` does: a plain copy when nothing in it is
    a dict or list (a consumer's metadata)."""
    items = value.values() if type(value) is dict else value
    if any(type(item) in (dict, list) for item in items):
        return _copied
    return dict.copy if type(value) is dict else list.copy


def _copied(value: Any) -> Any:
    """``value`` with every dict and list in it copied (what they hold shared)."""
    kind = type(value)
    if kind is dict:
        return {k: _copied(v) for k, v in value.items()}
    if kind is list:
        return [_copied(v) for v in value]
    return value


class LiveRead(Transport):
    """The reads of what a server holds: lists, one stream or consumer, the whole state."""

    async def stream_info(self, name: str, *, deleted: bool = False) -> dict[str, Any]:
        """STREAM.INFO; ``deleted``: with ``state.deleted``, the sequences deleted
        between its first and last message."""
        body = {"deleted_details": True} if deleted else None
        return await self.request(f"STREAM.INFO.{name}", body)

    async def consumer_info(self, stream: str, name: str) -> dict[str, Any]:
        return await self.request(f"CONSUMER.INFO.{stream}.{name}")

    async def subject_counts(self, stream: str, subjects: str, limit: int) -> dict[str, int] | None:
        """How many messages ``stream`` holds on each subject ``subjects`` matches, page by
        page; None when more than ``limit`` subjects match (not worth reading)."""
        counts: dict[str, int] = {}
        while True:
            body = {"subjects_filter": subjects, "offset": len(counts)}
            info = await self.request(f"STREAM.INFO.{stream}", body)
            page = (info.get("state") or {}).get("subjects") or {}
            total = int(info.get("total") or len(page))
            if total > limit:
                return None
            before = len(counts)
            counts.update((str(k), int(v)) for k, v in page.items() if isinstance(v, int))
            if not page or len(counts) >= total:
                return counts
            if len(counts) == before:  # a page given again (no server's): not counted
                return None

    async def fullest_subject(self, stream: str, messages: int) -> tuple[str, int] | None:
        """The subject ``stream`` holds the most messages on, and how many (None: none),
        every subject read page by page (the server's pages: up to 100,000 subjects);
        only the fullest is kept. A stream holding ``messages`` has no more subjects
        than that: no more are read (a page given again and again ends there)."""
        fullest: tuple[str, int] | None = None
        seen = 0
        while seen < messages:
            body = {"subjects_filter": ">", "offset": seen}
            info = await self.request(f"STREAM.INFO.{stream}", body)
            page = (info.get("state") or {}).get("subjects") or {}
            for subject, held in page.items():
                if isinstance(held, int) and (fullest is None or held > fullest[1]):
                    fullest = (str(subject), held)
            seen += len(page)
            if not page or seen >= int(info.get("total") or seen):
                break
        return fullest

    async def stream_names(self) -> list[str]:
        return [str(n) for n in await self.paged("STREAM.NAMES", "streams", str)]

    async def list_streams(
        self, on_page: Callable[[list[Any]], None] | None = None
    ) -> list[dict[str, Any]]:
        """Every stream's info (config, state, ...), 256 a page; ``on_page``: see
        :meth:`~reconciler.jetstream.transport.Transport.paged`."""
        return await self.paged(
            "STREAM.LIST", "streams", lambda i: str(i["config"]["name"]), on_page=on_page
        )

    async def consumer_names(self, stream: str) -> list[str]:
        names = await self.paged(f"CONSUMER.NAMES.{stream}", "consumers", str)
        return [str(n) for n in names]

    async def list_consumers(self, stream: str) -> list[dict[str, Any]]:
        """Every consumer info of ``stream``, 256 a page."""
        return await self.paged(f"CONSUMER.LIST.{stream}", "consumers", lambda i: str(i["name"]))

    async def consumer_configs(
        self, stream: str, shared: SharedValues | _KeptAsIs = KEPT_AS_IS
    ) -> list[tuple[str, dict[str, Any]]]:
        """Every consumer of ``stream`` as (name, config), the config's values passed
        through ``shared`` (a :class:`SharedValues`, or kept as they are). Only the
        configs are kept: at 100,000 consumers the rest of their infos (state, cluster,
        times) held until the last page came would more than double the memory a plan
        needs."""
        return await self.paged(
            f"CONSUMER.LIST.{stream}",
            "consumers",
            lambda i: str(i["name"]),
            keep=lambda i: (shared(str(i["name"])), shared.consumer(i["config"])),
        )

    async def fetch_live(self) -> LiveState:
        """Everything on the server: streams, their state, consumers, configs verbatim.

        A stream's consumers are listed as soon as the page of the stream list naming it
        arrives, while the rest of that list is still read: over a slow link the
        consumer lists no longer wait for the stream list's last page (nor the stream
        list for the server's INFO). Equal values are shared once the resources counted
        so far reach ``SHARE_FROM``."""
        asking = asyncio.ensure_future(self.server_info())
        shared = SharedValues()
        counted = 0  # streams listed and the consumers they count, so far
        limit = asyncio.Semaphore(LIST_CONCURRENCY)
        reading: dict[str, asyncio.Future[list[tuple[str, dict[str, Any]]]]] = {}
        state: dict[str, StreamState] = {}

        async def consumers_of(
            stream: str, share: SharedValues | _KeptAsIs
        ) -> list[tuple[str, dict[str, Any]]]:
            async with limit:
                try:
                    return await self.consumer_configs(stream, share)
                except NotFound:
                    return []  # deleted while we read: its consumers went with it

        def sharing() -> SharedValues | _KeptAsIs:
            return shared if counted >= SHARE_FROM else KEPT_AS_IS

        def read(page: list[Any]) -> None:
            # A stream reporting no consumers needs no CONSUMER.LIST round trip.
            nonlocal counted
            for info in page:
                name = str(info["config"]["name"])
                found = StreamState.from_info(info)
                if name not in state:
                    counted += 1 + found.consumer_count
                state[name] = found
                if name not in reading and found.consumer_count > 0:
                    reading[name] = asyncio.ensure_future(consumers_of(name, sharing()))

        try:
            # every page goes through read(), pages read again too: ``state`` ends with
            # an entry per stream kept, each from the last page naming it (as kept)
            infos = await self.list_streams(read)
            listed = [name for name in state if name in reading]
            pages = await asyncio.gather(*(reading[name] for name in listed))
            server = await asking
        except BaseException:
            others: list[asyncio.Future[Any]] = [asking, *reading.values()]
            for task in others:  # one read failed: the others stop too
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            raise
        share = sharing()
        streams = {share(str(i["config"]["name"])): share(i["config"]) for i in infos}
        consumers = {
            (stream, name): config
            for stream, page in zip(listed, pages, strict=True)
            for name, config in page
        }
        return LiveState(
            server=server,
            streams=streams,
            stream_state=state,
            consumers=consumers,
            peers=frozenset(name for info in infos for name in _peers(info)),
        )

    async def confirm(
        self, live: LiveState, streams: Iterable[str], consumers: Iterable[tuple[str, str]]
    ) -> LiveState:
        """``live`` plus the declared streams and consumers that a list did not show but
        exist when looked for again (created while the list was read): planned as what
        they are, not as creates."""
        missing = sorted({name for name in streams if name not in live.streams})
        unseen = {key for key in consumers if key not in live.consumers}
        if not missing and not unseen:
            return live  # the usual case: no copy of 100,000 entries to find nothing
        if len(missing) > 1:
            # One paged STREAM.NAMES (1,024 a page) says which of them exist now; an
            # apply from nothing would otherwise ask for each missing stream's INFO.
            # A user not allowed to list names still gets the INFO of each.
            with contextlib.suppress(PermissionDenied):
                present = set(await self.stream_names())
                missing = [name for name in missing if name in present]
        found_streams = dict(live.streams)
        found_state = dict(live.stream_state)
        found_consumers = dict(live.consumers)
        limit = asyncio.Semaphore(LIST_CONCURRENCY)

        async def stream(
            name: str,
        ) -> tuple[str, dict[str, Any], list[tuple[str, dict[str, Any]]]] | None:
            async with limit:
                try:
                    info = await self.stream_info(name)
                    return name, info, await self.consumer_configs(name)
                except NotFound:
                    return None

        for found in await asyncio.gather(*(stream(name) for name in missing)):
            if found is None:
                continue
            name, info, listed = found
            found_streams[name] = info["config"]
            found_state[name] = StreamState.from_info(info)
            for consumer_name, config in listed:
                found_consumers[(name, consumer_name)] = config

        async def consumer(stream: str, name: str) -> tuple[tuple[str, str], Any] | None:
            async with limit:
                try:
                    return (stream, name), (await self.consumer_info(stream, name))["config"]
                except NotFound:
                    return None

        wanted = sorted(
            (stream, name)
            for stream, name in unseen
            if stream in found_streams and (stream, name) not in found_consumers
        )
        for found_consumer in await asyncio.gather(*(consumer(s, n) for s, n in wanted)):
            if found_consumer is not None:
                found_consumers[found_consumer[0]] = found_consumer[1]
        unchanged = len(found_streams) == len(live.streams)
        if unchanged and len(found_consumers) == len(live.consumers):
            return live
        return replace(
            live, streams=found_streams, stream_state=found_state, consumers=found_consumers
        )


def _peers(info: Mapping[str, Any]) -> Iterator[str]:
    """The servers a StreamInfo's ``cluster`` names: its leader and its replicas."""
    cluster = info.get("cluster")
    if not isinstance(cluster, dict):
        return
    if isinstance(cluster.get("leader"), str) and cluster["leader"]:
        yield cluster["leader"]
    for replica in cluster.get("replicas") or ():
        if isinstance(replica, dict) and isinstance(replica.get("name"), str):
            yield replica["name"]
