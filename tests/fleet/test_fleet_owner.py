"""`fleet drift` honours the project's owner (issue 35): the shipped example project
(`owner: shop`), its dev environment applied to a real server and snapshotted as a user
does, is in sync, where the fleet used to plan it as owner `default` and die in a Spark
worker."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from servers import NatsServer, run

from reconciler.execution import run as engine
from reconciler.fleet.job import fleet_drift
from reconciler.jetstream import ConnectionOptions
from reconciler.planning.plan import Ownership
from reconciler.specs.project import load_project

REPO = Path(__file__).resolve().parents[2]
PROJECT = REPO / "examples" / "environments" / "reconcile.yaml"


def _snapshot(env: str, url: str, out: Path, cwd: Path) -> None:
    argv = [sys.executable, "-m", "reconciler", "snapshot", "--env", env, "--server", url]
    argv += ["--out", str(out)]
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_the_fleet_plans_an_example_project_as_its_owner(
    spark: Any, server_factory: Any, tmp_path: Path
) -> None:
    project = load_project(PROJECT)
    assert project.owner == "shop"
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    for env in ("dev",):  # prod's overlay asks for 3 replicas: a cluster
        server: NatsServer = server_factory()
        options = ConnectionOptions(servers=server.url)
        environment = project.environment(env)
        paths = project.spec_paths(environment)
        ownership = Ownership(owner="shop")
        overlays = environment.overlays
        run(engine.apply(paths, options, overlays=overlays, ownership=ownership, lock_timeout=None))
        _snapshot(env, server.url, snaps / f"{env}.ndjson", tmp_path)
    result = fleet_drift(specs=PROJECT, snapshots=snaps, out=tmp_path / "out", spark=spark)
    assert result.summary["errors"]["count"] == 0, result.summary["errors"]
    assert result.exit_code == 0 and result.summary["status"] == "in_sync"
    assert result.summary["by_env"]["dev"]["in_sync"] == 2
    # The same snapshot read as another owner's fleet (a folder per environment, no
    # project file): the declared resources are shop's, reported as theirs, no crash.
    fleet = tmp_path / "fleet"
    shutil.copytree(REPO / "examples" / "environments" / "specs", fleet / "dev")
    other = fleet_drift(specs=fleet, snapshots=snaps, out=tmp_path / "other", spark=spark)
    assert other.summary["errors"]["count"] == 0, other.summary["errors"]
    # the stream is listed as shop's (its consumer goes with it, as in `reconcile drift`)
    assert other.summary["by_env"]["dev"]["foreign"] == 1
    assert other.summary["by_env"]["dev"]["in_sync"] == 0
    assert other.summary["totals"]["drift"] == 0 and other.exit_code == 0


def test_an_owner_flag_contradicting_the_project_file_is_refused(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "reconciler", "fleet", "drift", "--specs", str(PROJECT)]
    argv += ["--snapshots", str(tmp_path), "--out", str(tmp_path / "out"), "--owner", "billing"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "--owner billing contradicts the project's owner shop" in done.stderr
    assert "Traceback" not in done.stderr
