"""Attacks on spec PATHS read with ``--project FILE`` (no environment) and on the engine's
hints said in each door's words, against real nats-server processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, write
from test_saved_plans import ORDERS, api, git

from reconciler.specs.spec import OWNER_KEY

pytestmark = pytest.mark.integration


def _repository(tmp_path: Path, project: str) -> Path:
    root = tmp_path / "repo"
    (root / "specs").mkdir(parents=True)
    write(root / "specs", ORDERS.format(extra=""), "orders.yaml")
    write(root, project, "reconcile.yaml")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "specs")
    return root


def test_a_plan_of_paths_saved_with_a_project_file_is_applied_as_its_owner(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``plan --project reconcile.yaml specs --out FILE`` plans as the project's owner
    (``owner: shop``) and saves the project file's digest; ``apply FILE --project
    reconcile.yaml`` then ran as owner ``default`` (the project file read only for its
    digest), so the plan it had just reviewed was refused (``the saved plan names owner
    shop, not default``), against docs/saved-plans.md: the owner is the project's. The
    apply takes the project's owner now, as the plan did; ``--owner`` contradicting it
    is refused, as at plan, with nothing changed."""
    url = clean_server.url
    project = f"owner: shop\nspecs: [specs]\nenvironments:\n  dev:\n    servers: {url}\n"
    root = _repository(tmp_path, project)
    where = ("--project", "reconcile.yaml", "--server", url)
    planned = reconcile("plan", "specs", "--out", "../p.plan", *where, cwd=root)
    assert planned.returncode == 0, planned.stderr
    plan = str((root / "../p.plan").resolve())

    other = reconcile("apply", plan, *where, "--owner", "payments", cwd=root)
    assert other.returncode != 0
    assert "--owner payments contradicts the project's owner shop" in other.stderr
    assert "Traceback" not in other.stderr
    assert "ORDERS" not in (api(clean_server, "STREAM.NAMES").get("streams") or [])

    done = reconcile("apply", plan, *where, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    info = api(clean_server, "STREAM.INFO.ORDERS")["config"]
    assert info["metadata"][OWNER_KEY] == "shop", info["metadata"]
