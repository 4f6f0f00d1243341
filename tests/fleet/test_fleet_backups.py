"""`fleet drift --backups`: the age of each stream's newest backup and the streams never
backed up, from manifests written by real backups of a real server.

The older of the two backups is real too; only its manifest's ``created`` is set back
to 2026-01-01 (a manifest has no digest of itself), so its age is known."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import nats
import pytest
from servers import NatsServer, run

from reconciler.backup.manifest import FORMAT, FORMAT_VERSION
from reconciler.backup.take import Selection, take_backup
from reconciler.execution import run as engine
from reconciler.fleet.backups import read_backups
from reconciler.fleet.job import fleet_drift
from reconciler.jetstream import ConnectionOptions

SPECS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
---
kind: Stream
name: LOGS
subjects: ["logs.>"]
---
kind: KeyValue
name: settings
"""
DECLARED = ("KV_settings", "LOGS", "ORDERS")
OLD = "2026-01-01T00:00:00Z"


async def _raw_stream_and_messages(url: str) -> int:
    """RAW: made by hand (live, declared by no spec); 5 messages in ORDERS, counted."""
    nc = await nats.connect(url)
    try:
        body = json.dumps({"name": "RAW", "subjects": ["raw.>"]}).encode()
        assert "error" not in json.loads((await nc.request("$JS.API.STREAM.CREATE.RAW", body)).data)
        js = nc.jetstream()
        for i in range(5):
            await js.publish("orders.new", f"order-{i}".encode())
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.ORDERS", b"")).data)
        return int(info["state"]["messages"])
    finally:
        await nc.close()


def _backup(url: str, out: Path, only: tuple[str, ...]) -> None:
    selection = Selection(declared=DECLARED, only=only)
    run(take_backup(ConnectionOptions(servers=url), out, selection))


