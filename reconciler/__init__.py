"""jetstream-gitops: NATS JetStream streams, consumers and buckets kept in git.

The package reads in pipeline order::

    errors.py    problems and exceptions; locations.py: where a value came from
    specs/       files → documents (FILE:LINE) → validated Specs
    importers/   other tools' files as specs (``reconcile import``)
    model/       server facts, defaults, canonical configs, the diff, value display
    planning/    the Plan (typed steps), drift reports, export, snapshots
    execution/   the one executor, the apply lock, the engine's entry points
    jetstream/   the only code that talks to a server
    render/      plans and drift reports as text, JSON, Markdown, HTML
    console/     where people see it: a terminal, or GitHub Markdown
    cli/ fleet/  front doors (the ``reconcile`` command, the Spark pipeline)

This module is the small public API; names are imported on first use so that importing
the package (and ``reconcile --help``) stays fast. Every exception a caller can catch is
here: :class:`ReconcileError` and each of its subclasses (a test keeps it so).

A run is asked for with a :class:`PlanRequest` or :class:`ApplyRequest` and heard by an
:class:`Observer`: ``await plan_for(PlanRequest.of(["specs"], ConnectionOptions(servers=
"nats://127.0.0.1:4222")))``; ``plan``/``apply`` take the same fields as keywords.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reconciler.backup.layout import BackupError, BackupFileUnreadable
    from reconciler.errors import (
        ApplyFailed,
        ApplyReport,
        ConcurrentChange,
        ConnectError,
        ConnectRefused,
        LeftoverStream,
        LockError,
        LockWaitStopped,
        MigrationIncomplete,
        MigrationStalled,
        NoResponders,
        NotFound,
        PermissionDenied,
        PolicyDenied,
        Problem,
        ReconcileError,
        RefusedPlan,
        RequestTimeout,
        SavedPlanRefused,
        ServerError,
        SpecError,
        UnsupportedField,
    )
    from reconciler.execution.apply import ApplyResult, apply_plan
    from reconciler.execution.requests import ApplyRequest, Observer, PlanRequest
    from reconciler.execution.run import (
        EnvironmentPlan,
        apply,
        apply_for,
        fetch_live,
        plan,
        plan_environments,
        plan_for,
    )
    from reconciler.identity import Kind, ResourceRef
    from reconciler.jetstream import ConnectionOptions
    from reconciler.jetstream.snapshots import SnapshotFailed
    from reconciler.locations import Location
    from reconciler.planning.drift import DriftReport, from_plan
    from reconciler.planning.plan import build_plan
    from reconciler.planning.steps import Create, Delete, Plan, Replace, Update
    from reconciler.specs.spec import Spec
    from reconciler.specs.validate import load_specs, validate_documents

_WHERE = {
    "ApplyFailed": "reconciler.errors",
    "ApplyReport": "reconciler.errors",
    "ConcurrentChange": "reconciler.errors",
    "ConnectError": "reconciler.errors",
    "ConnectRefused": "reconciler.errors",
    "LeftoverStream": "reconciler.errors",
    "LockError": "reconciler.errors",
    "LockWaitStopped": "reconciler.errors",
    "NoResponders": "reconciler.errors",
    "MigrationIncomplete": "reconciler.errors",
    "MigrationStalled": "reconciler.errors",
    "NotFound": "reconciler.errors",
    "PermissionDenied": "reconciler.errors",
    "PolicyDenied": "reconciler.errors",
    "Problem": "reconciler.errors",
    "ReconcileError": "reconciler.errors",
    "RefusedPlan": "reconciler.errors",
    "RequestTimeout": "reconciler.errors",
    "SavedPlanRefused": "reconciler.errors",
    "ServerError": "reconciler.errors",
    "SpecError": "reconciler.errors",
    "UnsupportedField": "reconciler.errors",
    "SnapshotFailed": "reconciler.jetstream.snapshots",
    "BackupError": "reconciler.backup.layout",
    "BackupFileUnreadable": "reconciler.backup.layout",
    "Location": "reconciler.locations",
    "ApplyResult": "reconciler.execution.apply",
    "apply_plan": "reconciler.execution.apply",
    "ApplyRequest": "reconciler.execution.requests",
    "Observer": "reconciler.execution.requests",
    "PlanRequest": "reconciler.execution.requests",
    "EnvironmentPlan": "reconciler.execution.run",
    "apply_for": "reconciler.execution.run",
    "plan_environments": "reconciler.execution.run",
    "plan_for": "reconciler.execution.run",
    "apply": "reconciler.execution.run",
    "fetch_live": "reconciler.execution.run",
    "plan": "reconciler.execution.run",
    "Kind": "reconciler.identity",
    "ResourceRef": "reconciler.identity",
    "ConnectionOptions": "reconciler.jetstream",
    "DriftReport": "reconciler.planning.drift",
    "from_plan": "reconciler.planning.drift",
    "Create": "reconciler.planning.plan",
    "Delete": "reconciler.planning.plan",
    "Plan": "reconciler.planning.plan",
    "Replace": "reconciler.planning.plan",
    "Update": "reconciler.planning.plan",
    "build_plan": "reconciler.planning.plan",
    "Spec": "reconciler.specs.spec",
    "load_specs": "reconciler.specs.validate",
    "validate_documents": "reconciler.specs.validate",
}

__all__ = [
    "ApplyFailed",
    "ApplyReport",
    "ApplyRequest",
    "ApplyResult",
    "BackupError",
    "BackupFileUnreadable",
    "ConcurrentChange",
    "ConnectError",
    "ConnectRefused",
    "ConnectionOptions",
    "Create",
    "Delete",
    "DriftReport",
    "EnvironmentPlan",
    "Kind",
    "LeftoverStream",
    "Location",
    "LockError",
    "LockWaitStopped",
    "MigrationIncomplete",
    "MigrationStalled",
    "NoResponders",
    "NotFound",
    "Observer",
    "PermissionDenied",
    "Plan",
    "PlanRequest",
    "PolicyDenied",
    "Problem",
    "ReconcileError",
    "RefusedPlan",
    "Replace",
    "RequestTimeout",
    "ResourceRef",
    "SavedPlanRefused",
    "ServerError",
    "SnapshotFailed",
    "Spec",
    "SpecError",
    "UnsupportedField",
    "Update",
    "apply",
    "apply_for",
    "apply_plan",
    "build_plan",
    "fetch_live",
    "from_plan",
    "load_specs",
    "plan",
    "plan_environments",
    "plan_for",
    "validate_documents",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'reconciler' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
