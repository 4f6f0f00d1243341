"""Terraform references between resources, locals and variables (issue 35): a module of
several ``.tf`` files (tests/data/terraform/refs) imports with every reference resolved
as Terraform resolves it, and a reference that cannot be known is an error at its line
naming it, nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from cli_runner import reconcile
from servers import NatsServer

DATA = Path(__file__).resolve().parents[1] / "data" / "terraform" / "refs"


def _documents(folder: Path) -> dict[str, list[dict[str, object]]]:
    return {
        p.name: [d for d in yaml.safe_load_all(p.read_text()) if d]
        for p in sorted(folder.iterdir())
    }


def test_references_by_any_attribute_locals_and_variables_resolve(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    done = reconcile("import", "--from", "terraform", str(DATA), "--out", "specs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    files = _documents(tmp_path / "specs")
    assert sorted(files) == [
        "kv-config-prod.yaml",
        "stream-ORDERS.yaml",
        "stream-ORDERS_ARCHIVE.yaml",
    ]
    orders, new = files["stream-ORDERS.yaml"]
    assert orders["subjects"] == ["orders.*", "orders.prod.>"]
    assert orders["max_age"] == "1w" and orders["description"] == "Orders of prod"
    assert new["stream"] == "ORDERS" and new["filter_subject"] == "orders.received"
    archive, audit = files["stream-ORDERS_ARCHIVE.yaml"]
    assert archive["max_age"] == "4w" and archive["sources"] == [{"name": "ORDERS"}]
    assert audit["stream"] == "ORDERS_ARCHIVE" and audit["name"] == "NEW_AUDIT"
    assert audit["ack_wait"] == "1m"  # the provider's default 30 s, doubled
    bucket, entry = files["kv-config-prod.yaml"]
    assert bucket["name"] == "config-prod" and bucket["ttl"] == "1w"
    assert entry["bucket"] == "config-prod" and entry["value"] == "on"
    server = ["--server", clean_server.url]
    applied = reconcile("apply", "specs", *server, "--yes", cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    again = reconcile("plan", "specs", *server, "--detailed-exitcode", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr


def test_an_unresolvable_reference_is_an_error_at_its_line_naming_it(tmp_path: Path) -> None:
    module = tmp_path / "module"
    shutil.copytree(DATA, module)
    buckets = module / "buckets.tf"
    text = buckets.read_text()
    cases = {
        "jetstream_kv_bucket.test.name": "jetstream_kv_bucket.missing.name",
        "local.config_name": "local.nowhere",
        "var.retention_days * 86400": "var.region * 86400",
    }
    for good, bad in cases.items():
        buckets.write_text(text.replace(good, bad))
        done = reconcile(
            "import", "--from", "terraform", str(module), "--out", "specs", cwd=tmp_path
        )
        assert done.returncode == 1, done.stderr
        line = next(n for n, row in enumerate(buckets.read_text().splitlines(), 1) if bad in row)
        assert f"{buckets}:{line}:" in done.stderr and bad.split(" ")[0] in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert not (tmp_path / "specs").exists()
    variables = module / "variables.tf"
    variables.write_text(variables.read_text().replace("default = 7", "# no default"))
    buckets.write_text(text)
    done = reconcile("import", "--from", "terraform", str(module), "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1
    assert "var.retention_days" in done.stderr and "no default" in done.stderr, done.stderr


def test_references_nested_without_end_are_refused_not_a_recursion_error(tmp_path: Path) -> None:
    chain = "".join(f"  a{i} = local.a{i + 1}\n" for i in range(2000))
    (tmp_path / "main.tf").write_text(
        f"locals {{\n{chain}  a2000 = 1\n}}\n"
        'resource "jetstream_stream" "s" {\n  name    = "S"\n  max_age = local.a0\n}\n'
    )
    done = reconcile("import", "--from", "terraform", "main.tf", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "main.tf:2006: max_age:" in done.stderr and "nested deeper than 64" in done.stderr
