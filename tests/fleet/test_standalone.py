"""The same job, unchanged, on a Spark standalone cluster started on loopback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fleet_findings import FleetCase, expected_rows, spark_rows
from spark_standalone import StandaloneCluster, spark_env

from reconciler.fleet.session import APP_NAME

# A standalone cluster (master and worker JVMs) beside the local session: a scale run, in
# .ci/run's slow stage.
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_cli_runs_the_job_on_a_standalone_cluster_with_the_same_findings(
    spark: Any, fleet_case: FleetCase, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    with StandaloneCluster(tmp_path / "spark") as cluster:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "reconciler", "fleet", "drift"),
                *("--specs", str(fleet_case.specs), "--snapshots", str(fleet_case.snapshots)),
                *("--out", str(out), "--spark-master", cluster.master_url),
            ],
            env=spark_env(tmp_path / "spark"),
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
        )
        apps = cluster.status().get("completedapps", [])
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "2 environments:" in done.stdout
    assert [app["name"] for app in apps] == [APP_NAME]  # it really ran on the cluster
    for env, report in fleet_case.reports.items():
        assert spark_rows(spark, out, env) == expected_rows(report), env
