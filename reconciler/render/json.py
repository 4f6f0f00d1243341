"""A plan as JSON, the document described by ``schemas/plan.schema.json``."""

from __future__ import annotations

import json

from reconciler.model.values import inert_json
from reconciler.planning.steps import Plan


def render_json(plan: Plan) -> str:
    return inert_json(json.dumps(plan.to_json(), indent=2, sort_keys=False))
