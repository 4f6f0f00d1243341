"""``apply --format json`` prints JSON Lines: the plan, each step's outcome, the result;
``plan``/``apply`` take ``--full`` and fold a long plan's harmless steps without it.
Against a real nats-server, through the CLI as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import nats
from cli_runner import reconcile
from servers import NatsServer, run


def _specs(folder: Path, count: int) -> Path:
    folder.mkdir()
    docs = [
        f"kind: Stream\nname: S{i:03d}\nsubjects: [s{i:03d}.>]\nmax_bytes: 1MiB\n"
        for i in range(count)
    ]
    (folder / "streams.yaml").write_text("---\n".join(docs), encoding="utf-8")
    return folder


async def _published_and_counted(url: str, stream: str, subject: str, count: int) -> int:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for i in range(count):
            await js.publish(subject, f"m{i}".encode())
        info = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)
        return int(json.loads(info.data)["state"]["messages"])
    finally:
        await nc.close()


def test_apply_json_is_the_plan_then_each_step_then_the_result(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = _specs(tmp_path / "specs", 3)
    server = ("--server", clean_server.url)
    done = reconcile("apply", str(specs), *server, "-y", "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["type"] for r in records] == ["plan", "step", "step", "step", "result"]
    plan = records[0]["plan"]
    assert plan["summary"]["create"] == 3
    assert {r["name"] for r in records[1:4]} == {"S000", "S001", "S002"}
    assert all(r["outcome"] == "applied" and r["error"] is None for r in records[1:4])
    assert records[-1] == {
        "type": "result",
        "ok": True,
        "applied": 3,
        "failed": 0,
        "skipped": 0,
        "dry_run": False,
        "interrupted": False,
        "cancelled": False,
    }
    assert run(_published_and_counted(clean_server.url, "S001", "s001.x", 10)) == 10
    again = reconcile("apply", str(specs), *server, "-y", "--format", "json", cwd=tmp_path)
    lines = [json.loads(line) for line in again.stdout.splitlines()]
    assert [r["type"] for r in lines] == ["plan", "result"] and lines[-1]["applied"] == 0
    assert run(_published_and_counted(clean_server.url, "S001", "s001.x", 0)) == 10


def test_a_plan_over_50_steps_folds_them_and_full_shows_each(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = _specs(tmp_path / "specs", 60)
    server = ("--server", clean_server.url)
    folded = reconcile("plan", str(specs), *server, cwd=tmp_path)
    assert folded.returncode == 0, folded.stderr
    assert "+ 60 to create: Stream" in folded.stdout
    assert "+ create Stream S000" not in folded.stdout
    full = reconcile("plan", str(specs), *server, "--full", cwd=tmp_path)
    assert full.stdout.count("+ create Stream S") == 60
    assert "    max_bytes: 1MiB (1048576)" in full.stdout
    markdown = reconcile("plan", str(specs), *server, "--format", "markdown", cwd=tmp_path)
    assert "| Stream | 60 | 0 | 0 | 0 |" in markdown.stdout and "<details>" in markdown.stdout
    dry = reconcile("apply", str(specs), *server, "--dry-run", "--full", cwd=tmp_path)
    assert dry.stdout.count("+ create Stream S") == 60


def test_a_failed_step_is_a_step_line_then_a_result_line(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The server refuses a consumer (its deliver_subject is one of the stream's own
    subjects: a cycle, err 10081, which no check foresees): the step line says failed with
    the server's words, the result says not ok, the exit status is 1 and the error is on
    standard error."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "s.yaml").write_text(
        "kind: Stream\nname: LIMITED\nsubjects: [limited.>]\n---\n"
        "kind: Consumer\nstream: LIMITED\nname: mine\nack_policy: explicit\n"
        "deliver_subject: limited.push\n",
        encoding="utf-8",
    )
    server = ("--server", clean_server.url)
    done = reconcile("apply", str(specs), *server, "-y", "--format", "json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["type"] for r in records] == ["plan", "step", "step", "result"]
    created, failed = records[1], records[2]
    assert (created["name"], created["outcome"]) == ("LIMITED", "applied")
    assert (failed["name"], failed["outcome"]) == ("mine", "failed")
    assert "cycle" in failed["error"]
    assert records[3]["ok"] is False
    assert (records[3]["applied"], records[3]["failed"]) == (1, 1)
    assert "create Consumer LIMITED/mine failed" in done.stderr
