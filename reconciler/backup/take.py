"""``reconcile backup``: data snapshots of streams into a backup folder, manifest last.

The folder is claimed first (:mod:`reconciler.backup.folder`): locked, and refused when
it holds anything that is not an earlier backup's where this one would write. Then, per
stream, in turn up to ``parallel`` at once (the server holds each stream's
configuration and expiry while its snapshot is taken, so many large streams are never
snapshot at once without a bound):

1. the consumers' positions are read, the stream's old ``backup.json`` removed;
2. the snapshot arrives chunk by chunk into ``.stream.tar.s2.partial`` (hashed as it is
   written), is synced and renamed;
3. the consumers' positions are read again (a consumer at work moved: both are kept),
   then ``backup.json`` is written.

``manifest.json`` is removed first and written only when every stream succeeded and
every file it lists is in place: an interrupted or failed backup leaves no manifest, and
no stream folder whose ``backup.json`` is older than its snapshot. A file that cannot be
written (a full disk) fails its stream with the folder named. The tool's own streams
(its apply lock's bucket, a backup's temporary mirror) are never backed up.

A memory stream is snapshot through a temporary file mirror, a stream the backup makes
and deletes: that change to the server is made under the apply lock (the lock stage,
``execution.stages.locked``, as apply and restore take it), taken before the first
mirror is made and held until the backup ends. A backup of file streams only changes
nothing on the server and takes no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from reconciler.backup.folder import Claim, claim
from reconciler.backup.layout import (
    DATA,
    FOLDER_MODE,
    METADATA,
    SPECS,
    AtomicFile,
    BackupError,
    StreamFolder,
    folder_name,
    stream_folder,
    write_json,
)
from reconciler.backup.manifest import (
    ConsumerRecord,
    FileRecord,
    Manifest,
    StreamRecord,
    mark,
    positions,
)
from reconciler.backup.memory import caught_up, drop_mirror, mirror_of
from reconciler.backup.specs import spec_texts, write_specs
from reconciler.errors import NotFound, ReconcileError
from reconciler.execution import stages
from reconciler.execution.migrate import without_server_metadata
from reconciler.execution.requests import QUIET, Observer
from reconciler.identity import BACKUP_PREFIX, ENTRY, backup_mirror, tools_own
from reconciler.jetstream import ConnectionOptions, JetStreamClient, open_client
from reconciler.jetstream.snapshots import SNAPSHOT_CHUNK, snapshot_stream
from reconciler.model.values import printable
from reconciler.planning.export import apart_in_case
from reconciler.specs.fingerprint import git_commit
from reconciler.specs.validate import load_specs

T = TypeVar("T")
#: The longest stream name nats-server accepts, in bytes (``JSMaxNameLen``).
MAX_NAME_BYTES = 255
#: Streams snapshot at once unless told otherwise.
PARALLEL = 4

Notice = Callable[[str], None]


class _MirrorLock:
    """The apply lock around a backup's temporary mirrors: taken (waiting up to
    ``timeout`` s; None: ``--no-lock``) before the first mirror is made, held by
    ``stack`` until the backup ends; each mirror is made only while the lease is ours."""

    def __init__(
        self,
        client: JetStreamClient,
        stack: contextlib.AsyncExitStack,
        timeout: float | None,
        on_notice: Notice,
    ) -> None:
        self._client, self._stack, self._timeout = client, stack, timeout
        self._on_notice = on_notice
        self._taking = asyncio.Lock()
        self._held: stages.Held | None = None
        self._refused: ReconcileError | None = None

    async def verified(self) -> None:
        """Once the lock is held (taken on the first call), the lease still ours; a lock
        not had (another run held it past the timeout) fails every later call at once."""
        async with self._taking:
            if self._refused is not None:
                raise self._refused
            if self._held is None:
                try:
                    self._held = await self._stack.enter_async_context(
                        stages.locked(
                            self._client,
                            timeout=self._timeout,
                            on_notice=self._on_notice,
                            keep_lineage=False,
                        )
                    )
                except ReconcileError as err:
                    self._refused = err
                    raise
        if (guard := self._held.guard) is not None:
            await guard()


@dataclass(frozen=True)
class Selection:
    """Which streams: ``everything`` on the server, or ``declared`` (the specs'), then
    only ``only`` when given."""

    declared: tuple[str, ...] = ()
    everything: bool = False
    only: tuple[str, ...] = ()


@dataclass(frozen=True)
class BackupResult:
    manifest: Manifest
    out: Path
    missing: tuple[str, ...]  # declared or named, not on the server
    seconds: float

    @property
    def size(self) -> int:
        return sum(f.size for s in self.manifest.streams for f in s.files.values())


def declared_streams(paths: Sequence[Path], overlays: Sequence[Path] = ()) -> tuple[str, ...]:
    """The streams the specs declare (buckets as their KV_/OBJ_ streams), validated first."""
    specs = load_specs(list(paths), overlays=list(overlays))
    names = {s.stream_name for s in specs if s.kind not in ("Consumer", ENTRY)}
    return tuple(sorted(names))


def specs_commit(paths: Sequence[Path]) -> str | None:
    """The commit checked out where the specs are (``specs.fingerprint.git_commit``, the
    saved plans' rule: read from ``.git``, else ``git rev-parse``); None outside git."""
    if not paths:
        return None
    first = Path(paths[0]).resolve()
    return git_commit(first if first.is_dir() else first.parent)


async def _chosen(
    client: JetStreamClient, selection: Selection, on_notice: Notice
) -> tuple[list[str], list[str]]:
    """(streams to back up, streams asked for that the server does not hold)."""
    on_server = set(await client.stream_names())
    if own := sorted(n for n in selection.only if tools_own(n)):
        raise BackupError(
            f"--stream names the tool's own stream(s), not user data: {', '.join(own)}"
        )
    if selection.everything and not selection.only:
        for name in sorted(n for n in on_server if tools_own(n)):  # said, never silent
            on_notice(f"{name}: the tool's own stream, not user data: not backed up")
    if selection.only:
        wanted = list(dict.fromkeys(selection.only))
        if selection.declared and not selection.everything:
            outside = [n for n in wanted if n not in selection.declared]
            if outside:
                raise BackupError(
                    "--stream names a stream the specs do not declare (use --all): "
                    + ", ".join(outside)
                )
    elif selection.everything:
        wanted = sorted(n for n in on_server if not tools_own(n))
    else:
        wanted = list(selection.declared)
    return [n for n in wanted if n in on_server], [n for n in wanted if n not in on_server]


def _refuse_lost(out: Path, selection: Selection, missing: Sequence[str], held: Claim) -> None:
    """Refuse, before anything is changed, a backup that would remove the earlier backup's
    copy of a stream it was asked for and cannot take: one named with ``--stream`` that
    the server does not hold (a typo left the folder with nothing), or one the specs
    declare that the server no longer holds while the folder's earlier backup does (the
    only copy left of a stream lost on the server)."""
    named = [n for n in missing if n in selection.only]
    if named:
        raise BackupError(
            "--stream names stream(s) the server does not hold: "
            + ", ".join(repr(n) for n in named)
            + f"; nothing in {out} was changed"
        )
    kept = [n for n in missing if held.holds(n)]
    if kept:
        raise BackupError(
            f"the server does not hold {', '.join(kept)}, which the earlier backup in {out} "
            "holds: its copy is not removed; nothing was changed. Back up into another "
            "folder, or remove the stream's folder there to let it go"
        )


#: Why a stream listed on the server was not backed up: gone when its snapshot began.
DELETED = "deleted before its snapshot"


def _refuse_lost_meanwhile(
    out: Path,
    selection: Selection,
    names: Sequence[str],
    results: Sequence[object],
    held: Claim,
) -> None:
    """:func:`_refuse_lost` for a declared stream deleted on the server while the backup
    ran (listed, gone when its snapshot began): the earlier backup's copy, maybe the only
    one left, stays where it is, and no manifest is written (one would let the next
    backup remove that copy as no longer listed). ``--all`` follows the server: a stream
    gone from it is let go of, whenever it went."""
    if selection.everything:
        return
    gone = [n for n, r in zip(names, results, strict=True) if r == DELETED and held.holds(n)]
    if gone:
        raise BackupError(
            f"stream(s) {', '.join(gone)} were deleted on the server during the backup, and "
            f"the earlier backup in {out} holds them: their copy is kept, and no manifest "
            "was written (the folder is not a backup). Run it again once you know whether "
            "they should go: the next run refuses as long as the specs declare them and "
            "their folder is there (remove either to let them go)"
        )


async def _refuse_written(client: JetStreamClient, names: Sequence[str], observed_at: str) -> None:
    """Refuse, before anything is written, the backup of an environment in ``mode:
    observe`` (declared at ``observed_at``: read and report, never written) that selects
    a memory stream: its backup makes a temporary file mirror on the server (and the
    mirror a consumer on the stream) under the apply lock, all writes."""
    memory = []
    for name in names:
        try:
            info = await client.stream_info(name)
        except NotFound:
            continue  # deleted since it was listed: said when its snapshot is taken
        if (info.get("config") or {}).get("storage") == "memory":
            memory.append(name)
    if memory:
        raise BackupError(
            f"refusing to back up: the environment has lifecycle mode observe ({observed_at}): "
            "never written, and a memory stream's backup makes a temporary file mirror on "
            f"the server: {', '.join(printable(n) for n in memory)}. Nothing was written. Leave "
            "them out (--stream for the others), or back them up with an environment that "
            "manages the account (docs/backup.md)"
        )


async def take_backup(
    options: ConnectionOptions,
    out: Path,
    selection: Selection,
    *,
    commit: str | None = None,
    parallel: int = PARALLEL,
    chunk_size: int = SNAPSHOT_CHUNK,
    observer: Observer = QUIET,
    lock_timeout: float | None = stages.LOCK_TIMEOUT,
    observed_at: str = "",
) -> BackupResult:
    """Back up the selected streams into ``out``; the manifest is written last, and only
    when every stream's snapshot is complete (else :class:`BackupError` lists them). The
    ``observer`` hears the notices and each snapshot's :meth:`~Observer.progress`. A
    memory stream's temporary mirror is made under the apply lock (``lock_timeout``:
    how long to wait for it; None: no lock). ``observed_at``: where the environment
    declares ``mode: observe`` (never written): a memory stream selected then refuses
    the backup before anything is written (:func:`_refuse_written`)."""
    started = time.monotonic()
    on_notice = observer.notice
    with claim(out) as held:
        async with (
            open_client(options, on_notice=on_notice) as client,
            contextlib.AsyncExitStack() as stack,
        ):
            mirrors = _MirrorLock(client, stack, lock_timeout, on_notice)
            names, missing = await _chosen(client, selection, on_notice)
            _refuse_lost(out, selection, missing, held)
            if observed_at:
                await _refuse_written(client, names, observed_at)
            for name in missing:
                on_notice(f"warning: stream {name} is not on the server: not backed up")
            folders = dict(zip(names, apart_in_case(map(folder_name, names), ""), strict=True))
            _written(out, held.start, folders.values())
            server = await _server_identity(client)
            limit = asyncio.Semaphore(max(1, parallel))

            async def one(name: str) -> StreamRecord | str | ReconcileError:
                async with limit:
                    try:
                        return await _backup_stream(
                            client,
                            stream_folder(out, name, folders[name]),
                            chunk_size,
                            observer,
                            mirrors,
                        )
                    except ReconcileError as err:
                        return err

            results = await asyncio.gather(*(one(name) for name in names))
            _failed(names, results)
            _refuse_lost_meanwhile(out, selection, names, results, held)
            texts = await spec_texts(client, names, on_notice)
        _written(out, held.add, [f"{SPECS}/{name}" for name, _ in texts])
        spec_files = _written(out, write_specs, out / SPECS, texts)
        records = [r for r in results if isinstance(r, StreamRecord)]
        skipped = tuple((n, r) for n, r in zip(names, results, strict=True) if isinstance(r, str))
        for name, why in skipped:
            on_notice(f"warning: stream {name} not backed up: {why}")
        manifest = Manifest(
            created=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            server=server,
            streams=tuple(records),
            skipped=skipped,
            specs_commit=commit,
            specs=spec_files,
        )
        _written(out, held.finish, manifest)
    return BackupResult(manifest, out, tuple(missing), time.monotonic() - started)


def _failed(names: Sequence[str], results: Sequence[object]) -> None:
    """Every stream that failed, as one error (one line when it is one stream)."""
    failed = [(n, r) for n, r in zip(names, results, strict=True) if isinstance(r, Exception)]
    if len(failed) == 1:
        name, err = failed[0]
        raise BackupError(
            f"backup incomplete, no manifest was written (run it again): {name}: {err}"
        )
    if failed:
        lines = "\n".join(f"    {name}: {err}" for name, err in failed)
        raise BackupError(
            f"backup incomplete: {len(failed)} stream(s) failed; no manifest was written, "
            f"the folder is not a backup. Run it again.\n{lines}"
        )


def _written(out: Path, write: Callable[..., T], *args: Any) -> T:
    """``write(*args)``; a file that cannot be written (a full disk, a read-only
    folder) is a :class:`BackupError` naming the folder."""
    try:
        return write(*args)
    except OSError as err:
        where = err.filename or out
        raise BackupError(
            f"cannot write into {where}: {err.strerror or err}; no manifest was written"
        ) from None


async def _server_identity(client: JetStreamClient) -> dict[str, Any]:
    """Who took the snapshots: name, id, version, cluster, domain and the address with
    any credentials removed (never the URL as configured)."""
    info = await client.server_info()
    raw: dict[str, Any] = dict(getattr(client.nc, "_server_info", None) or {})
    found = {
        "name": raw.get("server_name"),
        "id": raw.get("server_id"),
        "version": info.version,
        "api_level": info.api_level,
        "cluster": raw.get("cluster"),
        "domain": info.domain,
        "address": info.address,
    }
    return {k: v for k, v in found.items() if v not in (None, "")}


async def _consumer_positions(client: JetStreamClient, name: str) -> dict[str, dict[str, int]]:
    return {str(c.get("name")): positions(c) for c in await client.list_consumers(name)}


async def _backup_stream(
    client: JetStreamClient,
    folder: StreamFolder,
    chunk_size: int,
    observer: Observer,
    mirrors: _MirrorLock,
) -> StreamRecord | str:
    """One stream's snapshot and backup.json into ``folder``; a reason instead when it
    cannot be taken."""
    name = folder.name
    try:
        info = await client.stream_info(name)
    except NotFound:
        return DELETED
    try:
        if (info.get("config") or {}).get("storage") == "memory":
            return await _backup_memory(client, folder, info, chunk_size, observer, mirrors)
        return await _snapshot(client, folder, name, name, chunk_size, observer)
    except OSError as err:
        where = err.filename or folder.folder
        raise BackupError(f"cannot write into {where}: {err.strerror or err}") from None


async def _snapshot(
    client: JetStreamClient,
    folder: StreamFolder,
    name: str,
    source: str,
    chunk_size: int,
    observer: Observer,
    memory: Mapping[str, Any] | None = None,
) -> StreamRecord:
    """The snapshot of ``source`` into ``name``'s folder, consumers' positions around it
    (``memory``: the config of memory stream ``name``, ``source`` its file mirror)."""
    before = await _consumer_positions(client, name)
    folder.folder.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    folder.metadata.unlink(missing_ok=True)  # never beside a newer snapshot
    data = AtomicFile(folder.data)
    received = 0

    def write(chunk: bytes) -> None:
        nonlocal received
        data.write(chunk)
        received += len(chunk)
        observer.progress(f"backed up {name}", received, None)

    try:
        snap = await snapshot_stream(
            client, source, write, chunk_size=chunk_size, consumers=memory is None
        )
        await asyncio.to_thread(data.commit)
    except BaseException:
        data.discard()
        raise
    after = await _consumer_positions(client, name)
    marks = await _marks(client, source, snap.state)
    config = snap.config if memory is None else dict(memory)
    metadata = {"config": config, "state": snap.state}
    meta_digest, meta_size = write_json(folder.metadata, metadata)
    observer.progress(f"backed up {name}", received, received)
    configs = {} if memory is None else await _consumer_configs(client, name)
    consumers = tuple(
        ConsumerRecord(
            c,
            after[c],
            None if before.get(c) in (None, after[c]) else before[c],
            configs.get(c),
        )
        for c in sorted(after)
        if memory is None or c in configs
    )
    files = {DATA: FileRecord(data.sha256, data.size), METADATA: FileRecord(meta_digest, meta_size)}
    where = folder.folder.name
    if memory is None:
        return StreamRecord(name, snap.config, snap.state, consumers, files, marks, folder=where)
    state = await _memory_state(client, name, snap.state)
    return StreamRecord(name, config, state, consumers, files, marks, snap.config, where)


async def _backup_memory(
    client: JetStreamClient,
    folder: StreamFolder,
    info: Mapping[str, Any],
    chunk_size: int,
    observer: Observer,
    mirrors: _MirrorLock,
) -> StreamRecord:
    """A memory stream (nats-server cannot snapshot memory storage): a temporary FILE
    stream mirroring it (sequences, times and headers kept), made under the apply lock,
    caught up, snapshot, and deleted whatever happens."""
    name = folder.name
    mirror = backup_mirror(name)
    if len(mirror.encode()) > MAX_NAME_BYTES:
        most = MAX_NAME_BYTES - len(BACKUP_PREFIX)
        raise BackupError(
            f"a memory stream is backed up through a file mirror named {BACKUP_PREFIX}"
            f"<stream>, and nats-server allows {MAX_NAME_BYTES} bytes: this stream's name "
            f"is {len(name.encode())} bytes, at most {most} can be backed up"
        )
    await mirrors.verified()
    await drop_mirror(client, mirror, name)  # a killed run's
    goal = int((info.get("state") or {}).get("last_seq") or 0)
    await client.create_stream(mirror_of(name, mirror))
    try:
        await caught_up(client, mirror, name, goal)
        config = without_server_metadata(info.get("config") or {})
        return await _snapshot(client, folder, name, mirror, chunk_size, observer, config)
    finally:
        with contextlib.suppress(ReconcileError):
            await client.delete_stream(mirror)


async def _consumer_configs(client: JetStreamClient, name: str) -> dict[str, dict[str, Any]]:
    """Each durable consumer's config (less the server's own metadata): a memory stream's
    snapshot is its mirror's, which holds none of them."""
    found = {}
    for consumer in await client.list_consumers(name):
        config = dict(consumer.get("config") or {})
        if config.get("durable_name"):
            found[str(consumer["name"])] = without_server_metadata(config)
    return found


async def _memory_state(
    client: JetStreamClient, name: str, state: Mapping[str, Any]
) -> dict[str, Any]:
    """The snapshot's state with the memory stream's bytes (memory storage counts bytes
    differently from the mirror's file storage) when the stream still holds the same
    messages; else without bytes (not compared)."""
    live = (await client.stream_info(name)).get("state") or {}
    same = all(live.get(k) == state.get(k) for k in ("messages", "first_seq", "last_seq"))
    out = {k: v for k, v in state.items() if k != "bytes"}
    if same:
        out["bytes"] = live.get("bytes")
    return out


async def _marks(
    client: JetStreamClient, name: str, state: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The snapshot's first and last message as the manifest records them (one gone
    since the snapshot, removed by a limit, is left out)."""
    if not int(state.get("messages") or 0):
        return {}
    found = {}
    for which in ("first", "last"):
        try:
            message = await client.stored_message(name, {"seq": int(state[f"{which}_seq"])})
        except (ReconcileError, KeyError, ValueError, TypeError):
            continue
        if message is not None:
            found[which] = mark(message)
    return found
