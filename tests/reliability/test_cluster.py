"""A 3-node cluster on loopback with R3 streams: one node down, and leader changes mid-apply."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
from harness import (
    consumer_doc,
    pending,
    plan_json,
    reconcile,
    run_client,
    start_reconcile,
    stream_doc,
    stream_infos,
    write_specs,
)
from servers import delete_all_streams, run

from reconciler.errors import ReconcileError

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def nodes(cluster):
    cluster.wait_for_meta_leader()
    yield cluster
    for node in cluster.nodes:
        if not node.running:
            node.start(wait=False)
    for node in cluster.nodes:
        node.wait_ready(jetstream=False)
    cluster.wait_for_meta_leader()
    run(delete_all_streams(cluster.url))


def _documents(count: int, **fields) -> list[dict]:
    documents: list[dict] = []
    for i in range(count):
        name = f"R3S{i:02d}"
        documents.append(stream_doc(name, num_replicas=3, **fields))
        documents.append(consumer_doc(name, "WORKER", max_deliver=5))
    return documents


def _converged(paths: list[Path], urls: str) -> bool:
    return pending(plan_json(paths, urls)) == []


def test_apply_and_replan_work_with_one_node_down(nodes, tmp_path: Path, figures) -> None:
    specs = write_specs(tmp_path / "s", _documents(4))
    assert reconcile("apply", "-y", str(specs), "--server", nodes.urls).returncode == 0
    down = nodes.nodes[0]  # the first URL: the client has to move on to the next one

    down.stop()
    try:
        assert _converged([specs], nodes.urls)
        changed = write_specs(tmp_path / "s2", _documents(5, max_msgs=500))
        done = reconcile("apply", "-y", str(changed), "--server", nodes.urls)
        assert done.returncode == 0, done.stderr
        assert _converged([changed], nodes.urls)
        infos = stream_infos(nodes.urls)
        assert all(infos[f"R3S{i:02d}"]["config"]["max_msgs"] == 500 for i in range(5))
        assert all(infos[f"R3S{i:02d}"]["config"]["num_replicas"] == 3 for i in range(5))
    finally:
        down.start(wait=False)
    figures.add("faults_survived")
    figures.add("cluster_node_outages")


def test_leader_changes_mid_apply_then_apply_converges(nodes, tmp_path: Path, figures) -> None:
    specs = write_specs(tmp_path / "s", _documents(30))
    apply = start_reconcile("apply", "-y", str(specs), "--server", nodes.urls, "--concurrency", "1")
    stepped = _step_down_streams_while_running(nodes.urls, apply)
    _, err = apply.communicate(timeout=180)

    assert apply.returncode in (0, 1), err
    assert "Traceback" not in err
    assert stepped > 0, f"leaders changed while the apply ran: {err}"
    for _ in range(3):  # a re-run converges (a step cut by an election may need one more)
        again = reconcile("apply", "-y", str(specs), "--server", nodes.urls, "--lock-timeout", "60")
        if again.returncode == 0:
            break
    assert again.returncode == 0, again.stderr
    assert _converged([specs], nodes.urls)
    figures.add("faults_survived")
    figures.add("leader_changes", stepped)


def _step_down_streams_while_running(urls: str, apply) -> int:
    """Ask the leader of every stream created so far to step down, until the apply ends."""

    async def work(client) -> int:
        stepped: set[str] = set()
        deadline = time.monotonic() + 120
        while apply.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(ReconcileError):  # a stream still forming: next round
                for name in await client.stream_names():
                    if name.startswith("R3S") and name not in stepped:
                        await client.request(f"STREAM.LEADER.STEPDOWN.{name}", timeout=0.5)
                        stepped.add(name)
            await asyncio.sleep(0.05)
        return len(stepped)

    stepped: int = run_client(urls, work)
    return stepped


def test_more_replicas_than_the_cluster_has_are_refused_before_any_change(
    nodes, tmp_path: Path
) -> None:
    """R5 on three servers is refused with both numbers; nothing is created, not even
    the R3 stream declared next to it; the same R3 stream alone applies."""
    documents = [
        stream_doc("FITS", num_replicas=3),
        consumer_doc("FITS", "C", num_replicas=3),
        stream_doc("TOOBIG", num_replicas=5),
    ]
    specs = write_specs(tmp_path / "s", documents)
    refused = reconcile("apply", "-y", str(specs), "--server", nodes.urls)
    assert refused.returncode != 0
    assert "5 replicas, but the cluster has 3 servers" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert {"FITS", "TOOBIG"}.isdisjoint(stream_infos(nodes.urls))  # the lock bucket only

    fits = write_specs(tmp_path / "fits", documents[:2])
    done = reconcile("apply", "-y", str(fits), "--server", nodes.urls)
    assert done.returncode == 0, done.stderr
    assert stream_infos(nodes.urls)["FITS"]["config"]["num_replicas"] == 3


def test_an_overlay_gives_one_environment_three_replicas(nodes, tmp_path: Path) -> None:
    """The same specs: R1 on the embedded dev server, R3 on the cluster through an overlay;
    each environment re-plans empty."""
    repo = tmp_path / "repo"
    (repo / "specs").mkdir(parents=True)
    (repo / "overlays").mkdir()
    (repo / "reconcile.yaml").write_text(
        "specs: [specs]\nenvironments:\n"
        "  dev: {embedded: true}\n"
        f"  prod: {{servers: '{nodes.urls}', overlays: [overlays/prod.yaml]}}\n"
    )
    (repo / "specs" / "s.yaml").write_text(
        "kind: Stream\nname: ENV_R\nsubjects: [env.r]\n---\n"
        "kind: Consumer\nstream: ENV_R\nname: C\nack_policy: explicit\n"
    )
    (repo / "overlays" / "prod.yaml").write_text("kind: Stream\nname: ENV_R\nnum_replicas: 3\n")
    store = ("--store", str(tmp_path / "store"), "--project", str(repo / "reconcile.yaml"))
    for env in ("dev", "prod"):
        done = reconcile("apply", "--env", env, "-y", *store)
        assert done.returncode == 0, done.stderr
        again = reconcile("plan", "--env", env, "--detailed-exitcode", *store)
        assert again.returncode == 0, again.stdout + again.stderr
    assert stream_infos(nodes.urls)["ENV_R"]["config"]["num_replicas"] == 3
    dev = reconcile("export", "--env", "dev", *store)
    assert "num_replicas" not in dev.stdout  # R1: the default, not written


def test_an_r3_stream_migrates_on_the_cluster_with_every_message(nodes, tmp_path: Path) -> None:
    """file → memory of an R3 stream with a consumer: both copies are R3 too; every message
    and the consumer's ack floor come through, and the re-plan is empty."""
    from migration_helpers import dump, publish_many

    from reconciler.model.migration import temp_name

    spec = write_specs(
        tmp_path / "a", [stream_doc("R3M", num_replicas=3), consumer_doc("R3M", "WORKER")]
    )
    assert reconcile("apply", "-y", str(spec), "--server", nodes.urls).returncode == 0
    run(publish_many(nodes, ["r3m.a", "r3m.b"], 1500))
    expected = run(dump(nodes, "R3M"))
    migrated = write_specs(
        tmp_path / "b",
        [stream_doc("R3M", num_replicas=3, storage="memory"), consumer_doc("R3M", "WORKER")],
    )
    planned = plan_json([migrated], nodes.urls, "--migrate")
    assert [c["action"] for c in planned["changes"]] == ["migrate"]
    assert planned["changes"][0]["migration"]["messages"] == 1500
    done = reconcile("apply", "-y", str(migrated), "--migrate", "--server", nodes.urls)
    assert done.returncode == 0, done.stderr
    assert run(dump(nodes, "R3M")) == expected
    infos = stream_infos(nodes.urls)
    assert temp_name("R3M") not in infos
    assert infos["R3M"]["config"]["storage"] == "memory"
    assert infos["R3M"]["config"]["num_replicas"] == 3
    assert len(infos["R3M"]["cluster"].get("replicas") or []) == 2
    assert _converged([migrated], nodes.urls)


