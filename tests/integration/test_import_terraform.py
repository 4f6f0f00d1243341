"""``reconcile import --from terraform``: the provider's files become specs whose first plan,
on a server configured as the provider configures it, changes nothing but the marker.

Test data (tests/data/terraform, origins in its README): the provider's published
example ``examples/orders.tf``, and a ``terraform.tfstate`` in Terraform's state format
for it plus two buckets and a KeyValue entry. The server side is configured with the JSON
the provider sends for them. It is written out here from the provider's
``streamConfigFromResourceData`` / ``consumerConfigFromResourceData`` and bucket creation,
not computed by the importer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, run

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "terraform"
SECOND = 1_000_000_000

#: What the provider sends for jetstream_stream.ORDERS (schema defaults included).
ORDERS = {
    "name": "ORDERS",
    "subjects": ["ORDERS.*"],
    "retention": "limits",
    "discard": "old",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 60 * 60 * 24 * 365 * SECOND,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "storage": "file",
    "num_replicas": 1,
    "no_ack": False,
    "duplicate_window": 120 * SECOND,
    "allow_direct": True,
    "compression": "none",
}


def consumer(name: str, **fields: Any) -> dict[str, Any]:
    """What the provider sends for a jetstream_consumer (its defaults, then ``fields``)."""
    return {
        "durable_name": name,
        "name": name,
        "ack_wait": 30 * SECOND,
        "max_deliver": -1,
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "replay_policy": "instant",
        "max_ack_pending": 20000,
        "sample_freq": "0%",
        **fields,
    }


NEW = consumer("NEW", filter_subject="ORDERS.received", sample_freq="100%")
DISPATCH = consumer("DISPATCH", filter_subject="ORDERS.processed", sample_freq="100%")
MONITOR = consumer(
    "MONITOR", deliver_policy="last", max_ack_pending=100, deliver_subject="monitor.ORDERS"
)
#: jetstream_kv_bucket.CFG and jetstream_obj_bucket.BLOBS of the state file, as the
#: provider creates them (through the nats.go KeyValue and ObjectStore helpers).
CFG = {
    "name": "KV_CFG",
    "subjects": ["$KV.CFG.>"],
    "max_msgs_per_subject": 10,
    "max_age": 3600 * SECOND,
    "max_bytes": 10485760,
    "max_msg_size": 1024,
    "storage": "file",
    "num_replicas": 1,
    "discard": "new",
    "allow_rollup_hdrs": True,
    "deny_delete": True,
    "allow_direct": True,
    "duplicate_window": 120 * SECOND,
}
BLOBS = {
    "name": "OBJ_BLOBS",
    "description": "Store payloads of arbitrary size",
    "subjects": ["$O.BLOBS.C.>", "$O.BLOBS.M.>"],
    "max_bytes": -1,
    "storage": "file",
    "num_replicas": 1,
    "discard": "new",
    "allow_rollup_hdrs": True,
    "allow_direct": True,
    "compression": "s2",
}


async def configure_as_the_provider_does(url: str, *, buckets: bool) -> None:
    import nats

    nc = await nats.connect(url)
    try:
        streams = [ORDERS, CFG, BLOBS] if buckets else [ORDERS]
        for stream in streams:
            reply = await nc.request(
                f"$JS.API.STREAM.CREATE.{stream['name']}", json.dumps(stream).encode()
            )
            assert "error" not in json.loads(reply.data), reply.data
        for config in (NEW, MONITOR) if buckets else (NEW, DISPATCH, MONITOR):
            body = {"stream_name": "ORDERS", "config": config}
            subject = f"$JS.API.CONSUMER.CREATE.ORDERS.{config['name']}"
            reply = await nc.request(subject, json.dumps(body).encode())
            assert "error" not in json.loads(reply.data), reply.data
        if buckets:  # jetstream_kv_entry.greeting: the provider's kv.Put, no headers
            reply = await nc.request("$KV.CFG.greeting", b"hello")
            assert "error" not in json.loads(reply.data), reply.data
    finally:
        await nc.close()


def adoptions_only(server: NatsServer, folder: Path, count: int) -> None:
    plan = reconcile("plan", "specs", "--server", server.url, "--format", "json", cwd=folder)
    assert plan.returncode == 0, plan.stderr
    changes = json.loads(plan.stdout)["changes"]
    assert len(changes) == count, changes
    for change in changes:  # adoption only: the marker, nothing else
        assert change["action"] == "update", change
        if change["kind"] == "KeyValueEntry":  # the value again, with the marker headers
            assert change["fields"] == [] and change["reasons"][0].startswith("adopt"), change
        else:
            assert {f["path"].split(".")[0] for f in change["fields"]} == {"metadata"}, change
    apply = reconcile("apply", "specs", "--server", server.url, "-y", cwd=folder)
    assert apply.returncode == 0, apply.stderr
    again = reconcile("plan", "specs", "--server", server.url, "--detailed-exitcode", cwd=folder)
    assert again.returncode == 0, again.stdout


def test_the_providers_example_tf_imports_and_plans_nothing_but_the_marker(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    run(configure_as_the_provider_does(clean_server.url, buckets=False))
    imported = reconcile(
        "import", "--from", "terraform", str(DATA / "orders.tf"), "--out", "specs", cwd=tmp_path
    )
    assert imported.returncode == 0, imported.stderr
    orders = (tmp_path / "specs" / "stream-ORDERS.yaml").read_text()
    assert "max_age: 365d" in orders  # 60 * 60 * 24 * 365 seconds, in human units
    assert "allow_direct: true" in orders  # the provider's default, not the server's
    assert "sample_freq: 100%" in orders and "deliver_policy: last" in orders
    assert "managed-by" not in orders
    adoptions_only(clean_server, tmp_path, 4)


def test_a_state_file_imports_buckets_too_and_says_what_it_left_out(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    run(configure_as_the_provider_does(clean_server.url, buckets=True))
    state = DATA / "terraform.tfstate"
    imported = reconcile(
        "import", "--from", "terraform", str(state), "--out", "specs", cwd=tmp_path
    )
    assert imported.returncode == 0, imported.stderr
    assert "warning" not in imported.stderr, imported.stderr
    assert sorted(p.name for p in (tmp_path / "specs").iterdir()) == [
        "kv-CFG.yaml",
        "objectstore-BLOBS.yaml",
        "stream-ORDERS.yaml",
    ]
    # MONITOR's sample_freq is 0 in the state (the provider sends "0%"): no sampling, the
    # server's own meaning of an absent field, so nothing is written and nothing planned
    orders = (tmp_path / "specs" / "stream-ORDERS.yaml").read_text()
    assert orders.count("sample_freq") == 1 and "sample_freq: 100%" in orders
    bucket = (tmp_path / "specs" / "kv-CFG.yaml").read_text()
    assert "history: 10" in bucket and "ttl: 1h" in bucket
    assert "kind: KeyValueEntry" in bucket and "key: greeting" in bucket
    adoptions_only(clean_server, tmp_path, 6)


def test_unresolved_expressions_stop_the_import_at_their_line(tmp_path: Path) -> None:
    source = tmp_path / "main.tf"
    source.write_text(
        'variable "age" {}\n'
        'resource "jetstream_stream" "S" {\n'
        '  name     = "S"\n'
        '  subjects = ["s.>"]\n'
        "  max_age  = var.age\n"
        "  max_msgs = 10 * 1000\n"
        "}\n"
    )
    done = reconcile("import", "--from", "terraform", str(source), "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1
    assert (
        f"{source}:5: max_age: jetstream_stream.S.max_age: the expression 'var.age'" in done.stderr
    )
    assert not (tmp_path / "specs").exists()
    source.write_text(source.read_text().replace("var.age", "60 * 60"))
    done = reconcile("import", "--from", "terraform", str(source), "--out", "specs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "specs" / "stream-S.yaml").read_text()
    assert "max_age: 1h" in written and "max_msgs: 10000" in written


def test_a_bad_value_is_reported_at_the_terraform_line(tmp_path: Path) -> None:
    source = tmp_path / "main.tf"
    source.write_text(
        'resource "jetstream_stream" "S" {\n'
        '  name      = "S"\n'
        '  subjects  = ["s.>"]\n'
        '  retention = "sometimes"\n'
        "}\n"
    )
    done = reconcile("import", "--from", "terraform", str(source), "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1
    assert f"{source}:4: retention:" in done.stderr, done.stderr


def test_interpolations_stop_the_import_and_heredocs_and_escapes_read_as_terraform_reads_them(
    tmp_path: Path,
) -> None:
    """``"orders.${var.region}"`` was imported as that text, a heredoc with its ``<<EOT``
    markers and ``$${`` with both dollars: values Terraform never sends."""
    source = tmp_path / "main.tf"
    source.write_text(
        'resource "jetstream_stream" "S" {\n'
        '  name        = "S"\n'
        '  subjects    = ["orders.${var.region}"]\n'
        "  description = <<-EOT\n"
        "    Orders, by region.\n"
        "      Kept a year.\n"
        "    EOT\n"
        '  metadata    = { template = "cost $${x}" }\n'
        "}\n"
    )
    done = reconcile("import", "--from", "terraform", "main.tf", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(
        "main.tf:3: subjects: jetstream_stream.S.subjects: the expression "
        "'orders.${var.region}' is not resolved"
    ), done.stderr
    source.write_text(source.read_text().replace("${var.region}", "eu"))
    done = reconcile("import", "--from", "terraform", "main.tf", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "specs" / "stream-S.yaml").read_text()
    assert 'description: "Orders, by region.\\n  Kept a year.\\n"' in written, written
    assert "template: cost ${x}" in written, written
