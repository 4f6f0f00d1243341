"""A policy rule's finding on one planned resource (rules: :mod:`reconciler.specs.policy`,
evaluation: :mod:`reconciler.planning.policy`). Findings ride on the
:class:`~reconciler.planning.steps.Plan` (``Plan.policy``) into every renderer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconciler.identity import ResourceRef


@dataclass(frozen=True, slots=True)
class PolicyFinding:
    """Rule ``rule`` (at ``level``) does not hold for ``ref`` and its step ``action``;
    ``error``: why the rule could not be evaluated there (a missing key, a value that is
    not true or false), empty when it was evaluated and was false."""

    rule: str
    level: str  # deny | warn
    message: str
    ref: ResourceRef
    action: str
    rule_source: str  # FILE:LINE of the rule's expr
    error: str = ""

    @property
    def denies(self) -> bool:
        return self.level == "deny"

    @property
    def line(self) -> str:
        """``deny prod-replicas: Stream ORDERS (update): streams in prod keep 3 replicas``
        (unescaped: every renderer escapes it for its medium)."""
        text = f"{self.level} {self.rule}: {self.ref.label} ({self.action}): {self.message}"
        return f"{text} (could not evaluate: {self.error})" if self.error else text

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "level": self.level,
            "message": self.message,
            "kind": self.ref.kind,
            "name": self.ref.name,
            "stream": self.ref.stream,
            "action": self.action,
            "rule_source": self.rule_source,
            "error": self.error or None,
        }
