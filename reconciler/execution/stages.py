"""The pipeline in named stages: the one module of ``execution/`` a front door imports.

```
request ─▶ load ─▶ specs ─┐
scope   ─▶ read ─▶ live  ─┴▶ plan (every check that can refuse: on the Plan, or the
                              input's error with its FILE:LINE)
                              ─▶ verdict (allowances → refusals; one exit status type)
                              ─▶ execute (the one executor, fenced by the lock, one listener)
```

- the stages: :func:`load`, :func:`read` (a :class:`Scope`), :func:`plan`
  (:func:`plan_removal` for one resource's delete; :func:`with_policy` the policy rules
  on a plan made without the server), :func:`verdict` (:class:`Allowances`
  in, :class:`RefusedPlan` values with a :class:`RefusalKind` out, the plan's own
  checks first, :func:`checked` those alone; :func:`refuse` raises the first),
  :func:`locked` (the apply lock around a change: read, plan, verdict and execute
  under it; it yields the :class:`Held` lock :func:`execute` verifies before each
  step), :func:`execute`;
- what a door builds: :class:`PlanRequest`, :class:`ApplyRequest`, :class:`Target`
  (:func:`environment_target`), and its listener, an :class:`Observer`;
- the stages composed for a whole request (the CLI, the Action): :func:`plan_for`,
  :func:`apply_for` (under the apply lock), :func:`plan_environments`,
  :func:`save_plan_for`, :func:`fetch_live`;
- :class:`ExitStatus`: every door's exit status.

Pulumi composes the stages scoped to one resource; the agent plans and heals on the
connection it keeps (``execution.standing``). ``import-linter`` keeps the front doors
(``reconciler.cli``, ``action``, ``pulumi_provider``) to this module (docs/internals.md).
"""

from __future__ import annotations

from reconciler.errors import ExitStatus, RefusalKind, RefusedPlan, changes_status
from reconciler.execution import lock as leases
from reconciler.execution.apply import ApplyResult, StepEvent
from reconciler.execution.environments import (
    Target,
    environment_scope,
    environment_target,
    paths_target,
)
from reconciler.execution.pipeline import (
    EVERYTHING,
    Held,
    Scope,
    execute,
    load,
    loaded_while,
    locked,
    plan,
    plan_removal,
    read,
    resource_request,
    with_policy,
)
from reconciler.execution.requests import QUIET, ApplyRequest, Observer, PlanRequest, Quiet
from reconciler.execution.run import (
    EnvironmentPlan,
    apply_for,
    approvable,
    check_approved,
    fetch_live,
    fewer_collections,
    plan_environments,
    plan_for,
    save_plan_for,
)
from reconciler.execution.verdict import Allowances, checked, describe, refuse, verdict

#: How long a door waits for another run's apply lock by default (``--lock-timeout``).
LOCK_TIMEOUT = leases.DEFAULT_TIMEOUT

__all__ = [
    "EVERYTHING",
    "LOCK_TIMEOUT",
    "QUIET",
    "Allowances",
    "ApplyRequest",
    "ApplyResult",
    "EnvironmentPlan",
    "ExitStatus",
    "Held",
    "Observer",
    "PlanRequest",
    "Quiet",
    "RefusalKind",
    "RefusedPlan",
    "Scope",
    "StepEvent",
    "Target",
    "apply_for",
    "approvable",
    "changes_status",
    "check_approved",
    "checked",
    "describe",
    "environment_scope",
    "environment_target",
    "execute",
    "fetch_live",
    "fewer_collections",
    "leases",
    "load",
    "loaded_while",
    "locked",
    "paths_target",
    "plan",
    "plan_environments",
    "plan_for",
    "plan_removal",
    "read",
    "refuse",
    "resource_request",
    "save_plan_for",
    "verdict",
    "with_policy",
]
