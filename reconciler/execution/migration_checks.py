"""Plan-time refusals of a migration that need more than the live state a plan reads.

The live state keeps only each consumer's config; whether a consumer is working right
now (messages delivered and not yet acknowledged, pull requests waiting, a push
subscriber bound) is read here, for the streams a plan starts migrating, and only
those whose retention deletes what is acknowledged (``workqueue``, ``interest``). A
consumer working during such a migration deletes messages the copy already holds, and
the copy brings them back: measured, 28-53 jobs of a live worker were done twice. The
rule itself is :func:`reconciler.model.migration.working`.
"""

from __future__ import annotations

from reconciler.errors import Problem
from reconciler.jetstream import JetStreamClient
from reconciler.model.migration import ACKS_DELETE, working
from reconciler.planning.steps import Migrate, Plan

__all__ = ["working_problems"]


async def working_problems(client: JetStreamClient, the_plan: Plan) -> list[Problem]:
    """Why (naming them) the plan may not start migrating a ``workqueue`` or ``interest``
    stream: its consumers work (the plan's ``Check``, raised by the verdict)."""
    problems = []
    for step in the_plan.steps:
        retention = str(step.live.get("retention")) if isinstance(step, Migrate) else ""
        if not isinstance(step, Migrate) or step.phase is not None or retention not in ACKS_DELETE:
            continue
        infos = await client.list_consumers(step.stream_name)
        busy = [(str(info.get("name")), why) for info in infos if (why := working(info))]
        if busy:
            problems.append(Problem(step.source, "retention", _refusal(step, retention, busy)))
    return problems


def _refusal(step: Migrate, retention: str, busy: list[tuple[str, str]]) -> str:
    named = ", ".join(f"{name!r} ({why})" for name, why in sorted(busy))
    return (
        f"cannot migrate {step.label} while its consumers work: {named}. On a {retention} "
        "stream an acknowledgement deletes a message the migration has already copied, and "
        "the copy would bring it back. Stop them (after they acknowledge what they hold) "
        "and run apply again: every message not acknowledged is kept. Nothing was changed"
    )
