"""Lifecycle per resource on a real nats-server (docs/spec-format.md#lifecycle):
``prevent_destroy`` survives every flag, ``ignore_changes`` fields never drift,
``mode: observe`` never writes; per environment in the project file too.

Every test that claims data is safe publishes messages first and counts them after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from servers import publish as _publish

from reconciler.errors import ReconcileError, RefusedPlan
from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions
from reconciler.specs.lifecycle import PROTECT_KEY

pytestmark = pytest.mark.integration

EVERY_FLAG = {"prune": True, "allow_replace": True, "allow_data_loss": True, "migrate": True}
EVERY_CLI_FLAG = ("--prune", "--allow-replace", "--allow-data-loss", "--migrate")

ORDERS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
storage: {storage}
max_msgs: {max_msgs}
lifecycle:
  prevent_destroy: true
---
kind: Consumer
stream: ORDERS
name: shipper
ack_policy: explicit
"""
OTHER = """\
kind: Stream
name: OTHER
subjects: ["other.>"]
"""


async def _request(url: str, subject: str, payload: dict[str, Any] | None = None) -> Any:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        data = json.dumps(payload).encode() if payload is not None else b""
        reply = await nc.request(subject, data, timeout=5)
        return json.loads(reply.data)
    finally:
        await nc.close()


def _info(url: str, stream: str) -> dict[str, Any]:
    info: dict[str, Any] = run(_request(url, f"$JS.API.STREAM.INFO.{stream}"))
    return info


def _messages(url: str, stream: str = "ORDERS") -> int:
    return int(_info(url, stream)["state"]["messages"])


def _edit(url: str, stream: str, **changes: Any) -> dict[str, Any]:
    """Change a live stream with the JetStream API directly (someone else's edit)."""
    config = _info(url, stream)["config"] | changes
    answer: dict[str, Any] = run(_request(url, f"$JS.API.STREAM.UPDATE.{stream}", config))
    assert "error" not in answer, answer
    return answer


def _options(server: NatsServer) -> ConnectionOptions:
    return ConnectionOptions(servers=server.url)


def _specs(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "specs"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / f"{name}.yaml").write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def protected(clean_server: NatsServer, tmp_path: Path) -> Path:
    """ORDERS (protected, with a consumer) and OTHER applied; ORDERS holds 20 messages."""
    specs = _specs(tmp_path, orders=ORDERS.format(storage="file", max_msgs=100), other=OTHER)
    assert run(engine.apply([specs], _options(clean_server), lock_timeout=None)).ok
    run(_publish(clean_server.url, "orders.new", 20))
    assert _messages(clean_server.url) == 20
    return specs


def test_protection_is_recorded_where_it_was_declared(
    clean_server: NatsServer, protected: Path
) -> None:
    metadata = _info(clean_server.url, "ORDERS")["config"]["metadata"]
    assert metadata[PROTECT_KEY] == f"{protected / 'orders.yaml'}:7"
    assert PROTECT_KEY not in (_info(clean_server.url, "OTHER")["config"].get("metadata") or {})


def test_a_prevented_replace_survives_every_flag(clean_server: NatsServer, protected: Path) -> None:
    (protected / "orders.yaml").write_text(ORDERS.format(storage="memory", max_msgs=5))
    options = _options(clean_server)
    the_plan = run(engine.plan([protected], options, migrate=True))
    assert [s.action for s in the_plan.prevented] == ["migrate"]
    step = the_plan.to_json()["changes"][0]
    assert any(r.startswith("prevented by lifecycle prevent_destroy (") for r in step["reasons"])
    with pytest.raises(RefusedPlan, match="protected by lifecycle prevent_destroy") as refused:
        run(engine.apply([protected], options, lock_timeout=None, **EVERY_FLAG))
    assert refused.value.details[0].startswith("migrate Stream ORDERS: prevented by lifecycle")
    without_migrate = {**EVERY_FLAG, "migrate": False}
    with pytest.raises(RefusedPlan, match="no flag allows it"):
        run(engine.apply([protected], options, lock_timeout=None, **without_migrate))
    assert _messages(clean_server.url) == 20
    assert _info(clean_server.url, "ORDERS")["config"]["storage"] == "file"
    cli = reconcile(
        "apply",
        str(protected),
        "--server",
        clean_server.url,
        "--yes",
        "--no-lock",
        *EVERY_CLI_FLAG,
        cwd=protected.parent,
    )
    assert cli.returncode == 1, cli.stderr
    assert "refusing to apply" in cli.stderr and "prevent_destroy" in cli.stderr
    assert _messages(clean_server.url) == 20


