"""A plan's capacity figures (``Plan.capacity``): the account's reserved bytes per
storage type and tier, and its streams, before and after the plan, against its limits.
Computed by :mod:`reconciler.planning.capacity`; shown by every plan renderer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconciler.errors import Problem

#: A plan ending at or above this share of a limit it adds to is a warning.
WARN_SHARE = 0.9
STORAGES = ("file", "memory")


@dataclass(frozen=True)
class Total:
    """One figure before and after the plan: ``what`` is ``file`` or ``memory`` (bytes
    reserved) or ``streams`` (a count); ``limit`` None means unlimited."""

    what: str
    tier: str | None
    before: int
    after: int
    #: the most at any time while the plan is applied (deletes run last)
    peak: int
    limit: int | None
    used: int | None = None  # bytes stored now, for file and memory
    #: ``account`` (``$JS.API.INFO``'s limits) or ``server`` (the server's own
    #: ``max_file_store``/``max_memory_store``, against every account's reservations)
    scope: str = "account"

    @property
    def is_bytes(self) -> bool:
        return self.what in STORAGES

    @property
    def near(self) -> bool:
        """At its peak within 10% of a limit, or over it."""
        return self.limit is not None and self.limit > 0 and self.peak >= WARN_SHARE * self.limit

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": self.what,
            "tier": self.tier,
            "before": self.before,
            "after": self.after,
            "peak": self.peak,
            "limit": self.limit,
            "used": self.used,
            "scope": self.scope,
        }


@dataclass(frozen=True)
class Capacity:
    """The totals a plan shows (``Plan.capacity``), and its warnings."""

    totals: tuple[Total, ...] = ()
    warnings: tuple[Problem, ...] = ()
    #: Streams apply makes before its first step, counted in after and peak (the apply
    #: lock's bucket when the account has none yet; a plan only).
    ahead: tuple[str, ...] = ()
    #: Where the server's own limits were read (``the monitoring endpoint http://...``),
    #: or, when ``server_known`` is false, why they are unknown.
    server: str = ""
    server_known: bool = False
    #: The apply lock's bucket when the account holds it: counted among its streams
    #: (the first apply makes it: ``streams: 1 -> 2`` after one stream was added).
    lock: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "totals": [total.to_json() for total in self.totals],
            "warnings": [warning.to_json() for warning in self.warnings],
            "ahead": list(self.ahead),
            "server_limits": {"known": self.server_known, "said": self.server},
            "lock": self.lock,
        }
