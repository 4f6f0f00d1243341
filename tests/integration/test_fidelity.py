"""Configs written by others round-trip exactly on every server of the matrix: validate →
apply → empty re-plan → export → empty re-plan → drift clean (issue: fidelity)."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from servers import SERVER_MATRIX, NatsServer, run

from reconciler.cli.export_cmd import HEADER, _dump
from reconciler.errors import UnsupportedField
from reconciler.execution import run as engine
from reconciler.execution.requests import Quiet
from reconciler.jetstream import ConnectionOptions
from reconciler.planning.drift import from_plan
from reconciler.planning.export import export_state


class Said(Quiet):
    """The notices a run said (spec warnings among them)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def notice(self, message: str) -> None:
        self.lines.append(message)


MATRIX = [*SERVER_MATRIX, None]


@dataclass(frozen=True)
class Target:
    """One server of the matrix and how to reach it."""

    server: NatsServer
    options: ConnectionOptions


@pytest.fixture(params=MATRIX, ids=lambda v: v or "newest")
def target(request: pytest.FixtureRequest, server_factory: Any) -> Target:
    server: NatsServer = server_factory(version=request.param)
    return Target(server, ConnectionOptions(servers=server.url))


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


def test_an_empty_transform_destination_is_a_filter_and_round_trips(
    target: Target, tmp_path: Path
) -> None:
    server = target.server
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


def test_nats_cli_config_envelopes_are_read_and_apply(target: Target, tmp_path: Path) -> None:
    """``{"config": {...}}`` (a StreamInfo without created/state) is what the nats CLI reads
    with ``nats stream add --config``; with ``stream_name`` it is a consumer's."""
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
    options = target.options
    run(engine.apply([folder], options, lock_timeout=None))
    live = run(engine.fetch_live(options))
    assert live.streams["CLI"]["max_msgs"] == 10 and ("CLI", "C") in live.consumers
    assert not run(engine.plan([folder], options)).has_changes


def test_replicas_a_single_server_cannot_hold_are_refused_before_any_change(
    target: Target, tmp_path: Path
) -> None:
    specs = tmp_path / "specs.yaml"
    specs.write_text(
        "kind: Stream\nname: R1\nsubjects: [r1]\n---\n"
        "kind: Consumer\nstream: R1\nname: C\nack_policy: explicit\nnum_replicas: 3\n---\n"
        "kind: KeyValue\nname: kv\nreplicas: 3\n"
    )
    options = target.options
    with pytest.raises(UnsupportedField) as refused:
        run(engine.apply([specs], options, lock_timeout=None))
    where = sorted(str(p.location) for p in refused.value.problems)
    assert where == [f"{specs}:13", f"{specs}:9"]
    assert "not clustered" in str(refused.value)
    assert "R1" not in run(engine.fetch_live(options)).streams  # nothing was created


def test_drift_under_a_replace_judges_the_live_consumers_on_their_own_fields(
    target: Target, tmp_path: Path
) -> None:
    options = target.options
    specs = tmp_path / "specs.yaml"
    base = (
        "kind: Stream\nname: S\nsubjects: [s.>]\n---\n"
        "kind: Consumer\nstream: S\nname: SAME\nack_policy: explicit\n---\n"
        "kind: Consumer\nstream: S\nname: MOVED\nack_policy: explicit\nmax_deliver: 5\n"
    )
    specs.write_text(base)
    run(engine.apply([specs], options, lock_timeout=None))
    # The stream now needs a replace; MOVED also drifted on its own field.
    specs.write_text(
        base.replace("subjects: [s.>]", "subjects: [s.>]\nstorage: memory").replace(
            "max_deliver: 5", "max_deliver: 9"
        )
    )
    report = from_plan(run(engine.plan([specs], options)))
    by_name = {r.name: r for r in report.resources}
    assert by_name["S"].status == "drifted" and by_name["S"].reasons
    assert by_name["SAME"].status == "in_sync"
    moved = by_name["MOVED"]
    assert moved.status == "drifted"
    assert [(f.path, f.declared, f.live) for f in moved.fields] == [("max_deliver", 9, 5)]
    assert report.summary.live == 3 and report.summary.counts["missing"] == 0


def test_drift_and_plan_call_an_adoption_the_same_thing(target: Target, tmp_path: Path) -> None:
    from reconciler.render.drift_text import render_drift_text

    options = target.options

    async def create() -> None:
        from reconciler.jetstream import open_client

        async with open_client(options) as client:
            await client.create_stream({"name": "THEIRS", "subjects": ["theirs.>"]})

    run(create())
    specs = tmp_path / "specs.yaml"
    specs.write_text("kind: Stream\nname: THEIRS\nsubjects: ['theirs.>']\n")
    plan = run(engine.plan([specs], options))
    (step,) = plan.changes
    assert step.action == "update" and step.reasons == ("adopt: add the managed-by marker",)
    text = render_drift_text(from_plan(plan))
    assert "cannot be updated in place" not in text


