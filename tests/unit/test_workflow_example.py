"""Structure of action/action.yml and of the example workflow, as GitHub reads them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ACTION = REPO / "action" / "action.yml"
WORKFLOW = REPO / "examples" / "workflows" / "jetstream.yml"
PROMOTE = REPO / "examples" / "workflows" / "promote.yml"
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
REQUIRED_INPUTS = {
    "path",
    "mode",
    "server",
    "creds",
    "context",
    "prune",
    "allow-replace",
    "comment",
    "fail-on-drift",
    "environment",
    "project",
}


def load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def action() -> dict[Any, Any]:
    return load(ACTION)


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    data = load(WORKFLOW)
    # YAML 1.1 reads the bare key `on` as True; GitHub reads it as "on".
    if True in data:
        data["on"] = data.pop(True)
    return data


def test_action_is_composite_and_every_run_step_names_its_shell(action: dict[Any, Any]) -> None:
    runs = action["runs"]
    assert runs["using"] == "composite"
    run_steps = [step for step in runs["steps"] if "run" in step]
    assert run_steps
    assert all(step.get("shell") == "bash" for step in run_steps)


def test_action_declares_the_documented_inputs_and_outputs(action: dict[Any, Any]) -> None:
    assert set(action["inputs"]) >= REQUIRED_INPUTS
    assert action["inputs"]["path"]["required"] is False  # or `environment`
    assert all("description" in spec for spec in action["inputs"].values())
    assert {"has-changes", "plan-json", "summary"} <= set(action["outputs"])
    for spec in action["outputs"].values():
        assert re.fullmatch(r"\$\{\{ steps\.reconcile\.outputs\.[\w-]+ \}\}", spec["value"])


def test_action_scripts_never_interpolate_expressions(action: dict[Any, Any]) -> None:
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", "")


def test_every_input_reaches_the_entrypoint_through_env(action: dict[Any, Any]) -> None:
    step = next(s for s in action["runs"]["steps"] if s.get("id") == "reconcile")
    assert "-m action" in step["run"]
    env = step["env"]
    for name in REQUIRED_INPUTS:
        key = "INPUT_" + name.upper().replace("-", "_")
        assert env[key] == f"${{{{ inputs.{name} }}}}"
    assert env["GITHUB_TOKEN"] == "${{ inputs.token }}"


def test_action_installs_the_tool_from_its_own_checkout(action: dict[Any, Any]) -> None:
    scripts = "\n".join(step.get("run", "") for step in action["runs"]["steps"])
    assert '"$GITHUB_ACTION_PATH/.."' in scripts
    assert "pip install" in scripts


def test_actions_used_by_the_action_are_pinned_to_a_commit(action: dict[Any, Any]) -> None:
    uses = [step["uses"] for step in action["runs"]["steps"] if "uses" in step]
    assert all(PINNED.match(ref) for ref in uses)


def test_example_workflow_runs_on_pull_request_push_and_schedule(
    workflow: dict[Any, Any],
) -> None:
    triggers = workflow["on"]
    assert {"pull_request", "push", "schedule"} <= set(triggers)
    assert triggers["push"]["branches"] == ["main"]
    assert triggers["schedule"][0]["cron"]
    assert workflow["permissions"] == {}


def action_step(job: dict[Any, Any]) -> dict[Any, Any]:
    return next(step for step in job["steps"] if step.get("uses") == "$/action")


def test_example_workflow_plans_on_pull_requests_with_a_comment(
    workflow: dict[Any, Any],
) -> None:
    job = workflow["jobs"]["plan"]
    assert "pull_request" in job["if"]
    assert job["permissions"]["pull-requests"] == "write"
    step = action_step(job)
    assert step["with"]["mode"] == "plan"
    assert step["with"]["comment"] == "true"


def test_example_workflow_applies_on_push_to_main_one_at_a_time(
    workflow: dict[Any, Any],
) -> None:
    job = workflow["jobs"]["apply"]
    assert "refs/heads/main" in job["if"]
    assert job["concurrency"]["cancel-in-progress"] is False
    assert action_step(job)["with"]["mode"] == "apply"


def test_example_workflow_uploads_the_nightly_drift_report(workflow: dict[Any, Any]) -> None:
    job = workflow["jobs"]["drift"]
    assert "schedule" in job["if"]
    drift = action_step(job)
    assert drift["with"]["mode"] == "drift"
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-art"))
    assert f"steps.{drift['id']}.outputs.report-html" in upload["with"]["path"]
    assert "always()" in upload["if"]


def test_example_workflow_pins_actions_and_keeps_checkout_credentials_out(
    workflow: dict[Any, Any],
) -> None:
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            ref = step.get("uses", "")
            if ref.startswith("$/"):  # this repository, same commit
                continue
            assert PINNED.match(ref), ref
            if ref.startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_action_scripts_are_valid_bash(action: dict[Any, Any], tmp_path: Path) -> None:
    import subprocess

    for index, step in enumerate(s for s in action["runs"]["steps"] if "run" in s):
        script = tmp_path / f"step{index}.sh"
        script.write_text(step["run"])
        subprocess.run(["bash", "-n", str(script)], check=True)


def test_zizmor_finds_nothing_in_the_action_or_the_workflow() -> None:
    import shutil
    import subprocess

    zizmor = shutil.which("zizmor")
    if zizmor is None:
        pytest.skip("zizmor is not installed (pip install zizmor)")
    # Files, not the folder: zizmor collects nothing from a folder outside .github/.
    done = subprocess.run(
        [
            zizmor,
            "--offline",
            "--persona=pedantic",
            "--no-progress",
            str(ACTION),
            str(WORKFLOW),
            str(PROMOTE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr


def test_the_promotion_workflow_plans_every_environment_then_applies_dev_before_prod() -> None:
    data = load(PROMOTE)
    jobs = data["jobs"]
    plan = action_step(jobs["plan"])["with"]
    assert (plan["environment"], plan["mode"], plan["comment"]) == ("all", "plan", "true")
    assert action_step(jobs["apply-dev"])["with"]["environment"] == "dev"
    assert action_step(jobs["apply-prod"])["with"]["environment"] == "prod"
    assert jobs["apply-prod"]["needs"] == "apply-dev"  # prod only after dev applied
    assert jobs["apply-prod"]["environment"] == "production"  # its secrets, its reviewers
    # the project names variables; the step fills exactly those from secrets
    project = yaml.safe_load((REPO / "examples/environments/reconcile.yaml").read_text())
    named = {v["env"] for v in project["environments"]["prod"].values() if isinstance(v, dict)}
    assert set(action_step(jobs["apply-prod"])["env"]) == named
    for job in jobs.values():
        assert action_step(job)["with"]["project"] == "examples/environments/reconcile.yaml"
