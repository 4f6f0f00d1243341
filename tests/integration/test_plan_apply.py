"""Plan and apply against a real nats-server (in-process, through reconciler.execution.run)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from example_folders import spec_folders
from servers import NatsServer, options, run, write

from reconciler.errors import ApplyFailed, RefusedPlan, ServerError, SpecError
from reconciler.execution import run as engine
from reconciler.execution.apply import apply_plan
from reconciler.execution.requests import Quiet
from reconciler.identity import INTERNAL_STREAMS
from reconciler.jetstream import open_client
from reconciler.planning.steps import Plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def plan(paths: list[Path], server: NatsServer, **kw: Any) -> Plan:
    return run(engine.plan(paths, options(server), **kw))


def apply(paths: list[Path], server: NatsServer, **kw: Any) -> engine.ApplyResult:
    return run(engine.apply(paths, options(server), **kw))


async def _raw(server: NatsServer, op: Callable[[Any], Any]) -> Any:
    async with open_client(options(server)) as client:
        return await op(client)


def raw(server: NatsServer, op: Callable[[Any], Any]) -> Any:
    return run(_raw(server, op))


def publish(server: NatsServer, subject: str, count: int) -> None:
    async def go(client: Any) -> None:
        for i in range(count):
            await client.publish(subject, f"m{i}".encode())

    raw(server, go)


def stream_names(server: NatsServer) -> list[str]:
    """Every stream but the tool's own apply-lock bucket."""
    names = raw(server, lambda c: c.stream_names())
    return sorted(n for n in names if n not in INTERNAL_STREAMS)


def messages(server: NatsServer, stream: str) -> int:
    async def go(client: Any) -> int:
        info = await client.stream_info(stream)
        return int(info["state"]["messages"])

    return int(raw(server, go))


STREAM = """
kind: Stream
name: ORDERS
subjects: ["ORDERS.*"]
max_age: 1h
{extra}
---
kind: Consumer
stream: ORDERS
name: NEW
ack_policy: explicit
filter_subject: ORDERS.new
{consumer_extra}
"""


def orders(tmp_path: Path, extra: str = "", consumer_extra: str = "") -> Path:
    return write(tmp_path, STREAM.format(extra=extra, consumer_extra=consumer_extra))


@pytest.mark.parametrize("example", spec_folders())  # the others: test_example_folders.py
def test_every_example_applies_then_plans_empty(example: str, clean_server: NatsServer) -> None:
    folder = EXAMPLES / example
    if (folder / "reconcile.yaml").exists():  # a project: its shared specs
        folder = folder / "specs"
    first = plan([folder], clean_server)
    assert first.has_changes
    assert all(step.action == "create" for step in first.steps)
    apply([folder], clean_server)
    again = plan([folder], clean_server)
    assert not again.has_changes, again.to_json()
    assert again.summary["unchanged"] == first.summary["create"]


def test_in_place_update_keeps_messages(tmp_path: Path, clean_server: NatsServer) -> None:
    apply([orders(tmp_path)], clean_server)
    publish(clean_server, "ORDERS.new", 25)
    changed = orders(tmp_path, extra="max_msgs: 1000\ndescription: orders")
    the_plan = plan([changed], clean_server)
    assert [s.action for s in the_plan.steps] == ["update"]
    paths = {f.path for f in the_plan.steps[0].fields}
    assert paths == {"max_msgs", "description"}
    apply([changed], clean_server)
    assert messages(clean_server, "ORDERS") == 25
    assert not plan([changed], clean_server).has_changes


IMMUTABLE_STREAM = [
    ("storage: memory", "storage"),
    ("retention: workqueue", "retention"),
]


@pytest.mark.parametrize(("extra", "field"), IMMUTABLE_STREAM)
def test_immutable_stream_change_is_a_refused_replace(
    tmp_path: Path, clean_server: NatsServer, extra: str, field: str
) -> None:
    apply([orders(tmp_path)], clean_server)
    publish(clean_server, "ORDERS.new", 5)
    changed = orders(tmp_path, extra=extra)
    the_plan = plan([changed], clean_server)
    replace = [s for s in the_plan.steps if s.kind == "Stream"]
    assert replace and replace[0].action == "replace"
    assert any(field in reason for reason in replace[0].reasons)
    with pytest.raises(RefusedPlan):
        apply([changed], clean_server)
    assert messages(clean_server, "ORDERS") == 5  # nothing changed
    apply([changed], clean_server, allow_replace=True)
    assert not plan([changed], clean_server).has_changes


