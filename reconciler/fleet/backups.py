"""The fleet's backups: per environment and stream, the age of the newest backup, and
the streams never backed up.

``--backups ROOT`` is a folder of backup folders: ``ROOT/<env>/manifest.json`` (one
backup per environment, written again each night) or ``ROOT/<env>/<any>/.../manifest.json``
(several). The environment is the first folder under ``ROOT``, as ``fleet/<env>/`` names
the spec folders (a manifest does not say which environment its server is). Manifests
are read on the driver with :func:`reconciler.backup.manifest.load` (a few kilobytes
each: one per backup, not per message) and are untrusted like any input: one that does
not load is reported and left out.

A stream is backed up by a manifest that lists it under ``streams`` (its snapshot is in
the folder); one under ``skipped`` is not (its reason is kept). The age of a stream's
newest backup is measured at the environment's latest snapshot capture (``captured_at``),
or at the time of the run when the environment has no snapshot; a backup taken after
that capture is 0 s old. The streams listed are those the environment's specs declare,
those its latest snapshot day holds, and those any of its manifests backed up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.backup.layout import MANIFEST, BackupError
from reconciler.backup.manifest import load
from reconciler.errors import ReconcileError
from reconciler.identity import is_reserved
from reconciler.model.timestamps import rfc3339

#: Stream rows listed in summary.json (never backed up first, then the oldest); the
#: Parquet output holds them all.
SUMMARY_ROWS = 1000
COLUMNS = (
    "env string, stream string, declared boolean, live boolean, backups long, "
    "newest timestamp, age_seconds long, messages long, reason string"
)


@dataclass(frozen=True)
class SeenBackup:
    """What the fleet needs of one manifest."""

    env: str
    folder: Path
    created: datetime
    messages: Mapping[str, int]  # stream -> messages in its snapshot
    skipped: Mapping[str, str]  # stream -> why it is not in the backup


def read_backups(root: Path) -> tuple[list[SeenBackup], list[str]]:
    """Every manifest under ``root`` (the environment: the first folder below it), and
    the problems of those that could not be read, each naming its file."""
    if not root.is_dir():
        raise ReconcileError(f"{root}: not a folder (expected ROOT/<env>/.../manifest.json)")
    seen, problems = [], []
    for path in sorted(root.rglob(MANIFEST)):
        parts = path.relative_to(root).parts
        if len(parts) < 2:
            problems.append(f"{path}: not in an environment's folder (ROOT/<env>/...)")
            continue
        try:
            seen.append(_seen(parts[0], path.parent))
        except (BackupError, ValueError) as err:
            problems.append(str(err) if isinstance(err, BackupError) else f"{path}: {err}")
    return seen, problems


def _seen(env: str, folder: Path) -> SeenBackup:
    manifest = load(folder)
    try:
        created = datetime.fromisoformat(manifest.created)
        if created.tzinfo is None:
            raise BackupError(f"{folder / MANIFEST}: created has no time zone")
        created = created.astimezone(UTC)  # OverflowError: out of years 1-9999 in UTC
    except (ValueError, OverflowError):
        raise BackupError(f"{folder / MANIFEST}: created is not a time") from None
    messages = {s.name: _count(s.state.get("messages")) for s in manifest.streams}
    return SeenBackup(env, folder, created, messages, dict(manifest.skipped))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def backup_rows(
    seen: Iterable[SeenBackup],
    *,
    declared: Mapping[str, set[str]],
    live: Mapping[str, set[str]],
    as_of: Mapping[str, datetime],
    now: datetime,
) -> list[dict[str, Any]]:
    """One row per environment and stream (columns: :data:`COLUMNS`), never backed up
    first, then the oldest newest backup first."""
    by_env: dict[str, list[SeenBackup]] = {}
    for backup in seen:
        by_env.setdefault(backup.env, []).append(backup)
    rows = []
    for env in sorted({*by_env, *declared, *live}):
        backups = sorted(by_env.get(env, []), key=lambda b: b.created)
        names = {
            *declared.get(env, ()),
            *live.get(env, ()),
            *(n for b in backups for n in b.messages),
        }
        when = as_of.get(env, now)
        for stream in sorted(n for n in names if not is_reserved(n)):
            rows.append(_row(env, stream, backups, declared, live, when))
    rows.sort(
        key=lambda r: (r["newest"] is not None, -(r["age_seconds"] or 0), r["env"], r["stream"])
    )
    return rows


def _stalest_first(row: Mapping[str, Any]) -> tuple[bool, int, str, str]:
    return (row["newest"] is not None, -(row["age_seconds"] or 0), row["env"], row["stream"])


def _row(
    env: str,
    stream: str,
    backups: list[SeenBackup],
    declared: Mapping[str, set[str]],
    live: Mapping[str, set[str]],
    when: datetime,
) -> dict[str, Any]:
    holding = [b for b in backups if stream in b.messages]
    newest = holding[-1] if holding else None
    reasons = [b.skipped[stream] for b in backups if stream in b.skipped]
    return {
        "env": env,
        "stream": stream,
        "declared": stream in declared.get(env, ()),
        "live": stream in live.get(env, ()),
        "backups": len(holding),
        "newest": newest.created if newest else None,
        "age_seconds": max(0, int((when - newest.created).total_seconds())) if newest else None,
        "messages": newest.messages[stream] if newest else None,
        "reason": None if newest or not reasons else reasons[-1],
    }


def backups_section(
    rows: list[dict[str, Any]],
    seen: list[SeenBackup],
    problems: list[str],
    as_of: Mapping[str, datetime],
) -> dict[str, Any]:
    """``summary.json``'s ``backups``: totals, per environment, the first rows."""
    by_env: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = by_env.setdefault(
            row["env"], {"streams": 0, "backed_up": 0, "never": 0, "oldest_age_seconds": None}
        )
        entry["streams"] += 1
        if row["newest"] is None:
            entry["never"] += 1
            continue
        entry["backed_up"] += 1
        entry["oldest_age_seconds"] = max(entry["oldest_age_seconds"] or 0, row["age_seconds"])
    for env, entry in by_env.items():
        newest = [b.created for b in seen if b.env == env]
        entry["newest_backup"] = rfc3339(max(newest)) if newest else None
        entry["age_measured_at"] = rfc3339(as_of[env]) if env in as_of else None
    return {
        "manifests": len(seen),
        "streams": len(rows),
        "never_backed_up": sum(r["newest"] is None for r in rows),
        "by_env": dict(sorted(by_env.items())),
        "rows": [_json_row(r) for r in rows[:SUMMARY_ROWS]],
        "problems": problems,
    }


def _json_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: rfc3339(v) if isinstance(v, datetime) else v for k, v in row.items()}
