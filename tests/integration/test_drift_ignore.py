"""Drift ignore rules, big unmanaged lists and other owners' rows, against a real
nats-server, through `reconcile drift` and `reconcile plan` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import nats
from cli_runner import reconcile
from servers import NatsServer, run

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions
from reconciler.planning.plan import Ownership

ROOT = Path(__file__).resolve().parents[2]
DRIFT_SCHEMA = json.loads((ROOT / "schemas" / "drift.schema.json").read_text())
PLAN_SCHEMA = json.loads((ROOT / "schemas" / "plan.schema.json").read_text())

SPECS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
metadata:
  team: shop
---
kind: Consumer
stream: ORDERS
name: ship
ack_policy: explicit
"""
RULE = "Consumer ORDERS/ephemeral-*"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return reconcile(*args, cwd=cwd)


def applied(server: NatsServer, specs: Path, owner: str = "default") -> None:
    options = ConnectionOptions(servers=server.url)
    result = run(engine.apply([specs], options, ownership=Ownership(owner)))
    assert result.ok


async def _app_consumer_and_messages(url: str, name: str, count: int) -> None:
    """What an app does at run time: a durable consumer of its own, and messages."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_consumer("ORDERS", durable_name=name, ack_policy="explicit")
        for n in range(count):
            await js.publish("orders.new", str(n).encode())
    finally:
        await nc.close()


async def _stream_info(url: str, name: str) -> dict[str, Any]:
    nc = await nats.connect(url)
    try:
        reply = await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)
        return dict(json.loads(reply.data))
    finally:
        await nc.close()


def test_app_made_consumer_named_by_a_rule_is_not_drift(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = write(tmp_path / "specs" / "orders.yaml", SPECS)
    applied(clean_server, specs.parent)
    run(_app_consumer_and_messages(clean_server.url, "ephemeral-7f3a", 25))
    rules = write(tmp_path / "specs" / ".reconcileignore", f"# app-made\n\n{RULE}\n")

    hidden = cli("drift", "specs", "--server", clean_server.url, cwd=tmp_path)
    as_json = cli("drift", "specs", "--server", clean_server.url, "--format", "json", cwd=tmp_path)
    page = cli("drift", "specs", "--server", clean_server.url, "--format", "html", cwd=tmp_path)
    rules.unlink()
    shown = cli("drift", "specs", "--server", clean_server.url, cwd=tmp_path)

    assert hidden.returncode == 0, hidden.stdout + hidden.stderr
    assert f"1 hidden by rule {RULE} (specs/.reconcileignore:3)" in hidden.stdout
    assert "ephemeral-7f3a" not in hidden.stdout
    report = json.loads(as_json.stdout)
    jsonschema.validate(report, DRIFT_SCHEMA)
    assert report["hidden"] == [
        {"rule": RULE, "source": "specs/.reconcileignore:3", "hidden": 1, "hides": "resources"}
    ]
    assert f'<li data-rule="{RULE}" data-value="1">1 hidden by rule' in page.stdout
    assert shown.returncode == 2, shown.stdout + shown.stderr
    assert "? Consumer ORDERS/ephemeral-7f3a: unmanaged" in shown.stdout
    info = run(_stream_info(clean_server.url, "ORDERS"))
    assert (info["state"]["messages"], info["state"]["consumer_count"]) == (25, 2)


async def _client_bucket(url: str, bucket: str) -> int:
    """A bucket an app makes with nats-py, and a key in it; the bucket's message count."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        kv = await js.create_key_value(bucket=bucket, history=2)
        await kv.put("tenant", b"eu")
        return int((await js.stream_info(f"KV_{bucket}")).state.messages)
    finally:
        await nc.close()