def _mqtt_connect(port: int) -> None:
    """One MQTT 3.1.1 CONNECT (clean session): the server makes its $MQTT_ streams."""
    import socket

    client = b"fidelity"
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(client).to_bytes(2, "big") + client
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(bytes([0x10, len(body)]) + body)
        assert conn.recv(4) == b"\x20\x02\x00\x00", "CONNACK accepted"


@pytest.mark.parametrize("version", MATRIX, ids=lambda v: v or "newest")
def test_mqtt_streams_are_the_servers_never_listed_exported_or_pruned(
    server_factory: Any, tmp_path: Path, version: str | None
) -> None:
    from servers import unused_port

    mqtt = unused_port()
    server: NatsServer = server_factory(
        version=version, config={"mqtt": {"host": "127.0.0.1", "port": mqtt}}
    )
    _mqtt_connect(mqtt)
    options = ConnectionOptions(servers=server.url)
    live = run(engine.fetch_live(options))
    assert any(name.startswith("$MQTT_") for name in live.streams)
    specs = tmp_path / "specs.yaml"
    specs.write_text("kind: Stream\nname: MINE\nsubjects: [mine]\n")
    plan = run(engine.plan([specs], options, prune=True))
    listed = [e.name for e in plan.entries if e.name.startswith("$MQTT_")]
    assert listed == []
    assert not from_plan(plan).with_status("unmanaged")
    assert [f.name for f in export_state(live)] == []
    run(engine.apply([specs], options, prune=True, allow_data_loss=True, lock_timeout=None))
    after = run(engine.fetch_live(options))
    assert {n for n in live.streams if n.startswith("$MQTT_")} <= set(after.streams)


def test_odd_but_accepted_configs_warn_and_converge(target: Target, tmp_path: Path) -> None:
    """ack_wait next to backoff (the server stores backoff[0]) and an identical duplicate
    key (as in nats.docs' own examples): warnings, applied, and the re-plan is empty."""
    options = target.options
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "stream.json").write_text(
        '{\n"kind": "Stream",\n"name": "ODD",\n"subjects": ["odd.>"],\n"subjects": ["odd.>"]\n}'
    )
    (folder / "consumer.yaml").write_text(
        "kind: Consumer\nstream: ODD\nname: C\nack_policy: explicit\n"
        "ack_wait: 30s\nbackoff: [1s, 5s]\nmax_deliver: 3\n"
    )
    said = Said()
    run(engine.apply([folder], options, lock_timeout=None, observer=said))
    warnings = [line for line in said.lines if "warning:" in line]
    assert len(warnings) == 2, said.lines
    assert not run(engine.plan([folder], options)).has_changes
    live = run(engine.fetch_live(options)).consumers[("ODD", "C")]
    assert live["ack_wait"] == 1_000_000_000  # backoff[0], as the warning said
    from reconciler.errors import SpecError

    with pytest.raises(SpecError):
        run(engine.plan([folder], options, strict=True))


def test_mirror_direct_follows_the_origins_direct_get_or_is_refused(
    target: Target, tmp_path: Path
) -> None:
    from reconciler.errors import SpecError
    from reconciler.jetstream import open_client

    options = target.options
    mirror = "kind: Stream\nname: COPY\nmirror: {name: ORIGIN}\nmirror_direct: true\n"
    # Origin declared with direct get: applies and converges.
    good = tmp_path / "good.yaml"
    good.write_text(
        "kind: Stream\nname: ORIGIN\nsubjects: [o.>]\nallow_direct: true\n---\n" + mirror
    )
    run(engine.apply([good], options, lock_timeout=None))
    assert not run(engine.plan([good], options)).has_changes
    # Origin declared without it: refused at validation, at the mirror_direct line.
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Stream\nname: ORIGIN\nsubjects: [o.>]\n---\n" + mirror)
    with pytest.raises(SpecError) as refused:
        run(engine.plan([bad], options))
    assert [str(p.location) for p in refused.value.problems] == [f"{bad}:8"]

    # Origin not declared, live without direct get: refused when planning.
    async def origin() -> None:
        async with open_client(options) as client:
            await client.create_stream({"name": "PLAIN", "subjects": ["p.>"]})

    run(origin())
    alone = tmp_path / "alone.yaml"
    alone.write_text(mirror.replace("ORIGIN", "PLAIN").replace("COPY", "COPY2"))
    with pytest.raises(SpecError, match="allow_direct false"):
        run(engine.apply([alone], options, lock_timeout=None))
    assert "COPY2" not in run(engine.fetch_live(options)).streams


