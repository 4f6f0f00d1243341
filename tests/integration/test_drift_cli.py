"""`reconcile drift` against a real nats-server, run as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import nats
from servers import NatsServer, run

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "drift.schema.json").read_text()
)
HOUR = 3600 * 10**9

SPECS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_age: 7d
---
kind: Consumer
stream: ORDERS
name: ship
ack_policy: explicit
---
kind: KeyValue
name: config
history: 5
"""


def write(directory: Path, text: str, name: str = "orders.yaml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def drift(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", "drift", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def apply(server: NatsServer, *paths: Path) -> None:
    run(engine.apply(list(paths), ConnectionOptions(servers=server.url)))


async def _api(url: str, subject: str, body: dict[str, Any] | None) -> dict[str, Any]:
    nc = await nats.connect(url)
    try:
        payload = json.dumps(body).encode() if body is not None else b""
        reply = json.loads((await nc.request(subject, payload, timeout=5)).data)
    finally:
        await nc.close()
    assert "error" not in reply, reply
    return dict(reply)


def api(server: NatsServer, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    return run(_api(server.url, subject, body))


def edit_by_hand(server: NatsServer) -> None:
    """What someone with the `nats` CLI does to production: shorten max_age, add a stream."""
    config = api(server, "$JS.API.STREAM.INFO.ORDERS")["config"]
    config["max_age"] = HOUR
    api(server, "$JS.API.STREAM.UPDATE.ORDERS", config)
    api(server, "$JS.API.STREAM.CREATE.SCRATCH", {"name": "SCRATCH", "subjects": ["scratch"]})


def test_server_matching_the_specs_is_in_sync(clean_server: NatsServer, tmp_path: Path) -> None:
    write(tmp_path / "specs", SPECS)
    apply(clean_server, tmp_path / "specs")
    result = drift("specs", "--server", clean_server.url, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "No drift: 3 resource(s) in sync; coverage 100% (3 of 3 live resources declared by a spec)."
    )


def test_hand_edits_missing_and_unmanaged_resources_are_drift(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = write(tmp_path / "specs", SPECS)
    apply(clean_server, specs)
    edit_by_hand(clean_server)
    specs.write_text(SPECS + "---\nkind: Consumer\nstream: ORDERS\nname: audit\n")

    result = drift("specs", "--server", clean_server.url, "--format", "json", cwd=tmp_path)

    assert result.returncode == 2, result.stderr
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA)
    found = {(r["kind"], r["name"]): r for r in report["resources"]}
    assert found["Stream", "ORDERS"]["status"] == "drifted"
    assert found["Stream", "ORDERS"]["fields"] == [
        {"path": "max_age", "declared": 7 * 24 * HOUR, "live": HOUR}
    ]
    assert found["Stream", "ORDERS"]["source"] == "specs/orders.yaml:1"
    assert found["Consumer", "audit"]["status"] == "missing"
    assert found["Stream", "SCRATCH"]["status"] == "unmanaged"
    assert found["KeyValue", "config"]["status"] == "in_sync"
    summary = report["summary"]
    assert (summary["drift"], summary["live"], summary["coverage"]) == (3, 4, 0.75)


def test_managed_resource_whose_spec_was_removed_is_orphaned(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = write(tmp_path / "specs", SPECS)
    apply(clean_server, specs)
    specs.write_text(SPECS.split("---", maxsplit=1)[0])  # only the stream remains declared

    result = drift("specs", "--server", clean_server.url, "--format", "markdown", cwd=tmp_path)

    assert result.returncode == 2, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert any("orphaned | Consumer | `ORDERS/ship`" in row for row in rows)
    assert any("orphaned | KeyValue | `config`" in row for row in rows)


def test_html_report_is_written_to_the_out_file(clean_server: NatsServer, tmp_path: Path) -> None:
    write(tmp_path / "specs", SPECS)
    result = drift(
        "specs", "--server", clean_server.url, "--format", "html", "--out", "r/d.html", cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "Report written to r/d.html" in result.stderr
    page = (tmp_path / "r" / "d.html").read_text()
    assert '<dd id="figure-missing" data-value="3">3</dd>' in page


def test_secrets_in_the_server_url_never_reach_any_report(
    server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(token="s3cr3t-t0ken")
    write(tmp_path / "specs", SPECS)
    url = server.url.replace("nats://", "nats://s3cr3t-t0ken@")
    for fmt in ("text", "json", "markdown", "html"):
        result = drift("specs", "--server", url, "--format", fmt, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "s3cr3t-t0ken" not in result.stdout + result.stderr


def test_invalid_spec_is_an_error_at_its_file_and_line(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    write(tmp_path / "specs", "kind: Stream\nname: ORDERS\nmax_age: soon\n")
    result = drift("specs", "--server", clean_server.url, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("specs/orders.yaml:3: max_age")


def test_unreachable_server_is_an_error_not_a_report(tmp_path: Path) -> None:
    from servers import unused_port

    write(tmp_path / "specs", SPECS)
    url = f"nats://127.0.0.1:{unused_port()}"
    result = drift("specs", "--server", url, "--connect-timeout", "1", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error:")
