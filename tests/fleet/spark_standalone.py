"""A Spark standalone cluster on loopback, started from pyspark's own launcher.

One master and one worker (``spark-class org.apache.spark.deploy.master.Master`` /
``...deploy.worker.Worker``), on free 127.0.0.1 ports, logs and work dirs in a temp
folder. ``SPARK_HOME`` is the installed pyspark package. Readiness: the master's JSON
status page lists an alive worker.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

import pyspark
from servers import unused_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT = 90.0


def spark_env(base: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(base / "logs"),
        SPARK_WORKER_DIR=str(base / "work"),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    return env


class StandaloneCluster:
    """``with StandaloneCluster(tmp) as cluster: ... cluster.master_url ...``"""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = unused_port()
        self.webui_port = unused_port()
        self.worker_webui_port = unused_port()
        self.worker_port = unused_port()
        self.processes: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _launch(self, name: str, *args: str) -> None:
        log = (self.base / f"{name}.log").open("wb")
        self._logs.append(log)
        process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=spark_env(self.base),
            cwd=self.base,
            start_new_session=True,
        )
        self.processes.append(process)

    def start(self) -> StandaloneCluster:
        self.base.mkdir(parents=True, exist_ok=True)
        self._launch(
            "master",
            *("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"),
            *("--port", str(self.port), "--webui-port", str(self.webui_port)),
        )
        self._launch(
            "worker",
            *("org.apache.spark.deploy.worker.Worker", self.master_url),
            *("--host", "127.0.0.1", "--port", str(self.worker_port)),
            *("--cores", "1", "--memory", "1g"),
            *("--webui-port", str(self.worker_webui_port), "--work-dir", str(self.base / "work")),
        )
        self.wait_ready()
        return self

    def status(self) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.ui_port()}/json/"
        with urllib.request.urlopen(url, timeout=2) as response:
            body: dict[str, Any] = json.load(response)
            return body

    def ui_port(self) -> int:
        """The port the master's web UI is bound to: the one asked for, or the next one
        Spark took when another process bound it first (the worker's own port is one
        the kernel picks, and it once picked the UI's before the master bound it)."""
        path = self.base / "master.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        bound = re.findall(r"Bound MasterWebUI to \S+ and started at http://[^:]+:(\d+)", text)
        return int(bound[-1]) if bound else self.webui_port

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"spark process exited early:\n{self.log_tail()}")
            try:
                if self.status().get("aliveworkers", 0) >= 1:
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"spark standalone cluster not ready:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        out = []
        for name in ("master", "worker"):
            path = self.base / f"{name}.log"
            if path.exists():
                out.append(f"--- {name}\n" + "\n".join(path.read_text().splitlines()[-lines:]))
        return "\n".join(out)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
