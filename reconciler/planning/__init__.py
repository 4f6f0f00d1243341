"""Phases over specs and live state, no network: the plan, drift reports, export,
snapshots. One clock reading: a drift report's ``generated_at`` (``drift.from_plan``)."""
