"""``reconcile watch --shard I/N``: which agent serves which environment, and the
Kubernetes manifest that runs the shards (examples/agent/kubernetes.yaml)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconciler.agent.shards import Shard, owner, parse_shard
from reconciler.cli.watch_cmd import watch
from reconciler.errors import ReconcileError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agent"
NAMES = [f"env-{i}" for i in range(1000)]


def test_every_environment_has_exactly_one_shard() -> None:
    shards = [Shard(i, 4) for i in range(4)]
    served = [name for shard in shards for name in shard.select(NAMES)]
    assert sorted(served) == sorted(NAMES)
    assert all(150 <= len(shard.select(NAMES)) <= 350 for shard in shards)  # about N/4 each
    assert [owner(name, 4) for name in NAMES] == [owner(name, 4) for name in NAMES]


def test_a_shard_more_moves_only_what_the_new_shard_takes() -> None:
    moved = [name for name in NAMES if owner(name, 3) != owner(name, 4)]
    assert all(owner(name, 4) == 3 for name in moved)  # no swap between shards that stay
    assert 0.15 < len(moved) / len(NAMES) < 0.35  # about 1/4, not all of them


@pytest.mark.parametrize(
    ("text", "shard"),
    [("0/2", Shard(0, 2)), ("reconcile-watch-1/2", Shard(1, 2)), (" 2/3 ", Shard(2, 3))],
)
def test_a_shard_is_an_index_or_a_pod_name_and_a_count(text: str, shard: Shard) -> None:
    assert parse_shard(text) == shard


@pytest.mark.parametrize("text", ["2/2", "1/0", "-1/2", "a/2", "pod-/2", "1", "1/2/3", "1/x", ""])
def test_a_shard_that_is_no_shard_is_refused(text: str) -> None:
    with pytest.raises(ReconcileError, match="--shard"):
        parse_shard(text)


def _documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / "kubernetes.yaml").read_text()) if d]


def _entrypoint() -> list[str]:
    line = next(
        line
        for line in (EXAMPLES / "Dockerfile").read_text().splitlines()
        if line.startswith("ENTRYPOINT")
    )
    found: list[str] = json.loads(line.removeprefix("ENTRYPOINT"))
    return found


def test_the_kubernetes_statefulset_runs_one_shard_per_pod() -> None:
    kinds = {d["kind"]: d for d in _documents()}
    sts, service = kinds["StatefulSet"], kinds["Service"]
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    replicas = sts["spec"]["replicas"]
    pod = sts["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    shard_option = next(p for p in watch.params if p.name == "shard")
    assert shard_option.envvar == "RECONCILE_SHARD"
    for ordinal in range(replicas):  # what each pod's variable expands to
        pod_name = f"{sts['metadata']['name']}-{ordinal}"
        value = re.sub(r"\$\(POD_NAME\)", pod_name, env["RECONCILE_SHARD"]["value"])
        assert parse_shard(value) == Shard(ordinal, replicas)

    entry = _entrypoint()
    assert entry[:2] == ["reconcile", "watch"]
    context = watch.make_context("watch", [*entry[2:], *container["args"]])
    assert context.params["all_envs"] and context.params["mode"] == "heal"
    assert context.params["git_url"]
    port = context.params["listen"][1]
    assert {p["containerPort"] for p in container["ports"]} == {port}
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    live, ready = container["livenessProbe"]["httpGet"], container["readinessProbe"]["httpGet"]
    assert live["path"] == "/healthz" and ready["path"] == "/readyz"
    assert named[live["port"]] == port and named[ready["port"]] == port
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port)
    assert annotations["prometheus.io/path"] == "/metrics"


@pytest.mark.parametrize("text", ["0/²", "0/٣", "0/" + "9" * 5000, "0/+2", "0/2_0"])
def test_a_count_that_is_no_plain_number_is_refused_not_a_traceback(text: str) -> None:
    """``str.isdigit`` says yes to ``²`` (int() then raises ValueError) and to ``٣``
    (read as 3), and int() refuses a number of 5,000 digits: each is a --shard error."""
    with pytest.raises(ReconcileError, match="--shard"):
        parse_shard(text)
