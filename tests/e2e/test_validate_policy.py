"""`reconcile validate` compiles policy files too (the project's `policies:` and each
`--policy FILE`), as plan reads them: a broken rule is a FILE:LINE error before any
server is asked, reported with the spec problems in one run."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from cli_runner import reconcile

SPECS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_bytes: 1GiB
"""
GOOD = """\
rules:
  - id: stream-max-bytes
    level: deny
    message: every stream sets max_bytes
    kinds: [Stream]
    expr: resource.desired.max_bytes > 0
"""
BROKEN = """\
rules:
  - id: prod-replicas
    level: deny
    message: streams in prod keep 3 replicas
    expr: resource.envirnoment == "prod"
"""
LEVEL = """\
rules:
  - id: typo
    level: block
    message: a level that does not exist
    expr: "true"
"""


def _repo(tmp_path: Path, policy: str, project: bool = False) -> Path:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "orders.yaml").write_text(SPECS, encoding="utf-8")
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "prod.yaml").write_text(policy, encoding="utf-8")
    if project:
        text = """\
        specs: [specs]
        policies: [policies/prod.yaml]
        environments:
          dev: {embedded: true}
        """
        (tmp_path / "reconcile.yaml").write_text(textwrap.dedent(text), encoding="utf-8")
    return tmp_path


def test_validate_compiles_the_policy_files_given_with_policy(tmp_path: Path) -> None:
    repo = _repo(tmp_path, BROKEN)
    (repo / "policies" / "level.yaml").write_text(LEVEL, encoding="utf-8")
    given = ("--policy", "policies/prod.yaml", "--policy", "policies/level.yaml")
    done = reconcile("validate", "specs", *given, cwd=repo)
    assert done.returncode == 1, done.stdout
    assert "policies/prod.yaml:5: rules.0.expr: rule 'prod-replicas'" in done.stderr
    assert "envirnoment" in done.stderr and "did you mean 'environment'" in done.stderr
    assert "policies/level.yaml:3: rules.0.level: 'block' is not one of" in done.stderr
    assert "Traceback" not in done.stderr

    (repo / "policies" / "prod.yaml").write_text(GOOD, encoding="utf-8")
    fine = reconcile("validate", "specs", "--policy", "policies/prod.yaml", cwd=repo)
    assert fine.returncode == 0, fine.stderr
    assert "1 policy rule(s) compiled" in fine.stdout
    as_json = reconcile(
        "validate", "specs", "--policy", "policies/prod.yaml", "--format", "json", cwd=repo
    )
    assert json.loads(as_json.stdout)["policy_rules"] == 1


def test_validate_reports_spec_and_policy_problems_in_one_run(tmp_path: Path) -> None:
    repo = _repo(tmp_path, BROKEN)
    (repo / "specs" / "orders.yaml").write_text(SPECS + "retention: forever\n", encoding="utf-8")
    done = reconcile(
        "validate", "specs", "--policy", "policies/prod.yaml", "--format", "json", cwd=repo
    )
    assert done.returncode == 1
    where = [(e["file"], e["line"]) for e in json.loads(done.stdout)["errors"]]
    assert ("policies/prod.yaml", 5) in where
    assert any(file.endswith("orders.yaml") and line == 5 for file, line in where)


def test_validate_compiles_the_projects_policies(tmp_path: Path) -> None:
    repo = _repo(tmp_path, BROKEN, project=True)
    done = reconcile("validate", cwd=repo)
    assert done.returncode == 1, done.stdout
    assert "prod.yaml:5: rules.0.expr: rule 'prod-replicas'" in done.stderr
    assert "Traceback" not in done.stderr

    (repo / "policies" / "prod.yaml").write_text(GOOD, encoding="utf-8")
    fine = reconcile("validate", cwd=repo)
    assert fine.returncode == 0, fine.stderr
    assert "dev: 1 document valid" in fine.stdout
    assert "policies: 1 rule(s) compiled" in fine.stdout