def test_a_project_rule_hides_a_client_made_bucket(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = write(tmp_path / "specs" / "orders.yaml", SPECS)
    applied(clean_server, specs.parent)
    assert run(_client_bucket(clean_server.url, "cache-eu")) == 1
    project = """\
    specs: [specs]
    ignore:
      - Stream TMP_*
      - KeyValue cache-*
    environments:
      local:
        servers: %s
    """
    write(tmp_path / "reconcile.yaml", project % clean_server.url)

    result = cli("drift", "--env", "local", cwd=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 hidden by rule KeyValue cache-* (reconcile.yaml:4)" in result.stdout
    assert "TMP_" not in result.stdout  # a rule that hid nothing is not listed
    assert run(_stream_info(clean_server.url, "KV_cache-eu"))["state"]["messages"] == 1


def test_a_rule_hides_only_notes_never_a_step(clean_server: NatsServer, tmp_path: Path) -> None:
    """The plan with a rule has the same steps, one unmanaged note less and its count;
    apply --prune with the rule leaves the app's consumer and every message alone."""
    specs = write(tmp_path / "specs" / "orders.yaml", SPECS)
    applied(clean_server, specs.parent)
    run(_app_consumer_and_messages(clean_server.url, "ephemeral-1", 10))
    specs.write_text(SPECS.replace("team: shop", "team: shipping"), encoding="utf-8")
    args = ("plan", "specs", "--server", clean_server.url, "--format", "json", "--prune")
    without = json.loads(cli(*args, cwd=tmp_path).stdout)
    write(tmp_path / "specs" / ".reconcileignore", RULE + "\n")
    with_rule = json.loads(cli(*args, cwd=tmp_path).stdout)
    text = cli(*args[:-3], "--prune", cwd=tmp_path).stdout

    jsonschema.validate(with_rule["hidden"], PLAN_SCHEMA["$defs"]["hidden"])
    assert with_rule["changes"] == without["changes"] != []
    assert [n["name"] for n in without["unmanaged"]] == ["ephemeral-1"]
    assert with_rule["unmanaged"] == []
    assert with_rule["hidden"][0]["hidden"] == 1
    assert f"  1 hidden by rule {RULE} (specs/.reconcileignore:1)" in text
    assert "ephemeral-1" not in text
    done = cli("apply", "specs", "--server", clean_server.url, "--prune", "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    info = run(_stream_info(clean_server.url, "ORDERS"))
    assert (info["state"]["messages"], info["state"]["consumer_count"]) == (10, 2)
    assert info["config"]["metadata"]["team"] == "shipping"


def test_a_declared_resource_matching_a_glob_still_drifts(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = write(tmp_path / "specs" / "orders.yaml", SPECS)
    applied(clean_server, specs.parent)
    specs.write_text(SPECS + "---\nkind: Consumer\nstream: ORDERS\nname: audit\n")
    write(tmp_path / "specs" / ".reconcileignore", "Stream *\nConsumer */*\n* ORDERS\n")
    config = run(_stream_info(clean_server.url, "ORDERS"))["config"]
    config["max_msgs"] = 1000
    run(_api(clean_server.url, "$JS.API.STREAM.UPDATE.ORDERS", config))

    result = cli("drift", "specs", "--server", clean_server.url, cwd=tmp_path)

    assert result.returncode == 2, result.stdout + result.stderr
    assert "~ Stream ORDERS: drifted" in result.stdout
    assert "    max_msgs: declared unlimited, live 1000" in result.stdout
    assert "+ Consumer ORDERS/audit: missing" in result.stdout
    assert "hidden by rule" not in result.stdout


def test_a_field_rule_hides_app_metadata_from_drift_not_from_the_plan(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = write(tmp_path / "specs" / "orders.yaml", SPECS)
    applied(clean_server, specs.parent)
    config = run(_stream_info(clean_server.url, "ORDERS"))["config"]
    config["metadata"]["app_version"] = "1.4.2"
    run(_api(clean_server.url, "$JS.API.STREAM.UPDATE.ORDERS", config))
    project = """\
    owner: default
    specs: [specs]
    ignore:
      - Stream ORDERS metadata.app_*
    environments:
      local:
        servers: %s
    """
    write(tmp_path / "reconcile.yaml", project % clean_server.url)

    result = cli("drift", "--env", "local", cwd=tmp_path)
    planned = cli("plan", "--env", "local", "--format", "json", cwd=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    rule = "Stream ORDERS metadata.app_* (reconcile.yaml:4)"
    assert f"1 resource(s) had fields hidden by rule {rule}" in result.stdout
    changes = json.loads(planned.stdout)["changes"]
    assert [(c["name"], [f["path"] for f in c["fields"]]) for c in changes] == [
        ("ORDERS", ["metadata.app_version"])
    ]


async def _api(url: str, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    nc = await nats.connect(url)
    try:
        reply = json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=5)).data)
    finally:
        await nc.close()
    assert "error" not in reply, reply
    return dict(reply)


def test_a_bad_ignore_line_is_file_and_line(clean_server: NatsServer, tmp_path: Path) -> None:
    write(tmp_path / "specs" / "orders.yaml", SPECS)
    write(tmp_path / "specs" / ".reconcileignore", "# ok\nStream TMP_*\nconsumer ORDERS/x-*\n")

    result = cli("drift", "specs", "--server", clean_server.url, cwd=tmp_path)

    assert result.returncode == 1
    assert result.stderr.startswith("specs/.reconcileignore:3: unknown kind 'consumer'")
    assert "did you mean 'Consumer'?" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_checks_the_ignore_file_without_a_server(tmp_path: Path) -> None:
    write(tmp_path / "specs" / "orders.yaml", SPECS)
    write(tmp_path / "specs" / ".reconcileignore", "Stream TMP_*\nStream ORDERS/x\n")

    result = cli("validate", "specs", cwd=tmp_path)

    assert result.returncode == 1
    assert result.stderr.startswith("specs/.reconcileignore:2: a Stream name has no '/'")


def test_a_bad_project_ignore_item_is_file_and_line(tmp_path: Path) -> None:
    write(tmp_path / "specs" / "orders.yaml", SPECS)
    project = """\
    specs: [specs]
    ignore:
      - KeyValue cache-*
      - Stream ORDERS *
    environments:
      local:
        servers: nats://127.0.0.1:4222
    """
    write(tmp_path / "reconcile.yaml", project)

    result = cli("drift", "--env", "local", cwd=tmp_path)

    assert result.returncode == 1
    assert result.stderr.startswith("reconcile.yaml:4: ignore.1: a field rule names a field")


async def _streams(url: str, count: int) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for n in range(count):
            await js.add_stream(name=f"TMP_{n:03}", subjects=[f"tmp.{n}"])
    finally:
        await nc.close()


def test_many_unmanaged_streams_fold_into_a_count_per_kind(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = write(tmp_path / "specs" / "orders.yaml", SPECS)
    applied(clean_server, specs.parent)
    run(_streams(clean_server.url, 120))
    base = ("drift", "specs", "--server", clean_server.url)

    text = cli(*base, cwd=tmp_path)
    full = cli(*base, "--full", cwd=tmp_path)
    markdown = cli(*base, "--format", "markdown", cwd=tmp_path)
    report = json.loads(cli(*base, "--format", "json", cwd=tmp_path).stdout)

    assert text.returncode == 2
    assert "? 120 Stream(s) unmanaged: on the server, declared by no spec" in text.stdout
    assert "TMP_" not in text.stdout
    assert len(text.stdout.splitlines()) < 10
    assert sum("? Stream TMP_" in line for line in full.stdout.splitlines()) == 120
    details = markdown.stdout.split("<details>", 1)[1]
    assert "120 unmanaged" in details.split("</summary>")[0]
    assert "120 Stream" in details.split("</summary>")[0]
    assert sum("| Stream | `TMP_" in line for line in details.splitlines()) == 120
    assert "`TMP_" not in markdown.stdout.split("<details>", 1)[0]
    assert sum(r["status"] == "unmanaged" for r in report["resources"]) == 120


def test_foreign_rows_name_their_owner(clean_server: NatsServer, tmp_path: Path) -> None:
    theirs = write(tmp_path / "billing" / "billing.yaml", "kind: Stream\nname: BILLING\n")
    applied(clean_server, theirs.parent, owner="billing-team")
    write(tmp_path / "specs" / "orders.yaml", SPECS)
    base = ("drift", "specs", "--server", clean_server.url)

    text = cli(*base, cwd=tmp_path).stdout
    markdown = cli(*base, "--format", "markdown", cwd=tmp_path).stdout
    page = cli(*base, "--format", "html", cwd=tmp_path).stdout

    assert "= Stream BILLING: managed by another owner; never touched (owner billing-team)" in (
        text
    )
    assert "| 🔒 foreign | Stream | `BILLING` (owner `billing-team`) |" in markdown
    assert 'data-owner="billing-team"' in page