def test_a_removed_protected_spec_is_refused_with_where_it_was_declared(
    clean_server: NatsServer, protected: Path
) -> None:
    (protected / "orders.yaml").unlink()
    options = _options(clean_server)
    with pytest.raises(RefusedPlan) as refused:
        run(engine.apply([protected], options, lock_timeout=None, **EVERY_FLAG))
    where = f"{protected / 'orders.yaml'}:7"
    assert list(refused.value.details) == [
        f"delete Stream ORDERS: prevented: the server records lifecycle prevent_destroy for "
        f"it (last declared at {where}); no flag allows this"
    ]
    assert _messages(clean_server.url) == 20
    # its consumer is not protected itself, but goes with ORDERS: nothing was deleted
    consumers = run(_request(clean_server.url, "$JS.API.CONSUMER.NAMES.ORDERS"))
    assert consumers["consumers"] == ["shipper"]
    plain = run(engine.plan([protected], options))
    orphan = next(o for o in plain.orphans if o.name == "ORDERS")
    assert any("--prune will not delete it" in r for r in orphan.reasons)


def test_forged_protection_only_adds_protection(clean_server: NatsServer, tmp_path: Path) -> None:
    """Metadata is anyone's to write: a forged record protects (escaped when printed),
    and a record removed by hand does not unprotect what the spec protects."""
    specs = _specs(tmp_path, orders=ORDERS.format(storage="file", max_msgs=100), other=OTHER)
    options = _options(clean_server)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(clean_server.url, "other.new", 5))
    run(_publish(clean_server.url, "orders.new", 5))
    forged = "\x1b[2Jforged.yaml:1"
    metadata = _info(clean_server.url, "OTHER")["config"]["metadata"] | {PROTECT_KEY: forged}
    _edit(clean_server.url, "OTHER", metadata=metadata)
    (specs / "other.yaml").unlink()
    with pytest.raises(RefusedPlan) as refused:
        run(engine.apply([specs], options, lock_timeout=None, **EVERY_FLAG))
    (detail,) = refused.value.details
    assert "\x1b" not in detail and "\\x1b[2Jforged.yaml:1" in detail
    assert _messages(clean_server.url, "OTHER") == 5
    # the record removed by hand: the spec still protects ORDERS
    metadata = dict(_info(clean_server.url, "ORDERS")["config"]["metadata"])
    del metadata[PROTECT_KEY]
    _edit(clean_server.url, "ORDERS", metadata=metadata)
    (specs / "other.yaml").write_text(OTHER)
    (specs / "orders.yaml").write_text(ORDERS.format(storage="memory", max_msgs=100))
    with pytest.raises(RefusedPlan, match="prevent_destroy"):
        run(engine.apply([specs], options, lock_timeout=None, **EVERY_FLAG))
    assert _messages(clean_server.url) == 5


def _project(root: Path, url: str, lifecycle: str) -> None:
    (root / "reconcile.yaml").write_text(
        "owner: shop\nspecs: [specs]\nenvironments:\n"
        f"  prod:\n    servers: '{url}'\n    lifecycle: {lifecycle}\n",
        encoding="utf-8",
    )