def test_plans_and_drift_show_durations_and_sizes_in_the_unit_the_spec_wrote(
    target: Target, tmp_path: Path
) -> None:
    from reconciler.render import render_plan
    from reconciler.render.drift_text import render_drift_text

    options = target.options
    specs = tmp_path / "specs.yaml"
    specs.write_text(
        "kind: Stream\nname: U\nsubjects: [u]\nmax_age: 21d\nmax_bytes: 2048KiB\n---\n"
        "kind: KeyValue\nname: cfg\nttl: 14d\n"
    )
    run(engine.apply([specs], options, lock_timeout=None))
    specs.write_text(specs.read_text().replace("21d", "30d").replace("14d", "28d"))
    plan = run(engine.plan([specs], options))
    text = render_plan(plan, "text")
    assert "max_age: 21d → 30d" in text  # not 3w → 30d
    assert "max_age (ttl): 14d → 28d" in text  # not 2w → 4w
    markdown = render_plan(plan, "markdown")
    assert "- max_age: 21d\n+ max_age: 30d\n" in markdown
    drift = render_drift_text(from_plan(plan))
    assert "max_age: declared 30d, live 21d" in drift


def test_an_account_backup_says_how_many_consumers_it_did_not_read(
    target: Target, tmp_path: Path
) -> None:
    """``nats account backup DIR`` writes DIR/<stream>/backup.json (a StreamInfo) and keeps
    the consumers inside DIR/<stream>/stream.tar.s2: the stream is read, and the consumers
    that were not are named in a warning instead of vanishing silently."""
    from reconciler.jetstream import open_client

    options = target.options

    async def info() -> dict[str, Any]:
        async with open_client(options) as client:
            await client.create_stream({"name": "BAK", "subjects": ["bak.>"]})
            for name in ("C1", "C2"):
                config = {"durable_name": name, "ack_policy": "explicit"}
                await client.create_consumer("BAK", config, action="create")
            return await client.stream_info("BAK")

    stream_info = run(info())
    stream_info.pop("type", None)
    folder = tmp_path / "backup" / "BAK"
    folder.mkdir(parents=True)
    (folder / "backup.json").write_text(json.dumps(stream_info))
    (folder / "stream.tar.s2").write_bytes(b"sNaPpY")  # the archive itself is not read
    said = Said()
    plan = run(engine.plan([tmp_path / "backup"], options, observer=said))
    assert [e.name for e in plan.entries if e.kind == "Stream"] == ["BAK"]
    warning = next(line for line in said.lines if "warning:" in line)
    assert "2 consumer(s) inside stream.tar.s2" in warning and "backup.json:1" in warning


def test_buckets_a_bucket_spec_cannot_express_export_as_streams_losslessly(
    target: Target, tmp_path: Path
) -> None:
    from reconciler.jetstream import open_client

    options = target.options
    nats_py_style = {  # nats-py leaves allow_direct off: a bucket field (allow_direct)
        "name": "KV_py",
        "subjects": ["$KV.py.>"],
        "max_msgs_per_subject": 5,
        "discard": "new",
        "deny_delete": True,
        "allow_rollup_hdrs": True,
        "allow_direct": False,
    }
    # a workqueue: no client makes one and no bucket spec can say it
    odd = {**nats_py_style, "name": "KV_odd", "subjects": ["$KV.odd.>"], "retention": "workqueue"}

    async def create() -> None:
        async with open_client(options) as client:
            for config in (nats_py_style, odd):
                await client.create_stream(config)

    run(create())
    files = export_state(run(engine.fetch_live(options)))
    kinds = {f.name: f.documents[0]["kind"] for f in files}
    assert kinds == {"stream-KV_odd.yaml": "Stream", "kv-py.yaml": "KeyValue"}
    folder = tmp_path / "export"
    folder.mkdir()
    for item in files:
        (folder / item.name).write_text(_dump(item.documents))
    plan = run(engine.plan([folder], options))
    assert [c.reasons for c in plan.changes] == [("adopt: add the managed-by marker",)] * 2
    assert all(c.action == "update" and not c.destructive for c in plan.changes)
    run(engine.apply([folder], options, lock_timeout=None))
    assert not run(engine.plan([folder], options)).has_changes
