"""Drift field rules as a careless user writes them, against a real nats-server.

- A field rule never hides a difference apply cannot undo in place: an app deleted a
  declared file stream and made it again in memory (its messages now vanish on a
  restart); ``Stream ORDERS storage`` (or ``s*``) reported it in sync while the plan
  replaces the stream.
- A field rule never hides this tool's own metadata (the managed-by marker, the owner,
  the prevent_destroy record): ``metadata.*`` hid that someone had stripped a protected
  stream's record.
- A field rule that matches every field (``[!.]*``, ``?*``, ``[a-z]*``) is refused like
  ``*``: it silenced a declared stream's whole drift (its subjects widened out of band).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, run

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions
from reconciler.planning.plan import Ownership
from reconciler.specs.lifecycle import PROTECT_KEY
from reconciler.specs.spec import MANAGED_KEY

SPECS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
storage: file
"""


def _project(root: Path, url: str, rules: list[str]) -> None:
    (root / "specs").mkdir(parents=True, exist_ok=True)
    (root / "specs" / "orders.yaml").write_text(SPECS, encoding="utf-8")
    listed = "".join(f"\n  - {json.dumps(rule)}" for rule in rules)
    project = f"owner: default\nspecs: [specs]\nignore:{listed}\nenvironments:\n"
    project += f"  local:\n    servers: {url}\n"
    (root / "reconcile.yaml").write_text(textwrap.dedent(project), encoding="utf-8")
    result = run(
        engine.apply([root / "specs"], ConnectionOptions(servers=url), ownership=Ownership())
    )
    assert result.ok


async def _api(url: str, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    nc = await nats.connect(url)
    try:
        data = json.dumps(body).encode() if body is not None else b""
        return dict(json.loads((await nc.request(subject, data, timeout=5)).data))
    finally:
        await nc.close()


async def _publish(url: str, count: int) -> int:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for n in range(count):
            await js.publish("orders.new", str(n).encode())
        info = await nc.request("$JS.API.STREAM.INFO.ORDERS", b"", timeout=5)
        return int(json.loads(info.data)["state"]["messages"])
    finally:
        await nc.close()


@pytest.mark.parametrize("rule", ["Stream ORDERS storage", "Stream ORDERS s*"])
def test_a_field_rule_never_hides_a_difference_only_a_replace_undoes(
    clean_server: NatsServer, tmp_path: Path, rule: str
) -> None:
    url = clean_server.url
    _project(tmp_path, url, [rule])
    config = run(_api(url, "$JS.API.STREAM.INFO.ORDERS"))["config"]
    run(_api(url, "$JS.API.STREAM.DELETE.ORDERS"))  # an app makes it again, in memory
    run(_api(url, "$JS.API.STREAM.CREATE.ORDERS", {**config, "storage": "memory"}))
    assert run(_publish(url, 25)) == 25

    drift = reconcile("drift", "--env", "local", "--format", "json", cwd=tmp_path)
    planned = reconcile("plan", "--env", "local", "--format", "json", cwd=tmp_path)

    assert drift.returncode == 2, drift.stdout + drift.stderr
    report = json.loads(drift.stdout)
    orders = next(r for r in report["resources"] if r["name"] == "ORDERS")
    assert orders["status"] == "drifted"
    assert [f["path"] for f in orders["fields"]] == ["storage"]
    assert [c["action"] for c in json.loads(planned.stdout)["changes"]] == ["replace"]
    assert run(_publish(url, 0)) == 25  # nothing was touched


@pytest.mark.parametrize("glob", ["[!.]*", "?*", "[a-z]*", "*[!.]"])
def test_a_field_rule_matching_every_field_is_refused(
    clean_server: NatsServer, tmp_path: Path, glob: str
) -> None:
    url = clean_server.url
    _project(tmp_path, url, [f"Stream ORDERS {glob}"])
    config = run(_api(url, "$JS.API.STREAM.INFO.ORDERS"))["config"]
    config["subjects"] = ["orders.>", "payments.>"]  # widened out of band
    run(_api(url, "$JS.API.STREAM.UPDATE.ORDERS", config))

    drift = reconcile("drift", "--env", "local", cwd=tmp_path)

    assert drift.returncode == 1, drift.stdout + drift.stderr
    assert "reconcile.yaml:4: ignore.0: a field rule names a field" in drift.stderr
    assert "Traceback" not in drift.stderr
    subjects = run(_api(url, "$JS.API.STREAM.INFO.ORDERS"))["config"]["subjects"]
    assert subjects == ["orders.>", "payments.>"]


def test_a_field_rule_never_hides_the_tools_own_metadata(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Someone strips the managed-by marker and the prevent_destroy record out of band
    (the stream is no longer protected on the server); ``metadata.*`` hid it."""
    url = clean_server.url
    _project(tmp_path, url, ["Stream ORDERS metadata.*"])
    spec = tmp_path / "specs" / "orders.yaml"
    spec.write_text(SPECS + "lifecycle:\n  prevent_destroy: true\n", encoding="utf-8")
    assert reconcile("apply", "--env", "local", "-y", cwd=tmp_path).returncode == 0
    config = run(_api(url, "$JS.API.STREAM.INFO.ORDERS"))["config"]
    assert PROTECT_KEY in config["metadata"]
    config["metadata"] = {
        "app": "1.2",
        **{k: v for k, v in config["metadata"].items() if k.startswith("_nats")},
    }
    run(_api(url, "$JS.API.STREAM.UPDATE.ORDERS", config))
    assert run(_publish(url, 5)) == 5

    drift = reconcile("drift", "--env", "local", "--format", "json", cwd=tmp_path)

    assert drift.returncode == 2, drift.stdout + drift.stderr
    orders = next(r for r in json.loads(drift.stdout)["resources"] if r["name"] == "ORDERS")
    paths = {f["path"] for f in orders["fields"]}
    assert paths == {f"metadata.{MANAGED_KEY}", f"metadata.{PROTECT_KEY}"}  # app: hidden
    assert run(_publish(url, 0)) == 5