def test_an_environment_protects_every_resource(clean_server: NatsServer, tmp_path: Path) -> None:
    """Only the project file's environment says prevent_destroy: a replace and a prune
    are refused with the project file's line, whatever the flags."""
    root = tmp_path / "ws"
    specs = _specs(root, orders=OTHER.replace("OTHER", "ORDERS").replace("other", "orders"))
    (specs / "other.yaml").write_text(OTHER)
    _project(root, clean_server.url, "{prevent_destroy: true}")
    applied = reconcile("apply", "--env", "prod", "--yes", "--no-lock", cwd=root)
    assert applied.returncode == 0, applied.stderr
    run(_publish(clean_server.url, "orders.new", 7))
    (specs / "orders.yaml").write_text(
        OTHER.replace("OTHER", "ORDERS").replace("other", "orders") + "storage: memory\n"
    )
    (specs / "other.yaml").unlink()
    refused = reconcile("apply", "--env", "prod", "--yes", "--no-lock", *EVERY_CLI_FLAG, cwd=root)
    assert refused.returncode == 1, refused.stderr
    assert "reconcile.yaml:6" in refused.stderr, refused.stderr
    assert "delete Stream OTHER" in refused.stderr and "Stream ORDERS" in refused.stderr
    assert _messages(clean_server.url) == 7
    assert _info(clean_server.url, "OTHER")["config"]["name"] == "OTHER"


KEEPS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
description: declared
max_msgs: 100
max_age: 1h
lifecycle:
  ignore_changes: [max_msgs, description]
---
kind: KeyValue
name: settings
history: 2
lifecycle:
  ignore_changes: [history]
---
kind: Consumer
stream: ORDERS
name: shipper
ack_policy: explicit
max_deliver: 5
lifecycle:
  ignore_changes: all
"""


def test_ignored_fields_never_drift(clean_server: NatsServer, tmp_path: Path) -> None:
    specs = _specs(tmp_path, orders=KEEPS)
    options = _options(clean_server)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(clean_server.url, "orders.new", 10))
    _edit(clean_server.url, "ORDERS", max_msgs=50, description="edited by hand")
    _edit(clean_server.url, "KV_settings", max_msgs_per_subject=7)
    consumer = run(_request(clean_server.url, "$JS.API.CONSUMER.INFO.ORDERS.shipper"))["config"]
    answer = run(
        _request(
            clean_server.url,
            "$JS.API.CONSUMER.CREATE.ORDERS.shipper",
            {"stream_name": "ORDERS", "config": consumer | {"max_deliver": 9}},
        )
    )
    assert "error" not in answer, answer
    the_plan = run(engine.plan([specs], options))
    assert not the_plan.has_changes and len(the_plan.unchanged) == 3
    drift = reconcile("drift", str(specs), "--server", clean_server.url, cwd=tmp_path)
    assert drift.returncode == 0, drift.stdout + drift.stderr
    # a change of another field sends the ignored fields back as they are live
    (specs / "orders.yaml").write_text(KEEPS.replace("max_age: 1h", "max_age: 2h"))
    applied = run(engine.apply([specs], options, lock_timeout=None))
    assert [f"{s.action} {s.label}" for s in applied.applied] == ["update Stream ORDERS"]
    config = _info(clean_server.url, "ORDERS")["config"]
    assert (config["max_msgs"], config["description"]) == (50, "edited by hand")
    assert config["max_age"] == 2 * 3600 * 10**9
    assert _info(clean_server.url, "KV_settings")["config"]["max_msgs_per_subject"] == 7
    assert _messages(clean_server.url) == 10


def test_a_create_uses_the_declared_values(clean_server: NatsServer, tmp_path: Path) -> None:
    specs = _specs(tmp_path, orders=KEEPS)
    assert run(engine.apply([specs], _options(clean_server), lock_timeout=None)).ok
    config = _info(clean_server.url, "ORDERS")["config"]
    assert (config["max_msgs"], config["description"]) == (100, "declared")


OBSERVED = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_msgs: 10
storage: memory
lifecycle:
  mode: observe
---
kind: Stream
name: LATER
lifecycle:
  mode: observe
"""


