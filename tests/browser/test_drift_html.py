"""The html drift report in a real headless browser (Debian's chromium).

The page is made from a real server's drift, opened from a file with no network, and
read back from the DOM chromium built after running the page's script: its figures must
equal the JSON report's, and its filters must show the right rows.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import nats
import pytest
from servers import NatsServer, run

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions
from reconciler.planning.drift import DriftReport, from_plan
from reconciler.render.drift_html import render_drift_html

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)
pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
    ),
]
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)
SPECS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_age: 7d
---
kind: Stream
name: EVENTS
subjects: ["events.>"]
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


async def _hand_edit(url: str) -> None:
    nc = await nats.connect(url)
    try:
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.ORDERS", b"", timeout=5)).data)
        config = info["config"] | {"max_age": 3600 * 10**9, "description": "edited by hand"}
        for subject, body in (
            ("$JS.API.STREAM.UPDATE.ORDERS", config),
            ("$JS.API.STREAM.CREATE.SCRATCH", {"name": "SCRATCH", "subjects": ["scratch"]}),
        ):
            reply = json.loads((await nc.request(subject, json.dumps(body).encode())).data)
            assert "error" not in reply, reply
    finally:
        await nc.close()


@pytest.fixture
def report(clean_server: NatsServer, tmp_path: Path) -> DriftReport:
    spec = tmp_path / "specs.yaml"
    spec.write_text(SPECS)
    options = ConnectionOptions(servers=clean_server.url)
    run(engine.apply([spec], options))
    run(_hand_edit(clean_server.url))
    spec.write_text(textwrap.dedent(SPECS) + "---\nkind: Consumer\nstream: ORDERS\nname: audit\n")
    return from_plan(run(engine.plan([spec], options)))


def chromium(tmp_path: Path, *args: str) -> str:
    assert CHROMIUM is not None
    profile = tmp_path / "profile"
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


class Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, dict[str, str | None]] = {}
        self.rows: list[dict[str, str | None]] = []
        self.body: dict[str, str | None] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.by_id[str(found["id"])] = found
        if tag == "tr" and found.get("class") == "resource":
            self.rows.append(found)
        if tag == "body":
            self.body = found


def rendered(tmp_path: Path, page: Path, fragment: str = "") -> Dom:
    dom = Dom()
    dom.feed(chromium(tmp_path, "--dump-dom", page.as_uri() + fragment))
    assert dom.body.get("data-ready") == "true", "the page's script did not run to the end"
    return dom


def test_rendered_figures_equal_the_json_report(report: DriftReport, tmp_path: Path) -> None:
    page = tmp_path / "drift.html"
    page.write_text(render_drift_html(report))
    summary: dict[str, Any] = report.to_json()["summary"]

    dom = rendered(tmp_path, page)

    for name in ("in_sync", "drifted", "missing", "unmanaged", "orphaned", "drift", "live"):
        assert dom.by_id[f"figure-{name}"]["data-value"] == str(summary[name]), name
    assert float(dom.by_id["figure-coverage"]["data-value"] or "nan") == summary["coverage"]
    assert summary["drifted"] == 1 and summary["missing"] == 1 and summary["unmanaged"] == 1
    assert len(dom.rows) == summary["resources"]
    assert dom.by_id["shown-count"]["data-value"] == str(summary["resources"])
    assert all(row.get("hidden") is None for row in dom.rows)


def test_filters_from_the_fragment_show_only_matching_rows(
    report: DriftReport, tmp_path: Path
) -> None:
    page = tmp_path / "drift.html"
    page.write_text(render_drift_html(report))

    drifted = rendered(tmp_path, page, "#status=drifted,missing")
    visible = [r["data-name"] for r in drifted.rows if r.get("hidden") is None]
    assert visible == ["ORDERS", "ORDERS/audit"]
    assert drifted.by_id["shown-count"]["data-value"] == "2"

    consumers = rendered(tmp_path, page, "#kind=Consumer")
    visible = [r["data-name"] for r in consumers.rows if r.get("hidden") is None]
    assert visible == ["ORDERS/audit", "ORDERS/ship"]


def test_page_renders_to_a_screenshot(report: DriftReport, tmp_path: Path) -> None:
    page = tmp_path / "drift.html"
    page.write_text(render_drift_html(report))
    shot = tmp_path / "drift.png"
    chromium(tmp_path, "--window-size=1200,900", f"--screenshot={shot}", page.as_uri())
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 900)


class Groups(HTMLParser):
    """The status groups of a drift page, in order, and whether each starts open."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: list[tuple[str, bool]] = []
        self.by_id: dict[str, dict[str, str | None]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "details" and found.get("class") == "group":
            self.groups.append((str(found["data-group"]), "open" in found))
        if found.get("id"):
            self.by_id[str(found["id"])] = found


def test_page_says_when_and_against_which_server_without_its_secrets(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    spec = tmp_path / "specs.yaml"
    spec.write_text(SPECS)
    secret = "pa55-in-the-url"
    url = clean_server.url.replace("nats://", f"nats://deployer:{secret}@")
    report = from_plan(run(engine.plan([spec], ConnectionOptions(servers=url))))
    page = tmp_path / "drift.html"
    page.write_text(render_drift_html(report))

    dom = Groups()
    dom.feed(chromium(tmp_path, "--dump-dom", page.as_uri()))
    html = page.read_text()
    assert secret not in html and "deployer" not in html
    port = clean_server.url.rsplit(":", 1)[1]
    assert f'<code id="server-address">nats://127.0.0.1:{port}</code>' in html
    assert "generated-at" in dom.by_id and report.generated_at and report.generated_at in html
    assert f"nats-server {report.server_version}" in html


def test_drifted_and_missing_come_first_and_the_rest_is_collapsed(
    report: DriftReport, tmp_path: Path
) -> None:
    page = tmp_path / "drift.html"
    page.write_text(render_drift_html(report))
    dom = Groups()
    dom.feed(chromium(tmp_path, "--dump-dom", page.as_uri()))
    assert dom.groups == [
        ("drifted", True),
        ("missing", True),
        ("unmanaged", False),
        ("in_sync", False),
    ]
    # a filter from the fragment opens the groups holding what it shows
    opened = Groups()
    opened.feed(chromium(tmp_path, "--dump-dom", page.as_uri() + "#status=unmanaged"))
    assert ("unmanaged", True) in opened.groups


def test_the_drift_page_and_the_fleet_page_colour_a_status_alike(
    report: DriftReport, tmp_path: Path
) -> None:
    from reconciler.fleet.report import COLOURS
    from reconciler.render.drift_html import COLORS
    from reconciler.render.palette import STATUS_COLOURS

    assert COLORS is STATUS_COLOURS and COLOURS is STATUS_COLOURS
    html = render_drift_html(report)
    assert f'class="swatch" style="background:{STATUS_COLOURS["drifted"]}"' in html
