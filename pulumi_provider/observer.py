"""The Pulumi provider's :class:`~reconciler.execution.requests.Observer`: a run's
notices and step events on Pulumi's info channel (``pulumi up`` shows them; without an
engine, as in the dynamic provider host's own logs, on stderr). Never asks: ``pulumi up``
is the approval, as the Action's ``mode: apply`` is."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi

from pulumi_provider.inputs import hide
from reconciler.console import shown, step_line
from reconciler.execution.stages import Observer

if TYPE_CHECKING:
    from reconciler.execution.stages import StepEvent


class PulumiObserver(Observer):
    """Notices and step lines, escaped, to ``pulumi.log.info``; ``secrets`` (the values
    of a resource's secret inputs) never shown."""

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        self.secrets = secrets

    def notice(self, message: str) -> None:
        pulumi.log.info(shown(hide(message, self.secrets)))

    def step(self, event: StepEvent) -> None:
        pulumi.log.info(hide(step_line(event), self.secrets))


PULUMI = PulumiObserver()
