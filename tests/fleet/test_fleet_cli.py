"""`reconcile fleet drift` and `reconcile snapshot` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fleet_findings import FleetCase

from reconciler.fleet.canonical import newest_server
from reconciler.fleet.job import fleet_drift
from reconciler.fleet.session import JavaMissing, check_java
from reconciler.fleet.verdict import to_json
from reconciler.model.normalize import desired_config
from reconciler.specs.validate import load_specs

SPEC = "kind: Stream\nname: S\nsubjects: [s.>]\nmax_age: 1h\n"


def reconcile(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


def in_sync_fleet(tmp_path: Path) -> tuple[Path, Path]:
    """A fleet whose snapshot (written by another tool: no server facts) matches its specs."""
    (tmp_path / "specs" / "dev").mkdir(parents=True)
    (tmp_path / "specs" / "dev" / "s.yaml").write_text(SPEC)
    [spec] = load_specs([tmp_path / "specs" / "dev"])
    config = desired_config(spec, newest_server())
    record = {
        "env": "dev",
        "captured_at": "2026-02-03T04:05:06Z",
        "kind": "Stream",
        "stream": "S",
        "name": "S",
        "config": config,
    }
    (tmp_path / "snaps").mkdir()
    (tmp_path / "snaps" / "dev.ndjson").write_text(to_json(record) + "\n")
    return tmp_path / "specs", tmp_path / "snaps"


def test_a_fleet_in_sync_exits_0_with_an_empty_drift_dataset(spark: Any, tmp_path: Path) -> None:
    specs, snaps = in_sync_fleet(tmp_path)
    result = fleet_drift(specs=specs, snapshots=snaps, out=tmp_path / "out", spark=spark)
    assert result.exit_code == 0 and result.summary["status"] == "in_sync"
    assert result.summary["by_env"]["dev"]["in_sync"] == 1
    assert result.summary["by_env"]["dev"]["captured_at"] == "2026-02-03T04:05:06Z"
    assert spark.read.parquet(str(tmp_path / "out" / "drift")).count() == 0
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["totals"]["drift"] == 0


def test_without_java_the_command_says_so_in_one_line(tmp_path: Path) -> None:
    specs, snaps = in_sync_fleet(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java here
    done = reconcile(
        "fleet",
        "drift",
        "--specs",
        str(specs),
        "--snapshots",
        str(snaps),
        "--out",
        str(tmp_path / "out"),
        env=env,
    )
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: Java not found")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_without_pyarrow_the_command_says_what_to_install(tmp_path: Path) -> None:
    """A user who installed pyspark alone hears what the fleet job needs, in one line."""
    specs, snaps = in_sync_fleet(tmp_path)
    hide = (
        "import sys; sys.modules['pyarrow'] = None; from reconciler.cli import main; "
        "sys.argv = ['reconcile', *sys.argv[1:]]; main()"
    )
    argv = ["fleet", "drift", "--specs", str(specs), "--snapshots", str(snaps)]
    done = subprocess.run(
        [sys.executable, "-c", hide, *argv, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: the fleet job needs pyarrow, not installed")
    assert "jetstream-gitops[fleet]" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_java_home_without_java_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaMissing, match="has no bin/java"):
        check_java()


def test_snapshot_and_fleet_options_are_documented() -> None:
    assert "--spark-master" in reconcile("fleet", "drift", "--help").stdout
    assert "--env" in reconcile("snapshot", "--help").stdout


@pytest.mark.integration
def test_a_snapshot_can_go_to_stdout_with_notices_on_stderr(fleet_case: FleetCase) -> None:
    url = fleet_case.servers["eu"].url
    done = reconcile("snapshot", "--env", "eu", "--server", url, "--out", "-")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert {r["env"] for r in records} == {"eu"}
    assert ("Stream", "ORDERS") in {(r["kind"], r["name"]) for r in records}
    assert "snapshot of eu:" in done.stderr and "written to stdout" in done.stderr


def test_a_fleet_whose_only_environment_is_invalid_reports_it_and_exits_1(
    spark: Any, tmp_path: Path
) -> None:
    specs, snaps = in_sync_fleet(tmp_path)
    (specs / "dev" / "s.yaml").write_text(SPEC.replace("1h", "1 fortnight"))
    result = fleet_drift(specs=specs, snapshots=snaps, out=tmp_path / "out", spark=spark)
    assert result.exit_code == 1 and result.summary["by_env"] == {}
    [error] = result.summary["errors"]["envs"]
    assert error["env"] == "dev" and error["problems"][0].startswith(
        f"{specs / 'dev' / 's.yaml'}:4"
    )


def test_the_job_says_what_it_is_doing_while_it_runs(spark: Any, tmp_path: Path) -> None:
    specs, snaps = in_sync_fleet(tmp_path)
    said: list[str] = []
    fleet_drift(
        specs=specs, snapshots=snaps, out=tmp_path / "out", spark=spark, on_notice=said.append
    )
    phases = [line.split(" ")[1] for line in said if line.startswith("fleet: ")]
    assert phases == ["specs", "reading", "planning", "writing"], said


def test_the_headline_never_calls_an_unmanaged_resource_drifted(tmp_path: Path) -> None:
    from reconciler.cli.fleet_cmd import _headline

    totals = {"drift": 3, "drifted": 0, "missing": 0, "unmanaged": 3, "orphaned": 0}
    summary = {"totals": {**totals, "drifted_fields": 0}, "by_env": {"eu": {}}}
    headline = _headline({**summary, "errors": {"count": 0}}, tmp_path)
    assert "drifted" not in headline
    assert "3 resources differ from the specs" in headline and "3 unmanaged" in headline