def _snapshot(url: str, out: Path) -> datetime:
    command = ["snapshot", "--env", "eu", "--server", url, "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "reconciler", *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    first = json.loads(out.read_text().splitlines()[0])
    return datetime.fromisoformat(first["captured_at"])


def _age(at: datetime, manifest: Path) -> int:
    created = datetime.fromisoformat(json.loads(manifest.read_text())["created"])
    return max(0, int((at - created).total_seconds()))


def test_backup_ages_and_streams_never_backed_up_per_environment(
    spark: Any, server_factory: Any, tmp_path: Path
) -> None:
    server: NatsServer = server_factory()
    fleet = tmp_path / "fleet"
    (fleet / "eu").mkdir(parents=True)
    (fleet / "eu" / "specs.yaml").write_text(SPECS)
    assert run(engine.apply([fleet / "eu"], ConnectionOptions(servers=server.url))).ok
    assert run(_raw_stream_and_messages(server.url)) == 5

    root = tmp_path / "backups"
    _backup(server.url, root / "eu" / "old", ("ORDERS", "KV_settings"))
    old = root / "eu" / "old" / "manifest.json"
    body = json.loads(old.read_text())
    old.write_text(json.dumps(body | {"created": OLD}))
    _backup(server.url, root / "eu" / "new", ("ORDERS",))
    (root / "eu" / "broken").mkdir()
    (root / "eu" / "broken" / "manifest.json").write_text("{")
    captured = _snapshot(server.url, tmp_path / "snaps" / "eu.jsonl")

    result = fleet_drift(
        specs=fleet, snapshots=tmp_path / "snaps", out=tmp_path / "out", spark=spark, backups=root
    )
    rows = {
        r["stream"]: r.asDict()
        for r in spark.read.parquet(str(tmp_path / "out" / "backups")).collect()
    }
    assert sorted(rows) == ["KV_settings", "LOGS", "ORDERS", "RAW"]
    assert {s: (r["backups"], r["age_seconds"]) for s, r in rows.items()} == {
        "ORDERS": (2, _age(captured, root / "eu" / "new" / "manifest.json")),
        "KV_settings": (1, _age(captured, old)),
        "LOGS": (0, None),  # declared, never backed up
        "RAW": (0, None),  # live only, never backed up
    }
    assert rows["KV_settings"]["age_seconds"] > 300 * 86400
    assert (
        rows["ORDERS"]["messages"] == 5 and rows["LOGS"]["declared"] and not rows["RAW"]["declared"]
    )
    assert rows["RAW"]["live"] and rows["ORDERS"]["newest"] is not None

    section = result.summary["backups"]
    assert section["manifests"] == 2 and section["never_backed_up"] == 2
    assert [r["stream"] for r in section["rows"]][:2] == ["LOGS", "RAW"]  # never, first
    assert section["by_env"]["eu"]["oldest_age_seconds"] == rows["KV_settings"]["age_seconds"]
    assert section["by_env"]["eu"]["age_measured_at"] == captured.strftime("%Y-%m-%dT%H:%M:%SZ")
    # an unreadable manifest is an input error: reported, the rest still counted, exit 1
    assert section["problems"] == [
        f"{root / 'eu' / 'broken' / 'manifest.json'}: not a JSON file (JSONDecodeError)"
    ]
    assert result.exit_code == 1 and not result.summary["complete"]
    page = (tmp_path / "out" / "report.html").read_text()
    assert 'id="backups-figures" data-value="2"' in page
    age = rows["KV_settings"]["age_seconds"]
    assert 'data-env="eu" data-stream="KV_settings"' in page and f'data-value="{age}"' in page
    assert 'data-stream="LOGS"><td>eu</td><td>LOGS</td><td colspan=3 class=error' in page
    assert run(_raw_stream_and_messages_count(server.url)) == 5


async def _raw_stream_and_messages_count(url: str) -> int:
    nc = await nats.connect(url)
    try:
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.ORDERS", b"")).data)
        return int(info["state"]["messages"])
    finally:
        await nc.close()


def test_a_manifest_created_out_of_pythons_years_in_utc_is_a_problem_naming_it(
    tmp_path: Path,
) -> None:
    """``created`` year 10000 once in UTC (``9999-12-31T23:00:00-14:00``): the job
    stopped with an OverflowError; now that manifest is a problem naming its file."""
    body = {"format": FORMAT, "format_version": FORMAT_VERSION, "streams": []}
    for name, created in (("forged", "9999-12-31T23:00:00-14:00"), ("good", OLD)):
        folder = tmp_path / "eu" / name
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(json.dumps(body | {"created": created}))
    seen, problems = read_backups(tmp_path)
    assert [backup.folder.name for backup in seen] == ["good"]
    (problem,) = problems
    assert str(tmp_path / "eu" / "forged" / "manifest.json") in problem


@pytest.mark.timeout(60)
def test_a_manifest_that_is_a_fifo_or_nested_too_deep_is_a_problem_naming_it(
    tmp_path: Path,
) -> None:
    """Backup folders come from elsewhere (artifacts, other machines). A manifest.json
    that is a FIFO held ``fleet drift --backups`` (and any reader of a backup's JSON)
    waiting for a writer for ever; one of ``[`` nested 100,000 deep stopped it with a
    RecursionError naming no file. Each is now a problem naming its file, and the
    others are still read."""
    body = {"format": FORMAT, "format_version": FORMAT_VERSION, "streams": []}
    for name in ("fifo", "deep", "good"):
        (tmp_path / "eu" / name).mkdir(parents=True)
    os.mkfifo(tmp_path / "eu" / "fifo" / "manifest.json")
    (tmp_path / "eu" / "deep" / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "eu" / "good" / "manifest.json").write_text(json.dumps(body | {"created": OLD}))

    seen, problems = read_backups(tmp_path)

    assert [backup.folder.name for backup in seen] == ["good"]
    assert problems == [
        f"{tmp_path / 'eu' / 'deep' / 'manifest.json'}: not a JSON file (nested too deep)",
        f"{tmp_path / 'eu' / 'fifo' / 'manifest.json'}: not a regular file",
    ]
