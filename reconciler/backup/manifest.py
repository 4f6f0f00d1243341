"""``manifest.json``: what a complete backup holds, and the checks made against it.

Written last, so a folder whose manifest is missing is an interrupted backup (or one the
nats CLI made). It holds the server's identity and version (its address with any
credentials removed), the time, the specs' git commit when there is one, and per stream
its config and state as the snapshot holds them, each consumer's delivered and ack-floor
positions, and the SHA-256 and size of each file. No credential is written: the
connection's URL and options never reach it. Like the folder, it is untrusted when read
back: names are checked before they become paths, and nothing in it decides a
destructive step.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.backup.layout import (
    DATA,
    JOURNAL,
    MANIFEST,
    METADATA,
    SPEC_FOLDERS,
    SPECS,
    BackupError,
    StreamFolder,
    file_digest,
    folder_name,
    is_file,
    read_json,
    s2_problem,
    stream_folder,
    stream_folders,
    valid_folder_name,
    valid_stream_name,
)

FORMAT = "jetstream-gitops/backup"
FORMAT_VERSION = 1
#: The stream state fields a restore must give back exactly.
STATE_FIELDS = ("messages", "bytes", "first_seq", "last_seq", "first_ts", "last_ts")
#: A consumer's positions: (field, sub-field).
POSITIONS = (
    ("delivered", "consumer_seq"),
    ("delivered", "stream_seq"),
    ("ack_floor", "consumer_seq"),
    ("ack_floor", "stream_seq"),
)


@dataclass(frozen=True)
class FileRecord:
    sha256: str
    size: int


@dataclass(frozen=True)
class ConsumerRecord:
    """A consumer's positions at the snapshot. ``earliest``: its positions before the
    snapshot when they moved meanwhile (a consumer at work): a restore then lies between
    the two."""

    name: str
    positions: dict[str, int]
    earliest: dict[str, int] | None = None
    #: a memory stream's durable consumer: its config (its snapshot holds no consumers)
    config: dict[str, Any] | None = None


@dataclass(frozen=True)
class StreamRecord:
    name: str
    config: dict[str, Any]
    state: dict[str, Any]
    consumers: tuple[ConsumerRecord, ...] = ()
    files: Mapping[str, FileRecord] = field(default_factory=dict)
    #: ``first`` and ``last``: the snapshot's first and last message (:func:`mark`), so
    #: a restore can tell its own interrupted leftover from someone else's stream.
    marks: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    #: a memory stream: the config of the file mirror the snapshot was taken of
    #: (``config`` is the memory stream's own)
    mirror_config: dict[str, Any] | None = None
    #: the folder its files are in (the manifest's ``folder``: ``layout.folder_name``, or
    #: the name itself in backups made before that rule); "": the name itself
    folder: str = ""

    @property
    def folder_name(self) -> str:
        """The folder under the backup folder that holds its two files."""
        return self.folder or self.name

    @property
    def through_mirror(self) -> bool:
        """A memory stream, backed up through a temporary file mirror."""
        return self.mirror_config is not None

    @property
    def consumer_count(self) -> int:
        """The consumers the snapshot brings: those recorded, else (a nats CLI folder,
        whose records hold none) the count in its state."""
        counted = self.state.get("consumer_count")
        recorded = counted if isinstance(counted, int) and not isinstance(counted, bool) else 0
        return len(self.consumers) or max(recorded, 0)


@dataclass(frozen=True)
class Manifest:
    created: str
    server: dict[str, Any]
    streams: tuple[StreamRecord, ...]
    skipped: tuple[tuple[str, str], ...] = ()  # (stream, why)
    specs_commit: str | None = None
    #: ``<specs_folder>/<file>`` -> digest: the streams' configuration as spec files
    #: (export format)
    specs: Mapping[str, FileRecord] = field(default_factory=dict)
    #: where the spec files are: ``specs.d``; ``specs`` in backups made before it
    specs_folder: str = SPECS

    def own_files(self) -> set[str]:
        """The files this backup wrote, relative to its folder (``ORDERS/backup.json``,
        ``specs.d/stream-ORDERS.yaml``): what a later backup in the folder may replace."""
        found = {f"{s.folder_name}/{n}" for s in self.streams for n in (DATA, METADATA)}
        return found | {f"{self.specs_folder}/{n}" for n in self.specs}

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created": self.created,
            "server": self.server,
        }
        if self.specs_commit:
            body["specs_commit"] = self.specs_commit
        body["streams"] = [stream_json(s) for s in self.streams]
        body["skipped"] = [{"name": name, "reason": why} for name, why in self.skipped]
        if self.specs:
            body["specs"] = {n: {"sha256": f.sha256, "size": f.size} for n, f in self.specs.items()}
        body["specs_folder"] = self.specs_folder
        return body


def positions(info: Mapping[str, Any]) -> dict[str, int]:
    """A CONSUMER.INFO's delivered and ack-floor positions, flat (``delivered.stream_seq``)."""
    out = {}
    for part, name in POSITIONS:
        value = (info.get(part) or {}).get(name, 0)
        out[f"{part}.{name}"] = int(value) if isinstance(value, int) else 0
    return out