def test_observed_resources_never_change(clean_server: NatsServer, tmp_path: Path) -> None:
    """An existing stream adopted in observe mode: every flag, and nothing is written;
    a missing observed stream is reported, not created."""
    url = clean_server.url
    created = run(
        _request(
            url,
            "$JS.API.STREAM.CREATE.ORDERS",
            {"name": "ORDERS", "subjects": ["orders.>"], "max_msgs": 1000, "storage": "file"},
        )
    )
    assert "error" not in created, created
    run(_publish(url, "orders.new", 12))
    before = _info(url, "ORDERS")["config"]
    specs = _specs(tmp_path, orders=OBSERVED)
    options = _options(clean_server)
    the_plan = run(engine.plan([specs], options, prune=True, migrate=True))
    assert not the_plan.has_changes
    notes = {note.name: note for note in the_plan.observed}
    assert notes["LATER"].missing and not notes["ORDERS"].missing
    paths = {f.path.split(".")[0] for f in notes["ORDERS"].fields}
    assert paths == {"max_msgs", "storage", "metadata"}  # metadata: the marker it lacks
    assert the_plan.to_json()["observed"][0]["reasons"][0].startswith("lifecycle mode observe (")
    result = run(engine.apply([specs], options, lock_timeout=None, **EVERY_FLAG))
    assert result.ok and not result.applied
    cli = reconcile(
        "apply", str(specs), "--server", url, "--yes", "--no-lock", *EVERY_CLI_FLAG, cwd=tmp_path
    )
    assert cli.returncode == 0, cli.stderr
    assert "Observed (lifecycle mode observe" in cli.stdout
    assert _info(url, "ORDERS")["config"] == before
    assert _messages(url) == 12
    missing = run(_request(url, "$JS.API.STREAM.INFO.LATER"))
    assert missing["error"]["code"] == 404
    drift = reconcile("drift", str(specs), "--server", url, "--format", "json", cwd=tmp_path)
    assert drift.returncode == 2, drift.stderr
    statuses = {r["name"]: r["status"] for r in json.loads(drift.stdout)["resources"]}
    assert statuses == {"ORDERS": "drifted", "LATER": "missing"}


def test_an_observed_environment_writes_nothing(clean_server: NatsServer, tmp_path: Path) -> None:
    """An environment in mode observe: no create, no prune, no KeyValue entry written."""
    root = tmp_path / "ws"
    specs = _specs(root, other=OTHER, cfg="kind: KeyValue\nname: cfg\n")
    (root / "reconcile.yaml").write_text(
        f"owner: shop\nspecs: [specs]\nenvironments:\n  prod:\n    servers: '{clean_server.url}'\n"
    )
    assert reconcile("apply", "--env", "prod", "--yes", "--no-lock", cwd=root).returncode == 0
    run(_publish(clean_server.url, "other.new", 3))
    _project(root, clean_server.url, "{mode: observe}")
    (specs / "other.yaml").unlink()
    (specs / "later.yaml").write_text(OTHER.replace("OTHER", "LATER").replace("other", "later"))
    (specs / "entry.yaml").write_text("kind: KeyValueEntry\nbucket: cfg\nkey: mode\nvalue: fast\n")
    applied = reconcile("apply", "--env", "prod", "--yes", "--no-lock", *EVERY_CLI_FLAG, cwd=root)
    assert applied.returncode == 0, applied.stderr
    assert "not on the server: not created" in applied.stdout
    assert "KeyValueEntry cfg/mode" in applied.stdout
    missing = run(_request(clean_server.url, "$JS.API.STREAM.INFO.LATER"))
    assert missing["error"]["code"] == 404
    assert _messages(clean_server.url, "OTHER") == 3  # not pruned
    assert _messages(clean_server.url, "KV_cfg") == 0  # no entry written


