"""A backup folder holds its streams' configuration as spec files (``DIR/specs``), in the
export format: a plan of them against the server backed up is empty, and ``backup
verify`` checks them against the manifest's digests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import nats
from backup_fixtures import SPECS, fill
from cli_runner import reconcile
from servers import NatsServer, options, run

from reconciler.jetstream import open_client

BACKED_UP = ["KV_settings", "LOGS", "ORDERS"]
STREAMS = ["FAST", "LOGS", "ORDERS"]


async def _add_app_consumer(server: NatsServer) -> None:
    """A consumer an application made (no spec, no marker): part of the configuration."""
    nc = await nats.connect(server.url)
    try:
        config = {"durable_name": "reader", "ack_policy": "none", "filter_subject": "logs.1"}
        body = {"stream_name": "LOGS", "config": config}
        reply = await nc.request("$JS.API.CONSUMER.CREATE.LOGS.reader", json.dumps(body).encode())
        assert "error" not in json.loads(reply.data), reply.data
    finally:
        await nc.close()


async def _messages(server: NatsServer) -> dict[str, int]:
    async with open_client(options(server)) as client:
        return {s: (await client.stream_info(s))["state"]["messages"] for s in BACKED_UP}


def _older_backup(out: Path) -> None:
    """A backup of this folder made before ``specs.d``: its spec file in ``DIR/specs``."""
    gone = b"kind: Stream\nname: GONE\n"
    (out / "specs").mkdir(parents=True)
    (out / "specs" / "stream-GONE.yaml").write_bytes(gone)
    digest = {"sha256": hashlib.sha256(gone).hexdigest(), "size": len(gone)}
    manifest = {"format": "jetstream-gitops/backup", "format_version": 1, "created": "x"}
    manifest |= {"server": {}, "streams": [], "specs": {"stream-GONE.yaml": digest}}
    (out / "manifest.json").write_text(json.dumps(manifest))


def test_backup_writes_spec_files_that_plan_empty_and_verify_checks(
    server_factory: object, tmp_path: Path
) -> None:
    server = server_factory()  # type: ignore[operator]
    specs = tmp_path / "specs.yaml"
    specs.write_text(SPECS)
    done = reconcile("apply", str(specs), "--server", server.url, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run(fill(server))
    run(_add_app_consumer(server))
    out = tmp_path / "backup"
    _older_backup(out)

    done = reconcile("backup", str(specs), "--out", str(out), "--server", server.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (out / "specs").exists()  # the older backup's spec file, and its folder

    # exactly what `reconcile export` writes for these streams (the memory stream's
    # configuration too: its data cannot be snapshot, its spec can be written)
    exported = tmp_path / "exported"
    done = reconcile(
        "export", "--all-owners", "--out", str(exported), "--server", server.url, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in (out / "specs.d").iterdir())
    assert written == [
        "kv-settings.yaml",
        "stream-FAST.yaml",
        "stream-LOGS.yaml",
        "stream-ORDERS.yaml",
    ]
    assert written == sorted(p.name for p in exported.iterdir())
    for name in written:
        assert (out / "specs.d" / name).read_text() == (exported / name).read_text()
    assert "name: reader" in (out / "specs.d" / "stream-LOGS.yaml").read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["specs"]) == written
    everything = "".join((out / "specs.d" / n).read_text() for n in written)
    assert "value-" not in everything  # KeyValue values are data, never specs

    # empty but for the app's consumer, which a plan adopts (its marker only), as it
    # adopts any exported resource the tool did not manage yet
    planned = reconcile(
        "plan", str(out / "specs.d"), "--server", server.url, "--detailed-exitcode", cwd=tmp_path
    )
    assert planned.returncode == 2, planned.stdout + planned.stderr
    assert "Plan: 0 to create, 1 to update, 0 to replace, 0 to delete" in planned.stdout
    changes = [line.strip() for line in planned.stdout.splitlines() if "→" in line]
    assert changes == ['metadata.io.jetstream-gitops/managed-by: (absent) → "reconcile"']
    assert "Consumer LOGS/reader" in planned.stdout
    applied = reconcile(
        "apply", str(out / "specs.d"), "--server", server.url, "--yes", cwd=tmp_path
    )
    assert applied.returncode == 0, applied.stderr
    planned = reconcile(
        "plan", str(out / "specs.d"), "--server", server.url, "--detailed-exitcode", cwd=tmp_path
    )
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "No changes." in planned.stdout
    assert run(_messages(server)) == {"KV_settings": 12, "LOGS": 300, "ORDERS": 120}

    verified = reconcile("backup", "verify", str(out), cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr
    assert "4 spec file(s)" in verified.stdout

    orders = out / "specs.d" / "stream-ORDERS.yaml"
    orders.write_text(orders.read_text().replace("orders.>", "orders.*"))
    (out / "specs.d" / "stream-EXTRA.yaml").write_text("kind: Stream\nname: EXTRA\n")
    verified = reconcile("backup", "verify", str(out), cwd=tmp_path)
    assert verified.returncode == 1
    assert f"{orders}: differs from the manifest's SHA-256" in verified.stderr
    assert "stream-EXTRA.yaml: not in" in verified.stderr

    _later_backup_of_one_stream(out, specs, server, tmp_path)


def _later_backup_of_one_stream(out: Path, specs: Path, server: NatsServer, tmp_path: Path) -> None:
    # a later backup of one stream into the same folder: the added file is not the
    # earlier backup's, so the backup refuses it rather than remove it
    args = ("--stream", "LOGS", "--out", str(out), "--server", server.url)
    done = reconcile("backup", str(specs), *args, cwd=tmp_path)
    assert done.returncode == 1
    assert "stream-EXTRA.yaml is not this backup's" in done.stderr, done.stderr
    assert (out / "specs.d" / "stream-EXTRA.yaml").is_file()
    (out / "specs.d" / "stream-EXTRA.yaml").unlink()
    # once it is gone: only the new backup's spec file remains (the changed one was ours)
    done = reconcile("backup", str(specs), *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (out / "specs.d").iterdir()) == ["stream-LOGS.yaml"]
    assert reconcile("backup", "verify", str(out), cwd=tmp_path).returncode == 0