def mark(message: Mapping[str, Any]) -> dict[str, Any]:
    """A stored message (a STREAM.MSG.GET reply) as the manifest records it: sequence,
    time, subject and the SHA-256 of its headers and payload (as the server encodes them)."""
    body = json.dumps([message.get("hdrs") or "", message.get("data") or ""])
    return {
        "seq": int(message.get("seq") or 0),
        "time": str(message.get("time") or ""),
        "subject": str(message.get("subject") or ""),
        "sha256": hashlib.sha256(body.encode()).hexdigest(),
    }


def state_of(state: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a stream state a restore must give back."""
    return {name: state.get(name) for name in STATE_FIELDS}


def stream_json(record: StreamRecord) -> dict[str, Any]:
    """``record`` as the manifest writes it (also what a restore marker digests)."""
    consumers = []
    for c in record.consumers:
        entry: dict[str, Any] = {"name": c.name, "positions": c.positions}
        if c.earliest is not None:
            entry["earliest"] = c.earliest
        if c.config is not None:
            entry["config"] = c.config
        consumers.append(entry)
    body = {
        "name": record.name,
        "folder": record.folder_name,
        "config": record.config,
        "state": record.state,
        "consumers": consumers,
        "files": {n: {"sha256": f.sha256, "size": f.size} for n, f in record.files.items()},
    }
    if record.marks:
        body["marks"] = dict(record.marks)
    if record.mirror_config is not None:
        body["mirror_config"] = record.mirror_config
    return body


def load(root: Path) -> Manifest:
    """Read ``root/manifest.json``; a field of the wrong shape is an error naming it."""
    path = root / MANIFEST
    body = read_json(path)
    if body.get("format") != FORMAT or body.get("format_version") != FORMAT_VERSION:
        raise BackupError(f"{path}: not a manifest of format {FORMAT} {FORMAT_VERSION}")
    streams = body.get("streams")
    if not isinstance(streams, list):
        raise BackupError(f"{path}: streams is not a list")
    records = tuple(_stream_record(path, index, item) for index, item in enumerate(streams))
    server = body.get("server") if isinstance(body.get("server"), dict) else {}
    skipped = tuple(
        (str(s.get("name")), str(s.get("reason")))
        for s in body.get("skipped") or ()
        if isinstance(s, dict)
    )
    commit = body.get("specs_commit")
    specs_folder = body.get("specs_folder", "specs")  # absent: written before specs.d
    if specs_folder not in SPEC_FOLDERS:
        raise BackupError(f"{path}: specs_folder is not one of {', '.join(SPEC_FOLDERS)}")
    return Manifest(
        created=str(body.get("created", "")),
        server=dict(server or {}),
        streams=records,
        skipped=skipped,
        specs_commit=commit if isinstance(commit, str) else None,
        specs=_spec_files(path, body.get("specs")),
        specs_folder=str(specs_folder),
    )


def _spec_files(path: Path, listed: Any) -> dict[str, FileRecord]:
    """The manifest's ``specs``: plain ``*.yaml`` file names (they become paths)."""
    if not isinstance(listed, dict):
        return {}
    files = {}
    for name, entry in listed.items():
        plain = isinstance(name, str) and Path(name).name == name and not name.startswith(".")
        if not plain or not name.endswith(".yaml") or not isinstance(entry, dict):
            raise BackupError(f"{path}: specs: {name!r} is not a spec file name")
        files[name] = FileRecord(str(entry.get("sha256", "")), _size(f"{path}: specs", name, entry))
    return files


def _count(where: str, what: str, value: Any) -> int:
    """A count, size or sequence read from the folder: a whole number of 0 or more, or
    an error naming where (the folder may have been edited by hand, or by anyone)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BackupError(f"{where}: {what} is not a whole number: {repr(value)[:40]}")
    return value


def _size(where: str, name: str, entry: dict[str, Any]) -> int:
    """A file's recorded size (-1: none recorded, which no file has)."""
    return -1 if entry.get("size") is None else _count(where, f"{name} size", entry["size"])


#: The state fields counted in whole numbers (the others are times).
_COUNTED = ("messages", "bytes", "first_seq", "last_seq")


def checked_config(where: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a backup's stream config), its ``subjects`` a list of strings and its
    ``metadata`` strings by name when present (what this tool reads of it before the
    server does), or an error naming where."""
    subjects, metadata = config.get("subjects"), config.get("metadata")
    if subjects is not None and (
        not isinstance(subjects, list) or not all(isinstance(s, str) for s in subjects)
    ):
        raise BackupError(f"{where}: config.subjects is not a list of subjects")
    if metadata is not None and (
        not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values())
    ):
        raise BackupError(f"{where}: config.metadata is not a mapping of strings")
    return config


def checked_state(where: str, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (a backup's, from its manifest or a ``backup.json``), each count a
    whole number when present, or an error naming where."""
    for name in _COUNTED:
        if state.get(name) is not None:
            _count(where, f"state.{name}", state[name])
    return state


def _stream_record(path: Path, index: int, item: Any) -> StreamRecord:
    where = f"{path}: streams[{index}]"
    if not isinstance(item, dict) or not valid_stream_name(item.get("name")):
        raise BackupError(f"{where}: no valid stream name")
    name = str(item["name"])
    folder = item.get("folder", name)  # every manifest has one; the name: as it was
    if not valid_folder_name(folder):
        raise BackupError(f"{where}: folder is not the name of a folder of the backup")
    config, state = item.get("config"), item.get("state")
    if not isinstance(config, dict) or config.get("name") != name or not isinstance(state, dict):
        raise BackupError(f"{where}: config or state missing, or config names another stream")
    checked_state(where, state)
    checked_config(where, config)
    listed = item.get("files") or {}
    if not isinstance(listed, dict):
        raise BackupError(f"{where}: files is not a mapping of file names")
    files = {}
    for file_name, entry in listed.items():
        if file_name not in (DATA, METADATA) or not isinstance(entry, dict):
            raise BackupError(f"{where}: unexpected file {file_name!r}")
        files[file_name] = FileRecord(str(entry.get("sha256", "")), _size(where, file_name, entry))
    if not isinstance(item.get("consumers") or (), list | tuple):
        raise BackupError(f"{where}: consumers is not a list")
    consumers = tuple(_consumer(where, c) for c in item.get("consumers") or ())
    raw = item.get("marks")
    raw = raw if isinstance(raw, dict) else {}
    marks = {k: dict(v) for k, v in raw.items() if k in ("first", "last") and isinstance(v, dict)}
    mirror = item.get("mirror_config")
    if mirror is not None and (
        not isinstance(mirror, dict) or not isinstance(mirror.get("name"), str)
    ):
        raise BackupError(f"{where}: mirror_config is not a stream config")
    if mirror is not None:
        checked_config(f"{where}: mirror_config", mirror)
    own = "" if folder == name else str(folder)  # "": the name itself
    return StreamRecord(name, config, state, consumers, files, marks, mirror, own)


def _consumer(where: str, item: Any) -> ConsumerRecord:
    if not isinstance(item, dict) or not isinstance(item.get("positions"), dict):
        raise BackupError(f"{where}: a consumer without positions")
    earliest, config = item.get("earliest"), item.get("config")
    return ConsumerRecord(
        str(item.get("name")),
        {
            str(k): _count(where, f"consumer position {repr(k)[:40]}", v)
            for k, v in item["positions"].items()
        },
        {str(k): _count(where, f"consumer position {repr(k)[:40]}", v) for k, v in earliest.items()}
        if isinstance(earliest, dict)
        else None,
        dict(config) if isinstance(config, dict) else None,
    )


# -- what a folder holds ---------------------------------------------------------------------
@dataclass(frozen=True)
class Contents:
    """The streams of a backup folder (from its manifest, or from its backup.json files),
    and the manifest when there is one."""

    root: Path
    streams: tuple[StreamRecord, ...]
    manifest: Manifest | None

    def folder(self, name: str) -> StreamFolder:
        """Where stream ``name``'s two files are: the folder its record names (the
        manifest's, or the one a nats CLI backup holds it in)."""
        if self.manifest is None and (self.root / METADATA).is_file():
            return StreamFolder(name, self.root)  # a `nats stream backup` folder
        record = next((s for s in self.streams if s.name == name), None)
        return stream_folder(self.root, name, record.folder_name if record else folder_name(name))


def read_contents(root: Path) -> Contents:
    """What ``root`` holds: our manifest's streams, else the nats CLI's folders (config
    and state from each ``backup.json``; no digests, no consumer positions). A folder
    our backup was writing when it stopped is none of them (refused, named)."""
    if (root / MANIFEST).is_file():
        found = load(root)
        return Contents(root, found.streams, found)
    if (root / JOURNAL).exists():
        raise BackupError(
            f"{root / JOURNAL}: an interrupted or failed backup (it has no manifest): run "
            "the backup again; or remove this file to read its complete stream folders "
            "as a nats CLI backup (no digests)"
        )
    records = []
    for folder in stream_folders(root):
        body = read_json(folder.metadata)
        state = body.get("state")
        records.append(
            StreamRecord(
                folder.name,
                checked_config(str(folder.metadata), dict(body["config"])),
                checked_state(str(folder.metadata), state) if isinstance(state, dict) else {},
                folder="" if folder.folder == root else folder.folder.name,
            )
        )
    if not records:
        raise BackupError(f"{root}: no manifest.json and no stream folder with a backup.json")
    return Contents(root, tuple(records), None)


def file_problems(contents: Contents, record: StreamRecord) -> list[str]:
    """Why one stream's files cannot be restored: missing, a digest or size that is not
    the manifest's, or a snapshot that is not a whole S2 stream. Each names the file."""
    folder = contents.folder(record.name)
    problems = []
    for path in (folder.metadata, folder.data):
        if not is_file(path):
            problems.append(f"{path}: missing")
    if problems:
        return problems
    if contents.manifest is not None:
        for name in (METADATA, DATA):
            expected = record.files.get(name)
            path = folder.folder / name
            if expected is None:
                problems.append(f"{path}: the manifest has no digest for it")
                continue
            digest, size = file_digest(path)
            if size != expected.size:
                problems.append(f"{path}: {size} bytes, the manifest says {expected.size}")
            elif digest != expected.sha256:
                problems.append(f"{path}: SHA-256 differs from the manifest's (damaged?)")
    if not problems and (why := s2_problem(folder.data)):
        problems.append(f"{folder.data}: {why}")
    if not problems:
        problems += _metadata_problems(folder, record)
    return problems


def _metadata_problems(folder: StreamFolder, record: StreamRecord) -> list[str]:
    config = read_json(folder.metadata).get("config")
    if not isinstance(config, dict) or config.get("name") != record.name:
        return [f"{folder.metadata}: config.name is not {record.name!r}"]
    return []


def completeness(contents: Contents) -> list[str]:
    """What is wrong with the folder as a whole (the manifest's own view of it; without
    one, a stream that two folders hold, as a backup moving a stream to its folder of
    :func:`~reconciler.backup.layout.folder_name` leaves them when it fails half-way:
    which is the newer copy is not known, so neither is restored)."""
    names = [s.name for s in contents.streams]
    twice = sorted({n for n in names if names.count(n) > 1})
    if contents.manifest is None:
        return [
            f"{contents.root}: stream {name!r} is in more than one folder ("
            + ", ".join(
                str(contents.root / s.folder_name) for s in contents.streams if s.name == name
            )
            + "): remove those not to restore"
            for name in twice
        ]
    problems = [f"{contents.root / MANIFEST}: stream {name!r} listed twice" for name in twice]
    for record in contents.streams:
        missing = {DATA, METADATA} - set(record.files)
        if missing:
            problems.append(
                f"{contents.root / MANIFEST}: stream {record.name!r} lacks a digest of "
                + ", ".join(sorted(missing))
            )
    return problems
