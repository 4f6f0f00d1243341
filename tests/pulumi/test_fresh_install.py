"""The Pulumi guide's install steps, run as written on a fresh virtual environment.

A checkout (the repository's tracked files, as ``git clone`` gives them) and a copy of
``examples/pulumi`` somewhere else; ``python3 -m venv venv`` and ``pip install -r
requirements.txt`` with ``JETSTREAM_GITOPS`` pointing at the checkout, exactly as
docs/pulumi.md says; then the copied program runs under a real provider host started
from that venv (``run_program.py``), which creates every resource on a real server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from servers import NatsServer, run

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def checkout(into: Path) -> Path:
    """The repository's tracked files, as a clone has them (no venvs, caches or builds)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = REPO / name.decode()
        if source.is_file():
            target = into / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def step(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}{done.stderr[-4000:]}"
    return done.stdout


def test_the_documented_install_steps_work_and_a_copied_example_runs(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    source = checkout(tmp_path / "jetstream-gitops")
    stack = tmp_path / "elsewhere" / "my-stack"
    shutil.copytree(source / "examples" / "pulumi", stack)  # cp -r examples/pulumi my-stack
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "JETSTREAM_GITOPS": str(source),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    step([sys.executable, "-m", "venv", "venv"], stack, env)
    python = stack / "venv" / "bin" / "python"
    step([str(python), "-m", "pip", "install", "-q", "-r", "requirements.txt"], stack, env)

    where = step(
        [str(python), "-c", "import pulumi_provider; print(pulumi_provider.__file__)"], stack, env
    )
    assert where.startswith(str(stack / "venv")), where  # the venv's copy, not this checkout

    env["PYTHONPATH"] = str(HERE)  # the harness only: run_program.py and pulumi_host.py
    out = step(
        [str(python), str(HERE / "run_program.py"), str(stack), clean_server.url], stack, env
    )
    created = {r["name"] for r in json.loads(out.splitlines()[-1])["created"]}
    assert created == {
        "EVENTS",
        "AUDIT",
        "settings",
        "assets",
        "shop/Stream/ORDERS",
        "shop/Consumer/ORDERS/NEW",
        "shop/Consumer/ORDERS/DISPATCH",
    }
    live = run(engine.fetch_live(ConnectionOptions(servers=clean_server.url)))
    # and the apply lock's bucket, which Pulumi's changes take as `reconcile apply` does
    assert set(live.streams) == {
        "EVENTS",
        "KV_settings",
        "OBJ_assets",
        "ORDERS",
        "KV_RECONCILE_LOCKS",
    }
    assert set(live.consumers) == {("EVENTS", "AUDIT"), ("ORDERS", "DISPATCH"), ("ORDERS", "NEW")}
    assert live.streams["ORDERS"]["max_age"] == 7 * 24 * 3600 * 10**9  # the copied specs
