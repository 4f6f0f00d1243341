"""A real account at scale: 1,000 streams with 20 consumers each (21,000 resources), not timed.

Apply from nothing, an empty re-plan, export, an empty plan of the export (with prune:
it deletes nothing), and a clean drift report, all through the CLI on one real server.
The figures of speed live in bench/bench_plan_apply.py; this proves that the paths
stay correct at the size real accounts have.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import cli_env, plan_json, reconcile
from servers import NatsServer, run

from reconciler.jetstream import ConnectionOptions, open_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STREAMS, CONSUMERS = 1_000, 20


def write_specs(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for i in range(STREAMS):
        docs = [f"kind: Stream\nname: S{i:04d}\nsubjects: [s{i}.>]\nstorage: memory\nmax_age: 1d\n"]
        docs += [
            f"kind: Consumer\nstream: S{i:04d}\nname: C{c:02d}\nack_policy: explicit\n"
            f"filter_subject: s{i}.{c}\n"
            for c in range(CONSUMERS)
        ]
        (folder / f"s{i:04d}.yaml").write_text("---\n".join(docs))
    return folder


def test_21k_resources_apply_re_plan_export_and_drift_clean(
    clean_server: NatsServer, tmp_path: Path, figures
) -> None:
    specs = write_specs(tmp_path / "specs")
    url = clean_server.url
    done = reconcile("apply", str(specs), "--server", url, "-y", "--concurrency", "64")
    assert done.returncode == 0, done.stderr[-2000:]

    again = plan_json([specs], url)
    assert again["summary"]["unchanged"] == STREAMS * (1 + CONSUMERS)
    assert not again["changes"]

    # The cache folder at scale: the second cached plan answers from the plan memo, and
    # still sees exactly what was changed on the server and in the files in between.
    cached = cli_env(RECONCILE_SPEC_CACHE=str(tmp_path / "cache"))
    for _ in range(2):
        assert plan_json([specs], url, env=cached)["changes"] == []
    run(_edit_consumer(url, "S0500", "C07", max_deliver=9))
    (specs / "s0042.yaml").write_text(
        (specs / "s0042.yaml").read_text().replace("max_age: 1d", "max_age: 2d")
    )
    changed = plan_json([specs], url, env=cached)["changes"]
    assert sorted((c["action"], c["name"], [f["path"] for f in c["fields"]]) for c in changed) == [
        ("update", "C07", ["max_deliver"]),
        ("update", "S0042", ["max_age"]),
    ]
    done = reconcile("apply", str(specs), "--server", url, "-y", env=cached)
    assert done.returncode == 0, done.stderr[-2000:]
    assert plan_json([specs], url, env=cached)["changes"] == []

    out = tmp_path / "exported"
    exported = reconcile("export", "--server", url, "--out", str(out))
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert len(list(out.glob("stream-*.yaml"))) == STREAMS
    replan = reconcile("plan", str(out), "--server", url, "--prune", "--format", "json")
    assert replan.returncode == 0, replan.stderr[-2000:]
    assert json.loads(replan.stdout)["changes"] == []

    drift = reconcile("drift", str(specs), "--server", url, "--format", "json")
    assert drift.returncode == 0, drift.stdout[-2000:]
    summary = json.loads(drift.stdout)["summary"]
    assert summary["in_sync"] == STREAMS * (1 + CONSUMERS) and summary["drift"] == 0
    figures.add("scale_resources_checked", STREAMS * (1 + CONSUMERS))


async def _edit_consumer(url: str, stream: str, name: str, **fields: object) -> None:
    """Change a consumer on the server, behind the tool's back."""
    async with open_client(ConnectionOptions(servers=url)) as client:
        config = (await client.consumer_info(stream, name))["config"]
        await client.create_consumer(stream, {**config, **fields}, action="update")