def test_a_consumer_reset_lost_to_a_stalled_cluster_is_sent_again(nodes) -> None:
    """An R3 consumer's reset is answered only once its peers applied it: with the other
    two nodes frozen, the plain request times out. The migration's reset sends it again
    until the cluster is back, and the paused consumer ends exactly where it was sent."""
    from migration_helpers import publish_many

    from reconciler.errors import RequestTimeout
    from reconciler.execution.migrate import HELD_UNTIL, reset_until_moved

    near, *others = nodes.nodes
    config = {
        "durable_name": "HELD",
        "ack_policy": "explicit",
        "deliver_policy": "all",
        "pause_until": HELD_UNTIL,
        "num_replicas": 3,
    }

    async def setup(client) -> None:
        await client.create_stream({"name": "RST", "subjects": ["rst.>"], "num_replicas": 3})
        await client.create_consumer("RST", config, action="create")

    run_client(nodes.urls, setup)
    run(publish_many(nodes, ["rst.a"], 40))

    def frozen(work):
        """``work`` with the other two nodes frozen for its first 2.5 s."""

        async def main(client):
            for node in others:
                node.pause()
            try:
                job = asyncio.create_task(work(client))
                await asyncio.wait({job}, timeout=2.5)
            finally:
                for node in others:
                    node.resume()
            return await job

        return main

    with pytest.raises(RequestTimeout):  # the fault is real: one plain reset goes unanswered
        run_client(near.url, frozen(lambda c: c.reset_consumer("RST", "HELD", 11)), timeout=1.0)

    run_client(near.url, frozen(lambda c: reset_until_moved(c, "RST", "HELD", 31)), timeout=1.0)

    def position(client):
        return client.consumer_info("RST", "HELD")

    info = run_client(nodes.urls, position)
    assert info["delivered"]["stream_seq"] == 30
    assert info["ack_floor"]["stream_seq"] == 30
    assert info["num_pending"] == 10  # 31..40, each once
    assert stream_infos(nodes.urls)["RST"]["state"]["messages"] == 40
