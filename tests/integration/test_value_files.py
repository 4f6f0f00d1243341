"""A KeyValue value kept in a file next to the specs (issue 35): the file a spec names
(``value_file``) is data, not a spec, whatever its suffix; and a value ending in a line
break (every file an editor writes) is shown as text with its ``\\n``, not as base64, in
the plan and in drift."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import reconcile
from servers import NatsServer

SPECS = """\
kind: KeyValue
name: app
---
kind: KeyValueEntry
bucket: app
key: flags
value_file: flags.json
---
kind: KeyValueEntry
bucket: app
key: motd
value_file: motd.yaml
"""
FLAGS = '{\n  "dark_mode": true\n}\n'  # pretty-printed JSON, as an editor saves it


def _repo(tmp_path: Path) -> Path:
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "app.yaml").write_text(SPECS)
    (folder / "flags.json").write_text(FLAGS)
    (folder / "motd.yaml").write_text("hello\n")  # a YAML suffix, yet data
    return folder


def test_a_value_file_next_to_the_specs_is_data_not_a_spec(tmp_path: Path) -> None:
    folder = _repo(tmp_path)
    done = reconcile("validate", str(folder), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "3 documents valid: 1 KeyValue, 2 KeyValueEntry" in done.stdout, done.stdout


def test_a_value_ending_in_a_line_break_is_shown_as_text(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    folder = _repo(tmp_path)
    server = ["--server", clean_server.url]
    plan = reconcile("plan", str(folder), *server, "--format", "json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    values = {
        c["name"]: f["after"]
        for c in json.loads(plan.stdout)["changes"]
        if c["kind"] == "KeyValueEntry"
        for f in c["fields"]
    }
    assert values == {"flags": FLAGS, "motd": "hello\n"}
    text = reconcile("plan", str(folder), *server, cwd=tmp_path)
    assert '"hello\\n"' in text.stdout and "base64" not in text.stdout, text.stdout
    assert reconcile("apply", str(folder), *server, "--yes", cwd=tmp_path).returncode == 0
    again = reconcile("plan", str(folder), *server, "--detailed-exitcode", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    (folder / "motd.yaml").write_text("bye\n")
    drift = reconcile("drift", str(folder), *server, cwd=tmp_path)
    assert drift.returncode == 2, drift.stdout + drift.stderr
    assert '"hello\\n"' in drift.stdout and '"bye\\n"' in drift.stdout, drift.stdout
    assert "base64" not in drift.stdout
