"""examples/workflows/failover.yml as GitHub reads it: a manual dispatch; the failover
runs only after the job that shows its plan, behind an environment a reviewer approves."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from workflows import PINNED, assert_zizmor_finds_nothing, read_workflow

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "examples" / "workflows" / "failover.yml"


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    return read_workflow(WORKFLOW)


def _runs(job: dict[Any, Any]) -> list[str]:
    return [str(step["run"]) for step in job["steps"] if "run" in step]


def test_only_a_person_starts_it_and_the_plan_is_shown_before_the_failover(
    workflow: dict[Any, Any],
) -> None:
    assert set(workflow["on"]) == {"workflow_dispatch"}
    review, failover = workflow["jobs"]["review"], workflow["jobs"]["failover"]
    assert any("reconcile failover" in run and "--check" in run for run in _runs(review))
    assert failover["needs"] == "review"
    assert failover["environment"] != review["environment"]  # the approval gate
    assert any("reconcile failover" in run and "--yes" in run for run in _runs(failover))
    assert workflow["concurrency"]["cancel-in-progress"] is False
    assert not any("--yes" in run for run in _runs(review))  # the review changes nothing
    assert "continue-on-error" not in str(review)  # a failed review stops the failover
    # the failover acts on the pairs the reviewer read: the same inputs reach both
    reviewed, acted = (_failover_step(job) for job in (review, failover))
    for name in ("FROM", "TO", "UNPLANNED"):
        assert reviewed["env"][name] == acted["env"][name], name


def _failover_step(job: dict[Any, Any]) -> dict[Any, Any]:
    (step,) = [s for s in job["steps"] if "reconcile failover" in str(s.get("run", ""))]
    return step


def test_inputs_reach_the_scripts_through_env_and_actions_are_pinned(
    workflow: dict[Any, Any],
) -> None:
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            assert "${{" not in str(step.get("run", "")), step  # never interpolated
            ref = step.get("uses", "")
            if ref:
                assert PINNED.match(ref), ref
            if ref.startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_the_scripts_are_valid_bash(workflow: dict[Any, Any], tmp_path: Path) -> None:
    for number, run in enumerate(r for job in workflow["jobs"].values() for r in _runs(job)):
        script = tmp_path / f"step{number}.sh"
        script.write_text(run, encoding="utf-8")
        args = ["bash", "-n", str(script)]
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr


def test_zizmor_finds_nothing() -> None:
    assert_zizmor_finds_nothing(WORKFLOW)
