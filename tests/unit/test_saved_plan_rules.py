"""The saved-plan rules as one table (execution.saved_plans): every field of a plan
request is decided by the file or by the apply, and :func:`resolve`, which both the
CLI and the Action call, takes each from where the table says."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest
from test_saved_plan_file import saved

from reconciler.errors import SavedPlanRefused
from reconciler.execution.environments import Target
from reconciler.execution.requests import PlanRequest
from reconciler.execution.saved_plans import (
    APPLY_DECIDES,
    FILE_DECIDES,
    NEITHER,
    PLAN_DECIDES,
    Applying,
    resolve,
)
from reconciler.jetstream import ConnectionOptions
from reconciler.planning.saved import SavedRequest
from reconciler.specs.ignore import IgnoreRules
from reconciler.specs.lifecycle import Lifecycle


def test_every_request_field_has_one_decider() -> None:
    """A new PlanRequest field fails here until the table says who decides it."""
    said = [*FILE_DECIDES, *APPLY_DECIDES, *NEITHER]
    assert len(said) == len(set(said))
    assert set(said) == {f.name for f in fields(PlanRequest)}


def test_resolve_takes_the_files_flags_and_the_applys_target(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    flags = SavedRequest(paths=("specs",), strict=True, migrate=True, migration="resume")
    file = replace(saved(), request=flags)
    options = ConnectionOptions(servers="nats://127.0.0.1:1")
    lifecycle = Lifecycle(prevent_destroy=True, protected_at="reconcile.yaml:4")
    ignore = IgnoreRules(rules=())
    target = Target((), options, "default", lifecycle=lifecycle, ignore=ignore)
    heard: list[str] = []

    kept, request = resolve(
        file, Applying(target=target), root=tmp_path, project=None, notice=heard.append
    )

    assert kept.root == tmp_path
    assert [getattr(request, name) for name in PLAN_DECIDES] == [True, True, "resume"]
    assert request.paths == (tmp_path / "specs",)
    assert (request.options, request.lifecycle) == (options, lifecycle)
    assert request.ignore is ignore  # the apply's rules, not the default
    assert heard and heard[0].startswith("applying the saved plan")


@pytest.mark.parametrize("flag", PLAN_DECIDES)
def test_a_flag_the_file_decides_is_refused_at_apply(flag: str, tmp_path: Path) -> None:
    target = Target((), ConnectionOptions(), "default")
    applying = Applying(target=target, given=(flag,), spelled={flag: f"--{flag}"})
    with pytest.raises(SavedPlanRefused, match=f"--{flag} given with a saved plan"):
        resolve(saved(), applying, root=tmp_path, project=None)


def test_the_apply_requires_policy_files_and_the_file_may_hold_more(tmp_path: Path) -> None:
    """``--policy`` is no "must agree" flag: the re-plan evaluates every policy file the
    plan was made with, named at apply or not; a file the apply names that the plan left
    out is refused, naming that file alone (docs/saved-plans.md's table says so)."""
    (tmp_path / "specs").mkdir()
    for name in ("kept.yaml", "named.yaml"):
        (tmp_path / name).write_text("rules: []\n")
    file = replace(saved(), request=SavedRequest(paths=("specs",), policies=("kept.yaml",)))
    target = Target((), ConnectionOptions(), "default")

    _, request = resolve(file, Applying(target=target), root=tmp_path, project=None)
    assert request.policies == (tmp_path / "kept.yaml",)

    required = Applying(target=target, policies=(tmp_path / "named.yaml",))
    with pytest.raises(SavedPlanRefused) as refused:
        resolve(file, required, root=tmp_path, project=None)
    assert "named.yaml" in str(refused.value) and "kept.yaml" not in str(refused.value)

    table = (Path(__file__).resolve().parents[2] / "docs" / "saved-plans.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("|") and "`--policy`" in line]
    assert rows and all("naming both" not in row for row in rows), rows
    assert any("evaluated again" in row for row in rows), rows
