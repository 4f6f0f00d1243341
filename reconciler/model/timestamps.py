"""The one timestamp format of every record this tool writes: RFC 3339, UTC, ``Z``.

Snapshots (``captured_at``), drift reports and the fleet summary (``generated_at``) and
the apply lock (``acquired_at``, ``expires_at``) all write time through :func:`rfc3339`.
"""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(moment: datetime | float) -> str:
    """``2026-11-25T14:47:38Z``: to the second, in UTC. ``moment``: a datetime (naive
    means UTC) or POSIX seconds."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, UTC)
    elif moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
