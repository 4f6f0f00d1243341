"""A plan as JSON, the document described by ``schemas/plan.schema.json``."""

from __future__ import annotations

import json

from reconciler.planning.steps import Plan


def render_json(plan: Plan) -> str:
    return json.dumps(plan.to_json(), indent=2, sort_keys=False)
