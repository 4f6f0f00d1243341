"""Which stream under a temporary name is a killed run's copy (deleted) and which is
someone's archive (kept): decided by what it holds, never by its name or config alone."""

from __future__ import annotations

import pytest

from reconciler.backup.memory import _only_copies


def state(first: int, last: int, messages: int | None = None) -> dict[str, int]:
    count = last - first + 1 if messages is None else messages
    return {"first_seq": first, "last_seq": last, "messages": count}


@pytest.mark.parametrize(
    ("copy", "origin", "deleted"),
    [
        (state(0, 0, 0), state(8, 12), True),  # an empty copy holds nothing
        (state(8, 12), state(8, 12), True),  # caught up
        (state(8, 10), state(8, 12), True),  # killed mid-copy
        (state(1, 12), state(8, 12), False),  # kept 1-7, which the origin dropped
        (state(8, 13), state(8, 12), False),  # holds a message the origin never had
        (state(8, 12), state(0, 0, 0), False),  # the origin is empty: all of it is lost
    ],
)
def test_a_copy_is_deleted_only_when_its_origin_still_holds_every_message(
    copy: dict[str, int], origin: dict[str, int], deleted: bool
) -> None:
    assert _only_copies(copy, origin) is deleted
