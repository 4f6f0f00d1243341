"""The colour of each drift status, one palette for every page that shows statuses.

The drift page (``reconcile drift --format html``, the Action's report) and the fleet
report both read it, so a status looks the same wherever a person meets it. The colours
keep their contrast on light and dark backgrounds.
"""

from __future__ import annotations

from reconciler.planning.drift import Status

STATUS_COLOURS = {
    "in_sync": "#2da44e",  # green
    "drifted": "#d29922",  # amber
    "missing": "#cf222e",  # red: declared, gone from the server
    "orphaned": "#0969da",  # blue: ours, declared by no spec
    "unmanaged": "#8250df",  # purple: nobody's
    "foreign": "#6e7781",  # grey: another owner's, not drift
}

#: The order statuses are shown in: what needs a person first.
STATUS_ORDER: tuple[Status, ...] = (
    "drifted",
    "missing",
    "orphaned",
    "unmanaged",
    "foreign",
    "in_sync",
)