def test_an_observed_environment_takes_no_lock_and_keeps_no_lineage(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Hole: ``apply --env`` of an environment in mode observe (never written) made the
    apply lock's bucket on the server, wrote its lease and the account's lineage: a
    write, refused outright to the read-only credentials an observer is given. It now
    takes no lock there (the planner gives it no step): the server holds no stream
    afterwards."""
    root = tmp_path / "ws"
    _specs(root, other=OTHER)
    _project(root, clean_server.url, "{mode: observe}")
    applied = reconcile("apply", "--env", "prod", "--yes", cwd=root)
    assert applied.returncode == 0, applied.stderr
    assert "not on the server: not created" in applied.stdout
    streams = run(_request(clean_server.url, "$JS.API.STREAM.NAMES"))
    assert streams.get("streams") in (None, []), streams  # not even the lock's bucket


def test_an_unknown_ignored_field_is_an_error_at_its_line(tmp_path: Path) -> None:
    specs = _specs(
        tmp_path,
        orders="kind: Stream\nname: ORDERS\nlifecycle:\n  ignore_changes:\n    - max_msg\n",
    )
    checked = reconcile("validate", str(specs), cwd=tmp_path)
    assert checked.returncode == 1
    assert "orders.yaml:5" in checked.stderr
    assert "unknown field 'max_msg' for ignore_changes (did you mean 'max_msgs'?)" in checked.stderr


# --- the other front doors: the GitHub Action and the Pulumi provider ---------------------


def _action(url: str, root: Path, specs: Path, mode: str, **inputs: str) -> tuple[int, str]:
    temp = root / f"runner-{mode}-{len(list(root.glob('runner-*')))}"
    temp.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(root),
        "GITHUB_WORKSPACE": str(root),
        "GITHUB_OUTPUT": str(temp / "output"),
        "GITHUB_STEP_SUMMARY": str(temp / "summary.md"),
        "RUNNER_TEMP": str(temp),
        "INPUT_PATH": specs.name,
        "INPUT_SERVER": url,
        "INPUT_MODE": mode,
    } | {f"INPUT_{name.upper()}": value for name, value in inputs.items()}
    done = subprocess.run(
        [sys.executable, "-m", "action"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_the_action_refuses_a_prevented_destroy(clean_server: NatsServer, protected: Path) -> None:
    (protected / "orders.yaml").unlink()
    flags = {"prune": "true", "allow_replace": "true", "allow_data_loss": "true", "migrate": "true"}
    code, output = _action(clean_server.url, protected.parent, protected, "apply", **flags)
    assert code == 1, output
    assert "protected by lifecycle prevent_destroy" in output
    assert _messages(clean_server.url) == 20


def test_pulumi_refuses_to_destroy_a_protected_resource(clean_server: NatsServer) -> None:
    """Pulumi's destroy builds its delete step itself: the executor's one rule reads the
    protection the resource's create recorded."""
    from pulumi_provider import JetStreamProvider

    provider = JetStreamProvider(connection={"servers": clean_server.url})
    inputs = {
        "kind": "Stream",
        "name": "ORDERS",
        "subjects": ["orders.>"],
        "lifecycle": {"prevent_destroy": True},
    }
    news = provider.check({}, inputs).inputs
    created = provider.create(news)
    run(_publish(clean_server.url, "orders.new", 3))
    assert PROTECT_KEY in _info(clean_server.url, "ORDERS")["config"]["metadata"]
    with pytest.raises(RefusedPlan, match="prevent_destroy"):
        provider.delete(created.id, {**created.outs, "allow_destroy": True})
    assert _messages(clean_server.url) == 3


def test_the_action_honours_an_environments_protection(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The Action's ``environment`` input reads the project file's lifecycle too."""
    root = tmp_path / "ws"
    specs = _specs(root, other=OTHER)
    _project(root, clean_server.url, "{prevent_destroy: true}")
    code, output = _action("", root, specs, "apply", path="", environment="prod")
    assert code == 0, output
    run(_publish(clean_server.url, "other.new", 4))
    (specs / "other.yaml").write_text(OTHER.replace("OTHER", "ORDERS").replace("other", "orders"))
    flags = {"prune": "true", "allow_replace": "true", "allow_data_loss": "true"}
    code, output = _action("", root, specs, "apply", path="", environment="prod", **flags)
    assert code == 1, output
    assert "reconcile.yaml:6" in output and "delete Stream OTHER" in output
    assert _messages(clean_server.url, "OTHER") == 4


def test_the_example_plans_as_its_comments_say(clean_server: NatsServer, tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "examples" / "lifecycle" / "specs"
    options = _options(clean_server)
    result = run(engine.apply([example], options, lock_timeout=None))
    assert [f"{s.action} {s.label}" for s in result.applied] == [
        "create Stream ORDERS",
        "create Consumer ORDERS/fulfilment",
    ]
    assert [(n.label, n.missing) for n in result.plan.observed] == [("Stream LEGACY_AUDIT", True)]
    assert PROTECT_KEY in _info(clean_server.url, "ORDERS")["config"]["metadata"]
    _edit(clean_server.url, "ORDERS", max_msgs=5000)
    assert not run(engine.plan([example], options)).has_changes


def test_a_saved_plan_keeps_its_environments_protection(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``apply FILE`` plans again with the environment's lifecycle read from the project
    file, as ``apply --env`` does: the prevented delete stays refused."""
    root = tmp_path / "ws"
    specs = _specs(root, other=OTHER)
    (specs / "orders.yaml").write_text(OTHER.replace("OTHER", "ORDERS").replace("other", "orders"))
    _project(root, clean_server.url, "{prevent_destroy: true}")
    applied = reconcile("apply", "--env", "prod", "--yes", "--no-lock", cwd=root)
    assert applied.returncode == 0, applied.stderr
    run(_publish(clean_server.url, "other.new", 6))
    (specs / "other.yaml").unlink()
    saved = reconcile("plan", "--env", "prod", "--prune", "--out", "plan.json", cwd=root)
    assert saved.returncode in (0, 2), saved.stderr
    refused = reconcile(
        "apply",
        "plan.json",
        "--env",
        "prod",
        "--prune",  # given at apply as at plan (the file never grants it)
        "--yes",
        "--no-lock",
        "--allow-data-loss",
        cwd=root,
    )
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "reconcile.yaml:6" in refused.stderr, refused.stderr
    assert _messages(clean_server.url, "OTHER") == 6


def test_an_export_keeps_the_protection(clean_server: NatsServer, protected: Path) -> None:
    """The protection record exports as ``lifecycle: {prevent_destroy: true}``, not as
    metadata: applying the export keeps the stream protected and changes nothing."""
    out = protected.parent / "exported"
    done = reconcile("export", "--server", clean_server.url, "--out", str(out), cwd=out.parent)
    assert done.returncode == 0, done.stderr
    text = (out / "stream-ORDERS.yaml").read_text()
    assert "prevent_destroy: true" in text and PROTECT_KEY not in text
    assert "prevent_destroy" not in (out / "stream-OTHER.yaml").read_text()
    assert not run(engine.plan([out], _options(clean_server))).has_changes


def test_pulumi_never_creates_an_observed_resource(clean_server: NatsServer) -> None:
    from pulumi_provider import JetStreamProvider

    provider = JetStreamProvider(connection={"servers": clean_server.url})
    inputs = {"kind": "Stream", "name": "LATER", "lifecycle": {"mode": "observe"}}
    news = provider.check({}, inputs).inputs
    with pytest.raises(ReconcileError, match="never written; not on the server: not created"):
        provider.create(news)
    assert run(_request(clean_server.url, "$JS.API.STREAM.INFO.LATER"))["error"]["code"] == 404


def test_a_restore_never_replaces_a_protected_stream(
    clean_server: NatsServer, protected: Path
) -> None:
    """``restore --replace-existing --allow-data-loss`` would delete ORDERS and create it
    again from the backup: its protection refuses that, and every message stays."""
    tmp = protected.parent
    out = tmp / "backup"
    url = ("--server", clean_server.url)
    assert reconcile("backup", str(protected), "--out", str(out), *url, cwd=tmp).returncode == 0
    run(_publish(clean_server.url, "orders.new", 5))
    flags = ("--replace-existing", "--allow-replace", "--allow-data-loss", "--yes")
    refused = reconcile("restore", str(out), *url, *flags, cwd=tmp)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "protected by lifecycle prevent_destroy" in refused.stderr
    assert "orders.yaml:7" in refused.stderr
    assert _messages(clean_server.url) == 25
