"""Configs written by others round-trip exactly on every server of the matrix: validate →
apply → empty re-plan → export → empty re-plan → drift clean (issue: fidelity)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from servers import SERVER_MATRIX, NatsServer, run

from reconciler.cli.export_cmd import HEADER, _dump
from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions
from reconciler.planning.drift import from_plan
from reconciler.planning.export import export_state

MATRIX = [*SERVER_MATRIX, None]


def roundtrip(server: NatsServer, folder: Path, text: str) -> dict[str, Any]:
    """The whole cycle; returns the exported documents by file name."""
    options = ConnectionOptions(servers=server.url)
    specs = folder / "specs"
    specs.mkdir(parents=True)
    (specs / "specs.yaml").write_text(textwrap.dedent(text), encoding="utf-8")
    run(engine.apply([specs], options, lock_timeout=None))
    replan = run(engine.plan([specs], options))
    assert not replan.has_changes, replan.to_json()["changes"]
    exported = folder / "export"
    exported.mkdir()
    files = export_state(run(engine.fetch_live(options)))
    for item in files:
        (exported / item.name).write_text(HEADER.format(schema="x") + _dump(item.documents))
    again = run(engine.plan([exported], options))
    assert not again.has_changes, again.to_json()["changes"]
    report = from_plan(run(engine.plan([specs], options)))
    assert not report.has_drift, report.to_json()["resources"]
    return {item.name: item.documents for item in files}


@pytest.mark.parametrize("version", MATRIX, ids=lambda v: v or "newest")
def test_an_empty_transform_destination_is_a_filter_and_round_trips(
    server_factory: Any, tmp_path: Path, version: str | None
) -> None:
    server: NatsServer = server_factory(version=version)
    exported = roundtrip(
        server,
        tmp_path,
        """
        kind: Stream
        name: ORIGIN
        subjects: ["bar", "baz.>"]
        ---
        kind: Stream
        name: FILTERED
        sources:
          - name: ORIGIN
            subject_transforms:
              - {src: bar, dest: ""}
              - {src: "baz.>"}
        ---
        kind: Stream
        name: COPY
        mirror:
          name: ORIGIN
          subject_transforms: [{src: bar, dest: ""}]
        """,
    )
    source = exported["stream-FILTERED.yaml"][0]["sources"][0]
    assert [t["src"] for t in source["subject_transforms"]] == ["bar", "baz.>"]


@pytest.mark.parametrize("version", MATRIX, ids=lambda v: v or "newest")
def test_nats_cli_config_envelopes_are_read_and_apply(
    server_factory: Any, tmp_path: Path, version: str | None
) -> None:
    """``{"config": {...}}`` (a StreamInfo without created/state) is what the nats CLI reads
    with ``nats stream add --config``; with ``stream_name`` it is a consumer's."""
    server: NatsServer = server_factory(version=version)
    folder = tmp_path / "cli"
    folder.mkdir()
    (folder / "stream.json").write_text(
        json.dumps({"config": {"name": "CLI", "subjects": ["cli.>"], "max_msgs": 10}})
    )
    (folder / "consumer.json").write_text(
        json.dumps(
            {"stream_name": "CLI", "config": {"durable_name": "C", "ack_policy": "explicit"}}
        )
    )
    options = ConnectionOptions(servers=server.url)
    run(engine.apply([folder], options, lock_timeout=None))
    live = run(engine.fetch_live(options))
    assert live.streams["CLI"]["max_msgs"] == 10 and ("CLI", "C") in live.consumers
    assert not run(engine.plan([folder], options)).has_changes
