"""Pure phases over specs and live state: the plan, drift reports, export, snapshots."""
