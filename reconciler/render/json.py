"""A plan as JSON, the document described by ``schemas/plan.schema.json``; and
``apply --format json``'s JSON Lines: the plan, each step's outcome, the result."""

from __future__ import annotations

import json
from typing import Any

from reconciler.errors import ReconcileError, RefusalKind, SpecError, UnsupportedField
from reconciler.model.values import inert_json
from reconciler.planning.steps import Plan, Step


def render_json(plan: Plan) -> str:
    return inert_json(json.dumps(plan.to_json(), indent=2, sort_keys=False))


def json_line(document: dict[str, Any]) -> str:
    """One JSON Lines record: ``document`` on one line, inert in a CI log. Every
    character outside ASCII is a ``\\u`` escape, as in ``plan --format json``: a name or
    owner from the server holding U+2028, NEL or a C1/bidi control (which
    ``str.splitlines`` splits on, and a terminal acts on) stays inside its string."""
    return inert_json(json.dumps(document, separators=(",", ":")))


def plan_record(plan: Plan) -> dict[str, Any]:
    """``{"type": "plan", "plan": <the plan document>}``: the first line of an apply."""
    return {"type": "plan", "plan": plan.to_json()}


def step_record(step: Step, outcome: str, error: str | None) -> dict[str, Any]:
    """``{"type": "step", ...}``: one step's outcome (``applied``, ``failed`` or
    ``skipped``; ``error`` the server's or the client's words when it failed)."""
    return {
        "type": "step",
        "action": str(step.action),
        "kind": step.kind,
        "name": step.name,
        "stream": step.stream,
        "outcome": outcome,
        "error": error,
    }


def result_record(
    *,
    applied: int,
    failed: int,
    skipped: int,
    dry_run: bool,
    interrupted: bool,
    cancelled: bool,
) -> dict[str, Any]:
    """``{"type": "result", ...}``: how the apply ended, the last line."""
    return {
        "type": "result",
        "ok": not failed and not interrupted and not cancelled,
        "applied": applied,
        "failed": failed,
        "skipped": skipped,
        "dry_run": dry_run,
        "interrupted": interrupted,
        "cancelled": cancelled,
    }


def error_record(err: ReconcileError) -> dict[str, Any]:
    """A run that ended in an error, as ``--format json`` writes it on stdout (the
    document described by ``schemas/error.schema.json``): ``kind``, why the verdict
    refused (a :class:`~reconciler.errors.RefusalKind` value; null for any other error),
    the exit status, the message and its detail lines, and each FILE:LINE problem (an
    invalid spec, a check that refused the plan) as ``validate --format json`` gives it.
    The words are those on stderr, where a secret never is; the JSON is ASCII."""
    kind = getattr(err, "kind", None)
    problems = err.problems if isinstance(err, SpecError | UnsupportedField) else []
    return {
        "kind": kind.value if isinstance(kind, RefusalKind) else None,
        "exit_code": int(err.exit_code),
        "message": err.headline if not problems else f"{len(problems)} problem(s)",
        "details": list(err.details),
        "problems": [problem.to_json() for problem in problems],
    }
