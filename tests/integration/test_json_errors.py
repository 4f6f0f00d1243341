"""With ``--format json`` a program reads stdout: a run that ends in an error prints it
there as JSON too (``schemas/error.schema.json``: why it was refused as a value, the
exit status, each FILE:LINE problem), never a second document after a plan or report,
and never a secret. Through the CLI on real nats-server processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cli_runner import reconcile
from servers import NatsServer, run, unused_port
from test_apply_json_lines import _published_and_counted

from reconciler.errors import RefusalKind

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "schemas" / "error.schema.json").read_text(encoding="utf-8"))


def _error(stdout: str) -> dict[str, Any]:
    document = json.loads(stdout)
    assert list(document) == ["error"], document
    jsonschema.validate(document["error"], SCHEMA)
    return dict(document["error"])


def test_the_schema_knows_every_refusal_kind() -> None:
    assert set(SCHEMA["properties"]["kind"]["enum"]) == {None, *(k.value for k in RefusalKind)}


def test_an_invalid_spec_is_a_json_error_with_each_problem_at_its_line(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "orders.yaml").write_text(
        "kind: Stream\nname: ORDERS\nsubjects: [orders.>]\nmax_age: soon\n", encoding="utf-8"
    )
    done = reconcile("plan", str(specs), "--format", "json", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    error = _error(done.stdout)
    assert error["kind"] == "invalid" and error["exit_code"] == 1
    (problem,) = error["problems"]
    assert problem["file"].endswith("orders.yaml") and problem["line"] == 4
    assert problem["path"] == "max_age" and problem["severity"] == "error"
    assert "orders.yaml:4: max_age:" in done.stderr  # stderr as before


def test_an_unreachable_server_is_a_json_error_without_its_password(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "orders.yaml").write_text(
        "kind: Stream\nname: ORDERS\nsubjects: [orders.>]\n", encoding="utf-8"
    )
    url = f"nats://admin:s3cr3t-pw@127.0.0.1:{unused_port()}"
    for command in ("plan", "drift"):
        done = reconcile(command, str(specs), "--server", url, "--format", "json", cwd=tmp_path)
        assert done.returncode == 1, done.stdout + done.stderr
        error = _error(done.stdout)
        assert error["kind"] is None and error["problems"] == []
        assert "s3cr3t-pw" not in done.stdout + done.stderr


def _publish(url: str, count: int) -> int:
    """``count`` messages on orders.new, then ORDERS's count as a raw client reads it."""
    return run(_published_and_counted(url, "ORDERS", "orders.new", count))


def test_a_refused_apply_ends_its_json_lines_with_the_refusal_and_changes_nothing(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    spec = specs / "orders.yaml"
    spec.write_text("kind: Stream\nname: ORDERS\nsubjects: [orders.>]\n", encoding="utf-8")
    server = ("--server", clean_server.url)
    made = reconcile("apply", str(specs), *server, "--yes", "--format", "json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert _publish(clean_server.url, 5) == 5
    spec.write_text(spec.read_text() + "storage: memory\n", encoding="utf-8")  # a replace
    refused = reconcile("apply", str(specs), *server, "--yes", "--format", "json", cwd=tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    records = [json.loads(line) for line in refused.stdout.splitlines()]
    assert [r["type"] for r in records] == ["plan", "error"]
    error = {k: v for k, v in records[-1].items() if k != "type"}
    jsonschema.validate(records[-1], SCHEMA)
    assert error["kind"] == "data_loss" and error["exit_code"] == 1
    assert any("ORDERS" in line for line in [error["message"], *error["details"]])
    assert _publish(clean_server.url, 0) == 5

    denied = reconcile("plan", str(specs), *server, "--format", "json", "--policy",
                       str(_deny(tmp_path)), cwd=tmp_path)  # fmt: skip
    assert denied.returncode == 3, denied.stdout + denied.stderr
    assert "error" not in json.loads(denied.stdout)  # the plan alone: one document


def _deny(tmp_path: Path) -> Path:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n  - id: no-orders\n    level: deny\n    message: no ORDERS\n"
        '    expr: resource.name != "ORDERS"\n',
        encoding="utf-8",
    )
    return policy
