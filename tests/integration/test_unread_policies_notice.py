"""``reconcile plan specs/`` (PATHS, no ``--env``) reads no project file, so the
``policies:`` the project's ``reconcile.yaml`` names are not evaluated: a run that
evaluated only ``--policy`` files said nothing about that, and a deny rule of the
project passed unseen. Now a notice on stderr, once, says so and how to include them
(docs/policy.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer

pytestmark = pytest.mark.integration

DENY = """\
rules:
  - id: no-big
    level: deny
    message: no stream named BIG
    expr: resource.name != "BIG"
"""

NOTICE = "policies (policy.yaml) are not evaluated"


def _project(tmp_path: Path, url: str) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "big.yaml").write_text(
        "kind: Stream\nname: BIG\nsubjects: [big.>]\n", encoding="utf-8"
    )
    (tmp_path / "policy.yaml").write_text(DENY, encoding="utf-8")
    (tmp_path / "reconcile.yaml").write_text(
        f"owner: shop\nspecs: [specs]\npolicies: [policy.yaml]\n"
        f"environments:\n  prod: {{servers: '{url}'}}\n",
        encoding="utf-8",
    )


def test_paths_without_env_say_the_projects_policies_were_not_read(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    _project(tmp_path, clean_server.url)
    where = ("--server", clean_server.url)
    planned = reconcile("plan", "specs", *where, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr  # the deny rule was not evaluated
    assert planned.stderr.count(NOTICE) == 1, planned.stderr
    assert "--env prod" in planned.stderr and "--policy policy.yaml" in planned.stderr
    assert NOTICE not in planned.stdout
    applied = reconcile("apply", "specs", *where, "--dry-run", cwd=tmp_path)
    assert applied.stderr.count(NOTICE) == 1, applied.stderr


def test_no_notice_with_policy_or_env(clean_server: NatsServer, tmp_path: Path) -> None:
    _project(tmp_path, clean_server.url)
    given = reconcile(
        "plan", "specs", "--server", clean_server.url, "--policy", "policy.yaml", cwd=tmp_path
    )
    assert given.returncode == 3 and NOTICE not in given.stderr, given.stderr
    env = reconcile("plan", "--env", "prod", cwd=tmp_path)
    assert env.returncode == 3 and NOTICE not in env.stderr, env.stderr


def test_no_notice_when_the_project_names_no_policies(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    _project(tmp_path, clean_server.url)
    text = (tmp_path / "reconcile.yaml").read_text(encoding="utf-8")
    (tmp_path / "reconcile.yaml").write_text(text.replace("policies: [policy.yaml]\n", ""))
    planned = reconcile("plan", "specs", "--server", clean_server.url, cwd=tmp_path)
    assert planned.returncode == 0 and "not evaluated" not in planned.stderr, planned.stderr
