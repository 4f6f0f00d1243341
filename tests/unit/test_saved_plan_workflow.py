"""examples/workflows/saved-plan.yml as GitHub reads it: the pull request saves and
uploads its plan, the push to main downloads that file and applies exactly it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from workflows import PINNED, assert_zizmor_finds_nothing, read_workflow

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "examples" / "workflows" / "saved-plan.yml"


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    return read_workflow(WORKFLOW)


def step_using(job: dict[Any, Any], prefix: str) -> dict[Any, Any]:
    return next(step for step in job["steps"] if step.get("uses", "").startswith(prefix))


def test_the_pull_request_saves_and_uploads_its_plan(workflow: dict[Any, Any]) -> None:
    job = workflow["jobs"]["plan"]
    assert "pull_request" in job["if"]
    plan = step_using(job, "$/action")
    assert plan["with"]["mode"] == "plan" and plan["with"]["plan-file"]
    upload = step_using(job, "actions/upload-artifact@")
    assert upload["with"]["path"] == f"${{{{ steps.{plan['id']}.outputs.plan-file }}}}"


def test_the_merge_applies_the_downloaded_file(workflow: dict[Any, Any]) -> None:
    job = workflow["jobs"]["apply"]
    assert "refs/heads/main" in job["if"]
    assert job["concurrency"]["cancel-in-progress"] is False
    assert job["permissions"] == {"contents": "read", "actions": "read", "pull-requests": "read"}
    download = step_using(job, "actions/download-artifact@")
    upload = step_using(workflow["jobs"]["plan"], "actions/upload-artifact@")
    assert download["with"]["name"] == upload["with"]["name"]
    assert "outputs.run-id" in download["with"]["run-id"]
    apply = step_using(job, "$/action")
    assert apply["with"]["mode"] == "apply"
    assert (
        apply["with"]["plan-file"]
        == step_using(workflow["jobs"]["plan"], "$/action")["with"]["plan-file"]
    )
    assert apply["with"].get("prune") is None  # the file keeps its flags


def test_actions_are_pinned_and_checkouts_keep_no_credentials(workflow: dict[Any, Any]) -> None:
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            ref = step.get("uses", "")
            if ref and not ref.startswith("$/"):
                assert PINNED.match(ref), ref
            if ref.startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_zizmor_finds_nothing() -> None:
    assert_zizmor_finds_nothing(WORKFLOW)
