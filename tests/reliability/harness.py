"""What the reliability tests share: spec folders, the CLI in a subprocess, server reads.

The CLI runs as a user runs it (``python -m reconciler ...``) with ``CI=1`` (plain log
lines, no progress bars). Server facts are read with the project's own client.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from reconciler.jetstream import ConnectionOptions, open_client

REPO = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 180


def stream_doc(name: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Stream", "name": name, "subjects": [f"{name.lower()}.>"]}
    body.update(fields)
    return body


def consumer_doc(stream: str, name: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Consumer", "stream": stream, "name": name}
    body.update({"ack_policy": "explicit", **fields})
    return body


def write_specs(folder: Path, documents: Iterable[Mapping[str, Any]]) -> Path:
    """One YAML file holding every document (the folder is emptied first)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.yaml"):
        old.unlink()
    (folder / "specs.yaml").write_text(yaml.safe_dump_all([dict(d) for d in documents]))
    return folder


def reconcile_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "reconciler", *args]


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}
    env.update({"CI": "1", "NO_COLOR": "1", "PYTHONPATH": str(REPO)}, **extra)
    return env


def reconcile(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = HANG_GUARD_S
) -> subprocess.CompletedProcess[str]:
    """Run the CLI to the end; the time limit is a hang guard only."""
    return subprocess.run(
        reconcile_argv(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env or cli_env()),
        cwd=REPO,
        check=False,
    )


def start_reconcile(*args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        reconcile_argv(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env or cli_env()),
        cwd=REPO,
    )


def plan_json(
    paths: Sequence[Path], url: str, *extra: str, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    done = reconcile("plan", *map(str, paths), "--server", url, "--format", "json", *extra, env=env)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def pending(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The changes of a JSON plan (unmanaged resources are not changes)."""
    return [c for c in plan.get("changes", []) if c.get("action") != "unchanged"]


def run_client(url: str, work: Any, **options: Any) -> Any:
    """``await work(client)`` on a fresh client of the server at ``url``."""

    async def main() -> Any:
        async with open_client(ConnectionOptions(servers=url, **options)) as client:
            return await work(client)

    return asyncio.run(main())


def stream_infos(url: str, **options: Any) -> dict[str, dict[str, Any]]:
    async def work(client: Any) -> dict[str, dict[str, Any]]:
        return {info["config"]["name"]: info for info in await client.list_streams()}

    result: dict[str, dict[str, Any]] = run_client(url, work, **options)
    return result