def test_sealed_stream_cannot_be_unsealed_without_replace(
    tmp_path: Path, clean_server: NatsServer
) -> None:
    apply([orders(tmp_path, extra="deny_delete: true")], clean_server)
    relaxed = orders(tmp_path, extra="deny_delete: false")
    the_plan = plan([relaxed], clean_server)
    assert the_plan.steps[0].action == "replace"


@pytest.mark.parametrize(
    "consumer_extra",
    ["deliver_policy: new", "replay_policy: original", "deliver_subject: monitor.orders"],
)
def test_immutable_consumer_change_is_a_refused_replace(
    tmp_path: Path, clean_server: NatsServer, consumer_extra: str
) -> None:
    apply([orders(tmp_path)], clean_server)
    changed = orders(tmp_path, consumer_extra=consumer_extra)
    the_plan = plan([changed], clean_server)
    assert [(s.kind, s.action) for s in the_plan.steps] == [("Consumer", "replace")]
    with pytest.raises(RefusedPlan):
        apply([changed], clean_server)
    apply([changed], clean_server, allow_replace=True)
    assert not plan([changed], clean_server).has_changes


def test_refused_plan_changes_nothing_at_all(tmp_path: Path, clean_server: NatsServer) -> None:
    apply([orders(tmp_path)], clean_server)
    mixed = orders(tmp_path, extra="storage: memory\ndescription: changed too")
    other = write(tmp_path, "kind: Stream\nname: OTHER\nsubjects: [other.>]\n", "other.yaml")
    with pytest.raises(RefusedPlan):
        apply([mixed, other], clean_server)
    assert stream_names(clean_server) == ["ORDERS"]


def test_prune_deletes_only_managed_resources(tmp_path: Path, clean_server: NatsServer) -> None:
    both = write(
        tmp_path,
        """
        kind: Stream
        name: KEEP
        subjects: [keep.>]
        ---
        kind: Stream
        name: GONE
        subjects: [gone.>]
        """,
    )
    apply([both], clean_server)
    raw(clean_server, lambda c: c.create_stream({"name": "HANDMADE", "subjects": ["hand.>"]}))
    keep = write(tmp_path, "kind: Stream\nname: KEEP\nsubjects: [keep.>]\n", "keep.yaml")
    without_prune = plan([keep], clean_server)
    assert not without_prune.has_changes
    assert [u.name for u in without_prune.unmanaged] == ["HANDMADE"]
    pruning = plan([keep], clean_server, prune=True)
    assert [(s.action, s.name) for s in pruning.steps] == [("delete", "GONE")]
    with pytest.raises(RefusedPlan):
        apply([keep], clean_server, prune=True)
    apply([keep], clean_server, prune=True, allow_replace=True)
    assert stream_names(clean_server) == ["HANDMADE", "KEEP"]


def test_declaring_an_unmanaged_stream_adopts_it(tmp_path: Path, clean_server: NatsServer) -> None:
    raw(clean_server, lambda c: c.create_stream({"name": "ORDERS", "subjects": ["ORDERS.*"]}))
    spec = write(tmp_path, "kind: Stream\nname: ORDERS\nsubjects: ['ORDERS.*']\n")
    the_plan = plan([spec], clean_server)
    assert [s.action for s in the_plan.steps] == ["update"]
    assert any(f.path.startswith("metadata") for f in the_plan.steps[0].fields)
    apply([spec], clean_server)
    assert not plan([spec], clean_server).has_changes


def test_out_of_band_change_shows_in_the_plan(tmp_path: Path, clean_server: NatsServer) -> None:
    spec = orders(tmp_path)
    apply([spec], clean_server)

    async def tamper(client: Any) -> None:
        info = await client.stream_info("ORDERS")
        config = dict(info["config"])
        config["max_msgs"] = 10
        await client.update_stream(config)

    raw(clean_server, tamper)
    the_plan = plan([spec], clean_server)
    assert [(f.path, f.before, f.after) for f in the_plan.steps[0].fields] == [("max_msgs", 10, -1)]


