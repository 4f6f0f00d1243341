"""Shared fixtures: real nats-server processes on loopback (see tests/servers.py).

- ``nats_server`` / ``nats_url``: one plain JetStream server for the whole session.
- ``clean_server``: the session server, with every stream deleted after the test.
- ``server_factory``: start customised servers (auth, TLS, domain, old versions); all are
  stopped when the test ends.
- ``cluster``: a 3-node JetStream cluster per module (mark tests ``cluster``).
- ``versioned_server``: one server per release of ``SERVER_MATRIX`` plus the installed
  newest (module-scoped, parametrised; ids ``2.10.26`` ... ``newest``).
- ``run``: run a coroutine from a sync test (``run(coro)`` is ``asyncio.run(coro)``).

``RECONCILE_TEST_NATS_VERSION=2.10.26`` runs the session server on an older release.
"""

from __future__ import annotations

import fcntl
import os
import signal
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import settings
from servers import SERVER_MATRIX, Cluster, NatsServer, delete_all_streams, run

T = TypeVar("T")

# Tests never assert wall-clock times, and hypothesis's deadline (200 ms an example by
# default) is one: on a loaded machine an example of test_sent_on_create took 431 ms
# once, 0.02 ms when run again, and failed the README's command. Every property test
# runs without it (a test's own @settings inherits this).
settings.register_profile("no-deadline", deadline=None)
settings.load_profile("no-deadline")


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches every ``reconcile`` a test starts, however the run was started: a
    shell starts a background job (``cmd &``) with SIGINT ignored, and an ignored signal
    stays ignored in every process it starts. The interrupt tests (a Ctrl-C typed at a
    question, mid-restore, mid-failover) then saw a ``reconcile`` that never heard it."""
    del config
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


#: The marker every test of a folder under tests/ carries (``-m spark``, ``-m "not browser"``).
FOLDER_MARKERS = {
    "unit": "unit",
    "integration": "integration",
    "e2e": "e2e",
    "fleet": "spark",
    "browser": "browser",
    "pulumi": "pulumi",
    "reliability": "reliability",
}
TESTS = Path(__file__).resolve().parent


#: Folders whose every test is a long fault, attack or scale run: marked ``slow`` too, so
#: the README's ``pytest`` leaves them to ``.ci/run``'s second stage (``pytest -m slow``).
SLOW_FOLDERS = frozenset({"reliability"})


#: Fixtures that start a JVM (a Spark session, and the fleet built beside it): each worker
#: running a test that uses one starts its own, a third of the README's command on 2 cores
#: (437-503 s of its 480). Such tests are marked ``slow`` too, but the fleet's core promise
#: (its findings are ``reconcile drift``'s, environment by environment), kept in it.
JVM_FIXTURES = frozenset({"spark", "fleet_case"})
JVM_KEPT = frozenset({"test_spark_findings_equal_reconcile_drift_for_every_environment"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.path)).resolve().relative_to(TESTS).parts[0]
        marker = FOLDER_MARKERS.get(folder)
        if marker is not None:
            item.add_marker(marker)
        if folder in SLOW_FOLDERS or _starts_a_jvm(item):
            item.add_marker("slow")


def _starts_a_jvm(item: pytest.Item) -> bool:
    uses = JVM_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    return bool(uses) and getattr(item, "originalname", item.name) not in JVM_KEPT


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than half again the cores (3 on 2 cores). Most tests
    wait on a server or a child process, so a core serves more than one worker."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(2, (cores or 1) * 3 // 2)


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    version = os.environ.get("RECONCILE_TEST_NATS_VERSION") or None
    server = NatsServer(tmp_path_factory.mktemp("nats"), version=version).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def nats_url(nats_server: NatsServer) -> str:
    return nats_server.url


@pytest.fixture
def clean_server(nats_server: NatsServer) -> Iterator[NatsServer]:
    """The session server; every stream (and so every consumer and bucket) is deleted after,
    its files included."""
    if not nats_server.running:
        nats_server.start()
    yield nats_server
    if nats_server.running:
        run(delete_all_streams(nats_server.url))
        nats_server.clear_deleted_streams()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., NatsServer]]:
    """``server_factory(users=[...], domain="hub", version="2.10.26", ...)`` → started server."""
    started: list[NatsServer] = []

    def start(**kwargs: Any) -> NatsServer:
        server = NatsServer(tmp_path / f"server{len(started)}", **kwargs)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    nodes = Cluster(tmp_path_factory.mktemp("cluster")).start()
    yield nodes
    nodes.stop()


@pytest.fixture
def lagging_replica_alone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One test at a time on the machine that puts a cluster's replica behind its leader
    (a follower stopped through thousands of steps, read while it catches up): two at
    once, on two workers' clusters, starve each other of the two cores, and the replica
    catches up, or a read times out, before the moment the test reads it. A lock file
    every worker of the run shares (beside the workers' temp folders)."""
    lock = tmp_path_factory.getbasetemp().parent / "lagging-replica.lock"
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


@pytest.fixture(scope="module", params=[*SERVER_MATRIX, None], ids=[*SERVER_MATRIX, "newest"])
def versioned_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NatsServer]:
    version: str | None = request.param
    server = NatsServer(tmp_path_factory.mktemp(f"nats-{version or 'newest'}"), version=version)
    server.start()
    yield server
    server.stop()


@pytest.fixture(name="run")
def run_fixture() -> Callable[[Coroutine[Any, Any, T]], T]:
    return run
