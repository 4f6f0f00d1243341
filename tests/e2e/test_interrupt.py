"""Ctrl-C mid-apply: requests in flight finish, nothing new starts, the next run converges."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from servers import NatsServer


def test_sigint_mid_apply_stops_cleanly_and_the_next_run_converges(
    tmp_path: Path, clean_server: NatsServer
) -> None:
    docs = [f"kind: Stream\nname: INT{i:03d}\nsubjects: [int{i}.>]\n" for i in range(300)]
    spec = tmp_path / "many.yaml"
    spec.write_text("---\n".join(docs), encoding="utf-8")
    command = [sys.executable, "-m", "reconciler", "apply", str(spec), "-y", "--concurrency", "1"]
    env = {**os.environ, "CI": "true"}
    proc = subprocess.Popen(
        [*command, "--server", clean_server.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "applied create" in line:
            proc.send_signal(signal.SIGINT)
            break
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "interrupted" in err
    replan = subprocess.run(
        [sys.executable, "-m", "reconciler", "plan", str(spec), "--format", "json"],
        env={**env, "NATS_URL": clean_server.url},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    summary = json.loads(replan.stdout)["summary"]
    assert 0 < summary["create"] < 300  # stopped part-way, every stream whole or absent
    assert summary["update"] == 0 and summary["replace"] == 0
    done = subprocess.run(
        [*command, "--server", clean_server.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    final = subprocess.run(
        [sys.executable, "-m", "reconciler", "plan", str(spec), "--detailed-exitcode"],
        env={**env, "NATS_URL": clean_server.url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert final.returncode == 0, final.stdout
