"""``DIR/specs.d/``: the configuration of a backup's streams as spec files.

One file per stream or bucket with its consumers, in the export format (the text
``reconcile export`` writes, from :mod:`reconciler.planning.export` and
:mod:`reconciler.planning.export_text`: one rule), so ``reconcile plan DIR/specs.d``
against the server backed up is empty and the folder can be applied to a new server
before its data is restored. Each file is written atomically (temp, sync, rename) before
the manifest, which lists its SHA-256 and size like every other file. Specs hold
configuration only: KeyValue values are data, in the snapshots.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from reconciler.backup.layout import (
    FOLDER_MODE,
    MANIFEST,
    AtomicFile,
    BackupError,
    file_digest,
    sync_folder,
)
from reconciler.backup.manifest import Contents, FileRecord
from reconciler.jetstream import JetStreamClient
from reconciler.model.state import LiveState
from reconciler.planning.export import export_state
from reconciler.planning.export_text import file_texts


async def spec_texts(
    client: JetStreamClient, names: Iterable[str], on_notice: Callable[[str], None]
) -> list[tuple[str, str]]:
    """``names`` (with their consumers, whoever manages them) as exported spec files:
    (file name, text)."""
    chosen = set(names)
    live = await client.fetch_live()
    subset = LiveState(
        server=live.server,
        streams={n: c for n, c in live.streams.items() if n in chosen},
        consumers={k: c for k, c in live.consumers.items() if k[0] in chosen},
    )
    files = export_state(subset, owner=None, on_skip=on_notice)
    texts = file_texts(files, command="export")
    for name, _ in texts:
        if Path(name).name != name or name.startswith("."):
            raise BackupError(f"{name!r} is not a plain file name: no spec file written")
    return texts


def write_specs(folder: Path, texts: Iterable[tuple[str, str]]) -> dict[str, FileRecord]:
    """Each file into ``folder``, atomically; each file's digest."""
    folder.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    written = {name: _write(folder / name, text) for name, text in texts}
    sync_folder(folder)
    return written


def _write(target: Path, text: str) -> FileRecord:
    out = AtomicFile(target)
    try:
        out.write(text.encode())
        out.commit()
    except BaseException:
        out.discard()
        raise
    return FileRecord(out.sha256, out.size)


def spec_problems(contents: Contents) -> list[str]:
    """Why the manifest's spec folder is not what it lists: a file missing, changed (size
    or SHA-256), or not listed at all. Each names the file; none without a manifest."""
    if contents.manifest is None:
        return []
    folder = contents.root / contents.manifest.specs_folder
    listed = contents.manifest.specs
    problems = []
    for name, expected in sorted(listed.items()):
        path = folder / name
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        digest, size = file_digest(path)
        if size != expected.size or digest != expected.sha256:
            problems.append(f"{path}: differs from the manifest's SHA-256 (changed?)")
    if folder.is_dir():
        problems += [
            f"{path}: not in {contents.root / MANIFEST} (added after the backup?)"
            for path in sorted(folder.iterdir())
            if path.name not in listed
        ]
    return problems