def test_failed_step_reports_applied_and_skipped_then_converges(
    tmp_path: Path, clean_server: NatsServer
) -> None:
    # A hand-made stream grabs the subjects the spec wants once the plan is made (a plan
    # made after would name it): the server refuses the create.
    spec = write(
        tmp_path,
        STREAM.format(extra="", consumer_extra="")
        + "---\nkind: Stream\nname: FREE\nsubjects: [free.>]\n",
    )
    the_plan = plan([spec], clean_server)
    raw(clean_server, lambda c: c.create_stream({"name": "SQUAT", "subjects": ["ORDERS.*"]}))
    with pytest.raises(ApplyFailed) as failure:
        raw(clean_server, lambda c: apply_plan(the_plan, c))
    report = failure.value.report
    assert any("FREE" in s for s in report.applied)
    assert any("ORDERS" in s for s in report.failed)
    assert any("NEW" in s for s in report.skipped)
    raw(clean_server, lambda c: c.delete_stream("SQUAT"))
    apply([spec], clean_server)
    assert not plan([spec], clean_server).has_changes


def test_pause_until_goes_through_consumer_pause(tmp_path: Path, clean_server: NatsServer) -> None:
    apply([orders(tmp_path)], clean_server)
    paused = orders(tmp_path, consumer_extra="pause_until: '2099-01-01T00:00:00Z'")
    the_plan = plan([paused], clean_server)
    assert [s.action for s in the_plan.steps] == ["update"]
    apply([paused], clean_server)
    assert not plan([paused], clean_server).has_changes


def test_many_streams_past_the_page_size_plan_empty(
    tmp_path: Path, clean_server: NatsServer
) -> None:
    docs = []
    for i in range(600):
        docs.append(f"kind: Stream\nname: S{i:04d}\nsubjects: [s{i}.>]\nstorage: memory\n")
        for c in ("A", "B"):
            docs.append(f"kind: Consumer\nstream: S{i:04d}\nname: {c}\nack_policy: explicit\n")
    spec = write(tmp_path, "---\n".join(docs))
    apply([spec], clean_server, concurrency=64)
    again = plan([spec], clean_server)
    assert not again.has_changes
    assert again.summary["unchanged"] == 1800


def test_export_round_trips(tmp_path: Path, clean_server: NatsServer) -> None:
    for example in ("shop", "buckets"):
        apply([EXAMPLES / example], clean_server)
    out = tmp_path / "exported"
    from reconciler.cli.export_cmd import _dump
    from reconciler.planning.export import export_state

    live = run(engine.fetch_live(options(clean_server)))
    out.mkdir()
    for exported in export_state(live):
        (out / exported.name).write_text(_dump(exported.documents), encoding="utf-8")
    the_plan = plan([out], clean_server)
    assert not the_plan.has_changes, the_plan.to_json()
    assert not the_plan.unmanaged


def test_server_refusal_is_a_server_error_not_a_crash(
    tmp_path: Path, clean_server: NatsServer
) -> None:
    # Another stream (not declared) already listens on the subject: the plan finds it
    # first (planning/live_checks.py), naming it; the server would refuse (err 10065).
    raw(clean_server, lambda c: c.create_stream({"name": "OTHER", "subjects": ["big"]}))
    spec = write(tmp_path, "kind: Stream\nname: BIG\nsubjects: [big]\n")
    with pytest.raises(SpecError) as failure:
        apply([spec], clean_server)
    assert "'big' overlaps 'big' of stream 'OTHER'" in str(failure.value)


def test_replicas_error_is_mapped(clean_server: NatsServer) -> None:
    with pytest.raises(ServerError) as err:
        raw(clean_server, lambda c: c.create_stream({"name": "R3", "num_replicas": 3}))
    assert err.value.err_code == 10074


def test_concurrent_event_stop_skips_the_rest(tmp_path: Path, clean_server: NatsServer) -> None:
    docs = [
        f"kind: Stream\nname: T{i}\nsubjects: [t{i}]\n---\n"
        f"kind: Consumer\nstream: T{i}\nname: C\nack_policy: explicit\n"
        for i in range(5)
    ]
    spec = write(tmp_path, "---\n".join(docs))
    stop = asyncio.Event()

    class StopAfterPlanning(Quiet):
        def show_plan(self, plan: Plan) -> None:
            stop.set()  # as Ctrl-C right after planning

    result = run(
        engine.apply([spec], options(clean_server), observer=StopAfterPlanning(), stop=stop)
    )
    assert result.interrupted
    assert not result.applied
    assert len(result.skipped) == 10
    apply([spec], clean_server)
    assert not plan([spec], clean_server).has_changes


