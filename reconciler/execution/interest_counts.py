"""The messages an interest stream's consumer step takes along, counted on the server.

A consumer of a ``retention: interest`` stream that stops taking subjects (a narrower
filter, a delete while other consumers remain) makes the server delete what it held for
it (``model.loss.filter_narrowed``, ``model.loss.consumer_gone``). The plan knows only
the stream's totals; here each such loss is counted from the stream's per-subject counts
(STREAM.INFO with ``subjects_filter``) when at most :data:`SUBJECT_LIMIT` subjects match,
else left uncounted (docs/jetstream-notes.md).
"""

from __future__ import annotations

from dataclasses import replace

from reconciler.jetstream.api import JetStreamClient
from reconciler.model.loss import CONSUMER_STATE, Loss, consumer_filters, interest_counted
from reconciler.model.state import LiveState
from reconciler.planning.steps import Create, Plan, Replace, Step, Update

#: Above this many subjects under a lost filter, the loss stays uncounted (one page
#: of the server's answer, at most a few MB).
SUBJECT_LIMIT = 10_000


async def with_interest_counts(client: JetStreamClient, the_plan: Plan, live: LiveState) -> Plan:
    """``the_plan`` with its interest losses counted (the same plan when it has none)."""
    if not any(loss.subjects for step in the_plan.changes for loss in step.losses):
        return the_plan
    changes = [await _counted(client, step, the_plan, live) for step in the_plan.changes]
    return replace(the_plan, changes=tuple(changes))


async def _counted(client: JetStreamClient, step: Step, the_plan: Plan, live: LiveState) -> Step:
    losses: list[Loss] = []
    for loss in step.losses:
        counts = await _counts(client, step, loss)
        if counts is None:
            losses.append(loss)
            continue
        kept = consumer_filters(step.config) if isinstance(step, Update) else ()
        counted = interest_counted(loss, counts, kept, _others(step, the_plan, live))
        if counted is not None:
            losses.append(counted)
        elif not isinstance(step, Update):  # a delete still loses the delivery state
            losses.append(CONSUMER_STATE)
    return replace(step, losses=tuple(losses))


async def _counts(client: JetStreamClient, step: Step, loss: Loss) -> dict[str, int] | None:
    """The messages held per subject of ``loss``'s filters (None: not to be counted)."""
    if not loss.subjects or loss.messages is not None or not step.stream:
        return None
    counts: dict[str, int] = {}
    for subjects in loss.subjects:
        found = await client.subject_counts(step.stream, subjects, SUBJECT_LIMIT)
        if found is None:
            return None
        counts.update(found)
    return counts


def _others(step: Step, the_plan: Plan, live: LiveState) -> tuple[str, ...]:
    """The filters of every other consumer of ``step``'s stream, live or planned."""
    configs = [
        config
        for (stream, name), config in live.consumers.items()
        if stream == step.stream and name != step.name
    ]
    configs += [
        other.config
        for other in the_plan.changes
        if isinstance(other, Create | Update | Replace)
        and other.kind == "Consumer"
        and other.stream == step.stream
        and other.name != step.name
    ]
    return tuple(subject for config in configs for subject in consumer_filters(config))
