"""``plan --all-envs`` when one environment cannot be planned and another is denied by a
policy: exit 1 (the run is incomplete: an environment no plan was made for may hold
anything), as the Action's multi-environment run and a single environment (an error
stops before any rule is evaluated); the denied environment is named in the recap, so
the error does not hide the deny (docs/policy.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, unused_port

pytestmark = pytest.mark.integration

DENY = """\
rules:
  - id: no-big
    level: deny
    message: no stream named BIG
    expr: resource.name != "BIG"
"""


def _project(tmp_path: Path, url: str) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "big.yaml").write_text(
        "kind: Stream\nname: BIG\nsubjects: [big.>]\n", encoding="utf-8"
    )
    (tmp_path / "policy.yaml").write_text(DENY, encoding="utf-8")
    (tmp_path / "reconcile.yaml").write_text(
        "owner: shop\nspecs: [specs]\npolicies: [policy.yaml]\nenvironments:\n"
        f"  down: {{servers: 'nats://127.0.0.1:{unused_port()}'}}\n"
        f"  prod: {{servers: '{url}'}}\n",
        encoding="utf-8",
    )


def test_an_error_and_a_deny_exit_1_and_the_recap_names_the_deny(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Exit 1 as before; the recap said 'prod: Plan: 1 to create ...', the deny only in
    prod's own section far above it."""
    _project(tmp_path, clean_server.url)
    every = reconcile("plan", "--all-envs", cwd=tmp_path)
    assert every.returncode == 1, every.stderr
    recap = every.stdout.split("All environments", 1)[1]
    lines = [line for line in recap.splitlines() if line.strip()]
    assert lines[0].startswith("down: failed:"), recap
    assert lines[1].startswith("prod: denied by policy (no-big): Plan: 1 to create"), recap
    as_json = reconcile("plan", "--all-envs", "--format", "json", cwd=tmp_path)
    assert as_json.returncode == 1, as_json.stderr
    documents = json.loads(as_json.stdout)["environments"]
    assert "error" in documents["down"]
    assert [f["rule"] for f in documents["prod"]["policy"]] == ["no-big"]


def test_a_deny_alone_exits_3_with_the_same_recap(clean_server: NatsServer, tmp_path: Path) -> None:
    _project(tmp_path, clean_server.url)
    text = (tmp_path / "reconcile.yaml").read_text(encoding="utf-8")
    kept = [line for line in text.splitlines() if "down:" not in line]
    (tmp_path / "reconcile.yaml").write_text("\n".join(kept) + "\n", encoding="utf-8")
    every = reconcile("plan", "--all-envs", cwd=tmp_path)
    assert every.returncode == 3, every.stderr
    assert "prod: denied by policy (no-big): Plan: 1 to create" in every.stdout