def test_a_cancelled_apply_finishes_and_reports_the_steps_in_flight_and_starts_no_more(
    tmp_path: Path, clean_server: NatsServer
) -> None:
    """Cancelling the task that applies (not Ctrl-C's stop event: a caller's timeout, a
    task group) lets the requests in flight finish, reports each of them, and nothing
    starts after: what the server holds is exactly what was reported applied."""
    consumers = [f"kind: Consumer\nstream: CANCEL\nname: C{i:03d}\n" for i in range(300)]
    spec = write(tmp_path, "---\n".join(["kind: Stream\nname: CANCEL\n", *consumers]))
    applied: list[str] = []

    async def go() -> tuple[int, int]:
        task = asyncio.current_task()
        assert task is not None

        class CancelAfter50(Quiet):
            def step(self, event: Any) -> None:
                if event.outcome == "applied":
                    applied.append(event.step.name)
                    if len(applied) == 50:
                        task.cancel()

        with pytest.raises(asyncio.CancelledError):
            await engine.apply(
                [spec], options(clean_server), concurrency=16, observer=CancelAfter50()
            )
        task.uncancel()
        async with open_client(options(clean_server)) as client:
            right_after = len(await client.consumer_names("CANCEL"))
            await asyncio.sleep(0.5)
            return right_after, len(await client.consumer_names("CANCEL"))

    right_after, later = run(go())
    assert right_after == later  # nothing went on behind the caller's back
    assert later == len(applied) - 1  # every consumer created was reported (and the stream)
    assert 50 <= len(applied) < 300


