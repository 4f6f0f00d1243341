"""A saved plan's request holds only values its command line could have given: the
file, edited and its digest fixed up, cannot pass ``--migration`` a value click's
choice refuses (docs/saved-plans.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_saved_plan_file import saved

from reconciler.errors import SavedPlanRefused
from reconciler.planning.saved import SavedPlan, integrity


def refitted(**request: Any) -> str:
    document = saved().to_json()
    document["request"].update(request)
    body = {k: v for k, v in document.items() if k != "digest"}
    return _text(body)


def _text(body: dict[str, Any]) -> str:
    return json.dumps({**body, "digest": integrity(body)})


@pytest.mark.parametrize("migration", ["nonsense", "", 5])
def test_a_migration_the_command_line_refuses_is_refused(migration: Any) -> None:
    with pytest.raises(SavedPlanRefused, match="a saved plan this release cannot read"):
        SavedPlan.parse(refitted(migrate=True, migration=migration), source="p.json")


@pytest.mark.parametrize("migration", [None, "resume", "rollback", "continue"])
def test_every_migration_choice_reads_back(migration: str | None) -> None:
    again = SavedPlan.parse(refitted(migrate=True, migration=migration), source="p.json")
    assert again.request.migration == migration