def test_the_spec_cache_gives_the_same_plan_and_never_hides_an_edit(
    tmp_path: Path, clean_server: NatsServer
) -> None:
    """RECONCILE_SPEC_CACHE=DIR, as a CI job would keep it between runs."""
    import json
    import os
    import subprocess
    import sys

    spec = orders(tmp_path)
    cache = tmp_path / "cache"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}
    environ["RECONCILE_SPEC_CACHE"] = str(cache)

    def plan_cli() -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "reconciler", "plan", str(spec), "--format", "json"]
        return subprocess.run(
            [*argv, "--server", clean_server.url],
            env=environ,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    first, second = plan_cli(), plan_cli()
    assert first.returncode == second.returncode == 0, first.stderr
    assert json.loads(first.stdout) == json.loads(second.stdout)
    assert len(list(cache.glob("specs-*.json"))) == 1
    spec.write_text(spec.read_text().replace("max_age: 1h", "max_age: 7 parsecs"))
    edited = plan_cli()
    assert edited.returncode == 1 and "max_age" in edited.stderr


def test_the_plan_memo_never_hides_a_change_made_on_the_server(
    tmp_path: Path, clean_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With RECONCILE_SPEC_CACHE set, a re-plan answers unchanged resources from what the
    last plan found; a consumer edited behind the tool's back, or a spec edited in git,
    is planned from scratch, and the cache holds digests only (no names, no configs)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("RECONCILE_SPEC_CACHE", str(cache))
    specs = orders(tmp_path)
    apply([specs], clean_server)
    publish(clean_server, "ORDERS.new", 10)
    assert not plan([specs], clean_server).has_changes
    [memo] = cache.glob("plans-*.bin")
    data = memo.read_bytes()
    assert len(data) == 20 * 2 and b"ORDERS" not in data  # the stream and its consumer
    assert not plan([specs], clean_server).has_changes

    async def edit(client: Any) -> None:
        [config] = [c["config"] for c in await client.list_consumers("ORDERS")]
        await client.create_consumer("ORDERS", {**config, "max_deliver": 7}, action="update")

    raw(clean_server, edit)
    drifted = plan([specs], clean_server)
    assert [(s.action, [f.path for f in s.fields]) for s in drifted.steps] == [
        ("update", ["max_deliver"])
    ]
    apply([specs], clean_server)
    assert not plan([specs], clean_server).has_changes
    changed = orders(tmp_path, extra="description: orders")
    assert [s.action for s in plan([changed], clean_server).steps] == ["update"]
    assert messages(clean_server, "ORDERS") == 10


def test_a_field_the_server_lacks_stops_the_plan_and_the_read_it_started(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The live state is read while the plan checks the specs against the server: a
    field the server does not know still stops the plan with its FILE:LINE, and the
    read stops with it (no task left running, nothing created)."""
    from reconciler.errors import UnsupportedField

    server = server_factory(version="2.10.26")
    spec = write(tmp_path, "kind: Stream\nname: TTL\nsubjects: [t]\nallow_msg_ttl: true\n")

    async def go() -> list[asyncio.Task[Any]]:
        with pytest.raises(UnsupportedField, match=rf"{spec}:4: allow_msg_ttl: needs"):
            await engine.plan([spec], options(server))
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    assert run(go()) == []
    assert raw(server, lambda c: c.stream_names()) == []


def test_a_plan_process_parsing_ahead_plans_and_refuses_as_one_parsing_alone(
    tmp_path: Path, clean_server: NatsServer
) -> None:
    """``reconcile plan`` parses its spec files in a forked child (reconciler.specs.ahead):
    the plan it prints, and the error of a broken file, are those of a process parsing
    every file itself (RECONCILE_PARSE_AHEAD=0), and so are an apply's; the apply then
    heals the drift, every message kept."""
    import json
    import os
    import subprocess
    import sys

    specs = tmp_path / "specs"
    (specs / "more").mkdir(parents=True)
    for index in range(40):
        folder = specs / "more" if index % 2 else specs
        text = f"kind: Stream\nname: S{index}\nsubjects: [s{index}.>]\nmax_age: 1h\n" + "".join(
            f"---\nkind: Consumer\nstream: S{index}\nname: C{c}\n"
            f"filter_subject: s{index}.c{c}\nack_policy: explicit\n"
            for c in range(3)
        )
        (folder / f"s{index:02}.yaml").write_text(text)
    (specs / "anchored.yaml").write_text(
        "kind: Stream\nname: A\nsubjects: &s [a.>]\n---\nkind: Consumer\nstream: A\nname: W\n"
    )
    (specs / "j.json").write_text('{"kind": "Stream", "name": "J", "subjects": ["j.>"]}')
    apply([specs], clean_server)
    publish(clean_server, "s3.c1", 5)

    async def drift(client: Any) -> None:
        [config] = [c["config"] for c in await client.list_consumers("S7") if c["name"] == "C2"]
        await client.create_consumer("S7", {**config, "max_deliver": 9}, action="update")

    raw(clean_server, drift)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}

    def plan_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "reconciler", *(args or ("plan",)), str(specs)]
        return subprocess.run(
            [*argv, "--format", "json", "--server", clean_server.url],
            env={**environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    ahead, alone = plan_cli(), plan_cli(RECONCILE_PARSE_AHEAD="0")
    assert ahead.returncode == alone.returncode == 0, ahead.stderr
    planned = json.loads(ahead.stdout)
    assert planned == json.loads(alone.stdout)
    assert [(s["action"], s["name"]) for s in planned["changes"]] == [("update", "C2")]
    broken = specs / "more" / "s13.yaml"
    broken.write_text(broken.read_text().replace("max_age: 1h", "max_age: 1 fortnight"))
    ahead, alone = plan_cli(), plan_cli(RECONCILE_PARSE_AHEAD="0")
    assert ahead.returncode == alone.returncode == 1
    assert ahead.stderr == alone.stderr and f"{broken}:4: max_age" in ahead.stderr
    ahead, alone = plan_cli("apply", "--yes"), plan_cli("apply", "--yes", RECONCILE_PARSE_AHEAD="0")
    assert ahead.returncode == alone.returncode == 1 and ahead.stderr == alone.stderr
    broken.write_text(broken.read_text().replace("1 fortnight", "1h"))
    healed = plan_cli("apply", "--yes")
    assert healed.returncode == 0, healed.stderr
    lines = [json.loads(line) for line in healed.stdout.splitlines()]
    assert [(d["action"], d["name"], d["outcome"]) for d in lines if d["type"] == "step"] == [
        ("update", "C2", "applied")
    ]
    assert json.loads(plan_cli().stdout)["changes"] == []
    assert messages(clean_server, "S3") == 5
