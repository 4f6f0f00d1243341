"""`reconcile watch` attacked by another client of the same account: any client may publish
on ``$JS.EVENT.ADVISORY.>`` (nats-server does not reserve those subjects), so every
advisory is forged text. A forged one costs a bounded re-plan and decides nothing."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.server
import json
import signal
import socketserver
import threading
import time
import urllib.error
import urllib.request
from http import HTTPStatus
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer, make_server

from agent_harness import (
    ORDERS,
    Other,
    agent_process,
    changes,
    fixed_source,
    lines,
    running_agent,
    until,
)
from dulwich import porcelain
from dulwich.repo import Repo
from dulwich.server import DictBackend
from dulwich.web import make_wsgi_chain
from servers import NatsServer, unused_port, write
from test_agent_git import NEW_STREAM, origin, push_commit, specs_source

from reconciler.agent import commits, listener
from reconciler.agent.source import FixedSource, GitSource
from reconciler.errors import ReconcileError
from reconciler.execution import lock
from reconciler.execution.requests import PlanRequest
from reconciler.identity import LOCK_BUCKET
from reconciler.jetstream import ConnectionOptions, open_client


def _stream_action(name: str) -> bytes:
    body = {"type": "io.nats.jetstream.advisory.v1.stream_action", "stream": name}
    return json.dumps(body).encode()


def test_a_forged_advisory_naming_an_impossible_stream_is_ignored(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """A name with a space (or CR LF) made the agent's re-plan build an invalid subject:
    nats-py's BadSubjectError ended the agent (one message from any client stopped it)."""
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), mode="heal") as (agent, _log),
            Other.connect(clean_server.url, name="mallory") as mallory,
        ):
            await until(
                lambda: (
                    agent.watch.known and all(s == "in_sync" for s in agent.watch.known.values())
                ),
                what="in sync",
            )
            for name in ("A B", "bad\r\nPUB x 1", ">", "*", "x" * 300):
                before = agent.watch.cycles
                subject = "$JS.EVENT.ADVISORY.STREAM.UPDATED.X"
                await mallory.nc.publish(subject, _stream_action(name))
                await mallory.nc.flush()
                await until(lambda b=before: agent.watch.cycles > b, what=f"a cycle after {name!r}")
            await mallory.publish("orders.new", 3)
            config = (await mallory.info("ORDERS"))["config"]
            config.update(description="changed by hand")
            await mallory.api("STREAM.UPDATE.ORDERS", config)
            await until(
                lambda: agent.watch.known.get(next(iter(agent.watch.known))) == "healed",
                what="healed",
            )
            assert agent.watch.connected and agent.watch.last is not None and agent.watch.last.ok
            live = (await mallory.info("ORDERS"))["config"]
            assert live["description"] == "orders as declared"  # healed: the agent runs
            assert await mallory.messages("ORDERS") == 3

    run(scenario())


def test_a_flood_of_advisories_is_one_full_plan_not_a_plan_per_name(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """Thousands of names forged in one burst: the names kept are bounded
    (listener.MAX_PENDING) and the cycle is one full plan of the account, not a targeted
    plan of every forged name; the declared stream keeps its messages."""
    specs = write(tmp_path, ORDERS)

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), mode="heal", interval=600.0) as (
                agent,
                _log,
            ),
            Other.connect(clean_server.url, name="mallory") as mallory,
        ):
            await until(
                lambda: (
                    agent.watch.known and all(s == "in_sync" for s in agent.watch.known.values())
                ),
                what="in sync",
            )
            await mallory.publish("orders.new", 4)
            sample = agent.metrics.registry.get_sample_value
            full = sample("reconcile_plan_duration_seconds_count", {"scope": "full"})
            burst = 3 * listener.MAX_PENDING
            for i in range(burst):
                await mallory.nc.publish(
                    f"$JS.EVENT.ADVISORY.STREAM.UPDATED.F{i}", _stream_action(f"F{i}")
                )
            await mallory.nc.flush()
            await until(
                lambda: sample("reconcile_advisories_total", {"type": "stream_action"}) >= burst,
                what="the burst received",
            )
            await until(
                lambda: sample("reconcile_plan_duration_seconds_count", {"scope": "full"}) > full,
                what="a full plan after the burst",
            )
            assert len(agent.watch.listener.pending) <= listener.MAX_PENDING + 1
            assert agent.watch.last is not None and agent.watch.last.ok
            assert {r.ref.stream_name for r in agent.watch.last.resources} == {"ORDERS"}
            assert await mallory.messages("ORDERS") == 4

    run(scenario())


SIZED_ORDERS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_bytes: 1048576
description: orders as declared
"""
UNSIZED = 'kind: Stream\nname: BIG\nsubjects: ["big.>"]\n'
SIZED_RULE = (
    "rules:\n  - id: sized\n    level: deny\n    message: streams set max_bytes\n"
    "    kinds: [Stream]\n    expr: resource.desired.max_bytes > 0\n"
)


def test_a_targeted_heal_never_applies_what_the_full_plan_denies(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """A spec file added since the last full plan (BIG, which a policy deny rule refuses)
    and an advisory about ORDERS: the full plan is refused as a whole (apply changes
    nothing). The advisory's targeted plan validated the new files but planned ORDERS
    alone, which the rule does not see failing, and the heal applied it."""
    folder = tmp_path / "specs"
    folder.mkdir()
    write(folder, SIZED_ORDERS, "orders.yaml")
    policy = write(tmp_path, SIZED_RULE, "policy.yaml")
    options = ConnectionOptions(servers=clean_server.url)
    source = FixedSource(lambda root: PlanRequest.of([folder], options, policies=(policy,)))

    async def scenario() -> None:
        async with (
            running_agent(source, mode="heal", interval=600.0) as (agent, _log),
            Other.connect(clean_server.url) as alice,
        ):
            await until(
                lambda: (
                    agent.watch.known and all(s == "in_sync" for s in agent.watch.known.values())
                ),
                what="ORDERS created",
            )
            await alice.publish("orders.new", 5)
            write(folder, UNSIZED, "big.yaml")
            before = agent.watch.cycles
            config = (await alice.info("ORDERS"))["config"]
            config.update(description="changed by hand")
            await alice.api("STREAM.UPDATE.ORDERS", config)
            await until(lambda: agent.watch.cycles > before, what="the advisory's cycle")
            live = (await alice.info("ORDERS"))["config"]
            assert live["description"] == "changed by hand"  # the full plan is denied
            assert agent.watch.last is not None and not agent.watch.last.ok
            assert await alice.messages("ORDERS") == 5
            assert "BIG" not in [name async for name in _names(alice)]

    run(scenario())


async def _names(other: Other):  # type: ignore[no-untyped-def]
    for name in (await other.api("STREAM.NAMES"))["streams"] or []:
        yield name


def test_a_heal_lossless_when_planned_but_lossy_under_the_lock_is_never_applied(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """Someone raised ORDERS' max_msgs (1,000 declared) to 10,000 while a CLI apply held
    the lock: the advisory's plan saw an empty stream (lowering the limit back loses
    nothing) and the heal waited for the lock; meanwhile 1,500 messages arrived. The heal
    plans again under the lock, where lowering max_msgs would delete 500 of them: it
    needs a person, and all 1,500 stay."""
    specs = write(tmp_path, ORDERS)
    options = ConnectionOptions(servers=clean_server.url)

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), mode="heal", interval=600.0) as (
                agent,
                log,
            ),
            Other.connect(clean_server.url) as alice,
        ):
            await until(lambda: changes(log, "Stream ORDERS", "healed"), what="ORDERS created")
            await until(
                lambda: (
                    agent.watch.known and all(s == "in_sync" for s in agent.watch.known.values())
                ),
                what="in sync",
            )
            async with open_client(options) as holder, lock.for_apply(holder, timeout=5):
                config = (await alice.info("ORDERS"))["config"]
                config["max_msgs"] = 10_000
                await alice.api("STREAM.UPDATE.ORDERS", config)
                await until(
                    lambda: any("waiting" in (line.get("message") or "") for line in lines(log)),
                    what="the heal waiting for the lock",
                )
                await alice.publish("orders.new", 1500)
            person = await until(
                lambda: changes(log, "Stream ORDERS", "needs_person"), what="needs a person"
            )
            assert "deletes stored data" in person[0]["why"]
            assert (await alice.info("ORDERS"))["config"]["max_msgs"] == 10_000
            assert await alice.messages("ORDERS") == 1500

    run(scenario())


def test_a_git_url_secret_is_never_printed(tmp_path: Path, run) -> None:
    """A token in the URL's query (``?access_token=``) or a password in scp-like
    ``user:password@host:path`` form: the fetch error named the URL as given."""
    reply = HTTPStatus.INTERNAL_SERVER_ERROR

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(reply)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    urls = (
        f"http://127.0.0.1:{port}/infra.git?access_token=s3cr3t",
        f"http://bot:s3cr3t@127.0.0.1:{port}/infra.git",
        "bot:s3cr3t@127.0.0.1:infra.git",
    )
    try:
        for i, url in enumerate(urls):
            source = GitSource(url, "main", tmp_path / str(i), lambda root: None)  # type: ignore[arg-type,return-value]
            try:
                run(source.refresh())
            except ReconcileError as err:
                assert "s3cr3t" not in str(err), str(err)
                assert "cannot fetch" in str(err)
            else:
                raise AssertionError(f"{url}: fetched")
            assert "s3cr3t" not in source.shown_url
    finally:
        server.shutdown()


def test_http_clients_that_never_finish_block_neither_the_endpoints_nor_the_cycles(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """100 connections that send half a request line and wait (slowloris), one with a
    64 KiB line, one asking for ../../etc/passwd: /healthz still answers, the loop still
    plans (and heals a change made meanwhile), and nothing but the four routes is served."""
    specs = write(tmp_path, ORDERS)

    async def get(port: int, raw: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(raw)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        return answer

    async def scenario() -> None:
        async with (
            running_agent(fixed_source([specs], clean_server.url), mode="heal") as (agent, _log),
            Other.connect(clean_server.url) as alice,
        ):
            await until(
                lambda: (
                    agent.watch.known and all(s == "in_sync" for s in agent.watch.known.values())
                ),
                what="in sync",
            )
            assert agent.http is not None
            port = agent.http.sockets[0].getsockname()[1]
            idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(100)]
            for _, writer in idle:
                writer.write(b"GET /sta")
                await writer.drain()
            assert (await get(port, b"GET /healthz HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")
            huge = await get(port, b"GET /" + b"a" * 65536 + b" HTTP/1.1\r\n\r\n")
            assert not huge.startswith(b"HTTP/1.1 200")
            passwd = await get(port, b"GET /../../etc/passwd HTTP/1.1\r\n\r\n")
            assert passwd.startswith(b"HTTP/1.1 404") and b"root:" not in passwd
            await alice.publish("orders.new", 2)
            config = (await alice.info("ORDERS"))["config"]
            config.update(description="changed by hand")
            await alice.api("STREAM.UPDATE.ORDERS", config)
            await until(
                lambda: agent.watch.known.get(next(iter(agent.watch.known))) == "healed",
                what="healed",
            )
            assert await alice.messages("ORDERS") == 2
            for _, writer in idle:
                writer.close()

    run(scenario())


def test_a_heal_never_applies_a_commit_older_than_the_branch_head_under_the_lock(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """PAYMENTS deleted out of band while a CLI apply holds the lock; the heal that waits
    for it was planned from commit A, which declares PAYMENTS. Meanwhile commit B, which
    removes PAYMENTS, is pushed. Once the lock is free, the heal applied A: it created
    PAYMENTS again, which the branch head no longer declares (an orphan a person must
    delete). It looks at the branch head under the lock and applies nothing."""
    bare, work = origin(tmp_path)
    push_commit(work, bare, {"specs/orders.yaml": ORDERS, "specs/payments.yaml": NEW_STREAM}, "A")
    options = ConnectionOptions(servers=clean_server.url)

    source = specs_source(f"file://{bare}", tmp_path, options)

    async def scenario() -> None:
        async with (
            running_agent(source, mode="heal", interval=600.0, git_poll=600.0) as (agent, log),
            Other.connect(clean_server.url) as alice,
        ):
            await until(
                lambda: (
                    agent.watch.known and all(s == "in_sync" for s in agent.watch.known.values())
                ),
                what="ORDERS and PAYMENTS created",
            )
            async with open_client(options) as holder, lock.for_apply(holder, timeout=5):
                await alice.api("STREAM.DELETE.PAYMENTS")
                await until(
                    lambda: any("waiting" in (line.get("message") or "") for line in lines(log)),
                    what="the heal waiting for the lock",
                )
                porcelain.remove(str(work), paths=[str(work / "specs" / "payments.yaml")])
                head = porcelain.commit(
                    str(work), message=b"B", author=b"t <t@e>", committer=b"t <t@e>"
                )
                porcelain.push(str(work), str(bare), b"HEAD:refs/heads/main")
                before = agent.watch.cycles
            await until(lambda: agent.watch.cycles > before, what="the heal's cycle")
            assert source.commit == bytes(head).decode()
            await until(
                lambda: agent.watch.last is not None and agent.watch.last.commit == source.commit,
                what="commit B planned at once",
                patience=10.0,
            )
            assert "PAYMENTS" not in [name async for name in _names(alice)]
            assert await alice.messages("ORDERS") == 0

    run(scenario())


def test_a_heal_that_loses_the_lease_stops_the_heal_not_the_agent(
    clean_server: NatsServer, tmp_path: Path, run, monkeypatch
) -> None:
    """Someone overwrites the apply lock while a heal creates 150 streams (a lease of
    0.3 s is refreshed every 0.1 s): the fence refuses the heal's next steps. The lease's
    on_lost was the agent's own stop event: the agent ended, exit status 0 (a service
    manager does not restart that) and nobody watched the server any more."""
    monkeypatch.setenv("RECONCILE_LOCK_LEASE", "0.3")
    specs = write(
        tmp_path,
        "---\n".join(f'kind: Stream\nname: S{i}\nsubjects: ["s{i}.>"]\n' for i in range(150)),
    )
    kv_stream, subject = f"KV_{LOCK_BUCKET}", f"$KV.{LOCK_BUCKET}.apply"

    async def scenario() -> None:
        async with Other.connect(clean_server.url, name="thief") as thief:

            async def held() -> bool:
                ask = json.dumps({"last_by_subj": subject}).encode()
                try:
                    reply = await thief.nc.request(f"$JS.API.STREAM.MSG.GET.{kv_stream}", ask)
                except Exception:
                    return False
                found = json.loads(reply.data).get("message")
                if found is None:
                    return False
                headers = base64.b64decode(found.get("hdrs") or "")
                return b"KV-Operation" not in headers  # a lease, not a delete marker

            async def until_held(patience: float = 30.0) -> None:
                deadline = asyncio.get_running_loop().time() + patience
                while not await held():
                    assert asyncio.get_running_loop().time() < deadline, "no heal took the lock"
                    await asyncio.sleep(0.005)

            def lost() -> bool:
                return any("lost" in (line.get("message") or "") for line in lines(log))

            async with running_agent(
                fixed_source([specs], clean_server.url), mode="heal", interval=2.0
            ) as (agent, log):
                for _ in range(5):  # until the overwrite lands while a heal holds the lease
                    await until_held()
                    await thief.nc.publish(subject, b"stolen")
                    with contextlib.suppress(AssertionError):
                        await until(lost, what="the lease lost", patience=5.0)
                    if lost():
                        break
                    # the heal ended first: the key cleared, its streams deleted, healed again
                    await thief.nc.publish(subject, b"", headers={"KV-Operation": "DEL"})
                    for name in [n async for n in _names(thief) if n.startswith("S")]:
                        await thief.api(f"STREAM.DELETE.{name}")
                assert lost(), "no heal held the lease when it was overwritten, in 5 tries"
                await asyncio.sleep(1.0)
                assert not agent.stop.is_set(), "the agent stopped"
                await thief.nc.publish(subject, b"", headers={"KV-Operation": "DEL"})
                await until(
                    lambda: (
                        agent.watch.known
                        and all(s == "in_sync" for s in agent.watch.known.values())
                    ),
                    what="every stream created by a later heal",
                )
            names = [name async for name in _names(thief)]
            assert len([n for n in names if n.startswith("S")]) == 150

    run(scenario())


def test_a_commit_with_invalid_specs_is_reported_and_nothing_is_healed(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """Commit B breaks orders.yaml: each cycle is an error naming the file and line; a
    change made meanwhile is healed neither to B (invalid) nor back to A (not the head)."""
    bare, work = origin(tmp_path)
    push_commit(work, bare, {"specs/orders.yaml": ORDERS}, "A")
    options = ConnectionOptions(servers=clean_server.url)

    source = specs_source(f"file://{bare}", tmp_path, options)

    async def scenario() -> None:
        async with (
            running_agent(source, mode="heal", interval=0.5, git_poll=0.2) as (agent, log),
            Other.connect(clean_server.url) as alice,
        ):
            await until(
                lambda: (
                    agent.watch.known and all(s == "in_sync" for s in agent.watch.known.values())
                ),
                what="ORDERS created",
            )
            broken = ORDERS.replace("max_msgs: 1000", "max_msgs: lots")
            head = push_commit(work, bare, {"specs/orders.yaml": broken}, "B")
            await until(
                lambda: (
                    agent.watch.last is not None
                    and agent.watch.last.commit == head
                    and not agent.watch.last.ok
                ),
                what="commit B's cycle failed",
            )
            assert agent.watch.last is not None and agent.watch.last.error is not None
            assert "orders.yaml:4" in agent.watch.last.error, agent.watch.last.error
            await alice.publish("orders.new", 3)
            config = (await alice.info("ORDERS"))["config"]
            config.update(description="changed by hand")
            await alice.api("STREAM.UPDATE.ORDERS", config)
            start = agent.watch.cycles
            await until(lambda: agent.watch.cycles >= start + 3, what="3 more cycles")
            assert not agent.watch.last.ok
            assert (await alice.info("ORDERS"))["config"]["description"] == "changed by hand"
            assert await alice.messages("ORDERS") == 3
            assert not any("Traceback" in (line.get("message") or "") for line in lines(log))

    run(scenario())


def test_a_deleted_branch_is_said_in_status_and_the_last_commit_kept(
    clean_server: NatsServer, tmp_path: Path, run
) -> None:
    """The branch is deleted from the repository: the agent keeps planning (and healing)
    the last commit it fetched, and /status says the fetch fails and since when (it said
    nothing: only a log line per poll)."""
    bare, work = origin(tmp_path)
    first = push_commit(work, bare, {"specs/orders.yaml": ORDERS}, "A")
    options = ConnectionOptions(servers=clean_server.url)

    source = specs_source(f"file://{bare}", tmp_path, options)

    async def scenario() -> None:
        async with (
            running_agent(source, mode="heal", interval=0.5, git_poll=0.2) as (agent, _log),
            Other.connect(clean_server.url) as alice,
        ):
            await until(
                lambda: (
                    agent.watch.known and all(s == "in_sync" for s in agent.watch.known.values())
                ),
                what="ORDERS created",
            )
            assert agent.status()["git"] == {"error": None, "failing_since": None}
            with Repo(str(bare)) as repo:
                repo.refs.remove_if_equals(b"refs/heads/main", None)
            failing = await until(
                lambda: agent.status()["git"]["error"], what="the fetch failure in /status"
            )
            assert "has no branch 'main'" in failing
            assert agent.status()["git"]["failing_since"] is not None
            await alice.publish("orders.new", 2)
            await alice.api("STREAM.DELETE.ORDERS")
            await until(
                lambda: agent.watch.known.get(next(iter(agent.watch.known))) == "healed",
                what="ORDERS created again from the last commit",
            )
            assert agent.status()["commit"] == first
            assert await alice.messages("ORDERS") == 0

    run(scenario())


def test_a_git_server_that_hangs_never_keeps_the_lock(
    clean_server: NatsServer, tmp_path: Path, run, monkeypatch
) -> None:
    """The heal fetches the branch under the apply lock: a git server that stops
    answering kept the fetch (and the lock) forever. The look is bounded
    (commits.HEAD_CHECK_SECONDS): the heal goes on with the last commit fetched and releases
    the lock; a CLI apply takes it afterwards."""
    monkeypatch.setattr(commits, "HEAD_CHECK_SECONDS", 1.0)
    bare, work = origin(tmp_path)
    push_commit(work, bare, {"specs/orders.yaml": ORDERS}, "A")
    git = HangingGit(bare)
    hang, release = git.hang, git.release
    options = ConnectionOptions(servers=clean_server.url)

    def make(root: Path | None) -> PlanRequest:
        assert root is not None
        return PlanRequest.of([root / "specs"], options)

    source = GitSource(git.url, "main", tmp_path / "cache", make)

    async def scenario() -> None:
        async with (
            running_agent(source, mode="heal", interval=600.0, git_poll=600.0) as (agent, log),
            Other.connect(clean_server.url) as alice,
        ):
            await until(
                lambda: (
                    agent.watch.known and all(s == "in_sync" for s in agent.watch.known.values())
                ),
                what="ORDERS created",
            )
            hang.set()
            async with open_client(options) as holder, lock.for_apply(holder, timeout=5):
                await alice.api("STREAM.DELETE.ORDERS")
                await until(
                    lambda: any("waiting" in (line.get("message") or "") for line in lines(log)),
                    what="the heal waiting for the lock",
                )
            await until(
                lambda: changes(log, "Stream ORDERS", "healed")[1:],
                what="ORDERS created again with the last commit",
            )
            async with open_client(options) as holder, lock.for_apply(holder, timeout=5):
                pass  # the lock is free again
            assert await alice.messages("ORDERS") == 0
            release.set()  # the fetch's thread ends (a process exit waits for it)

    try:
        run(scenario())
    finally:
        git.close()


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class HangingGit:
    """The bare repository ``bare`` over HTTP (dulwich's smart HTTP), which stops
    answering while ``hang`` is set (until ``release``); ``entered``: a request hung."""

    def __init__(self, bare: Path) -> None:
        self.hang, self.entered, self.release = (threading.Event() for _ in range(3))
        git_app = make_wsgi_chain(DictBackend({"/": Repo(str(bare))}))

        def app(environ: Any, start_response: Any) -> Any:
            if self.hang.is_set():
                self.entered.set()
                self.release.wait(60)
            return git_app(environ, start_response)

        self.server = make_server("127.0.0.1", 0, app, server_class=_ThreadingWSGIServer)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()


def test_sigterm_during_a_hung_git_fetch_still_stops_the_agent(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The git fetch runs in a thread: in the loop's executor, ``asyncio.run`` waited at
    exit for a fetch from a git server that stopped answering, so SIGTERM did not end the
    agent while the fetch hung. It runs in a daemon thread of its own now."""
    import os
    import signal
    import subprocess
    import sys

    bare, work = origin(tmp_path)
    push_commit(work, bare, {"specs/orders.yaml": ORDERS}, "A")
    git = HangingGit(bare)
    url = git.url
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}
    argv = [sys.executable, "-m", "reconciler", "watch", "specs", "--git", url, "--ref", "main"]
    argv += ["--git-poll", "1s", "--interval", "1s", "--server", clean_server.url]
    argv += ["--listen", "off", "--log-format", "json", "--git-cache", str(tmp_path / "cache")]
    agent = subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert agent.stderr is not None
        for line in agent.stderr:
            if '"event": "cycle"' in line:
                break
        git.hang.set()
        assert git.entered.wait(30), "the agent never fetched again"
        agent.send_signal(signal.SIGTERM)
        _, rest = agent.communicate(timeout=5)  # systemd's and Kubernetes' patience, shortened
    finally:
        if agent.poll() is None:
            agent.kill()
        git.close()
    assert agent.returncode == 0, rest
    assert '"event": "stopped"' in rest


def test_sigterm_during_the_first_fetch_of_every_environment_stops_the_agent(
    tmp_path: Path,
) -> None:
    """``watch --git --all-envs`` reads the environments from the branch head before it
    serves any: SIGTERM while that first fetch hangs still ends the agent, exit 0."""
    bare, work = origin(tmp_path)
    project = "owner: shop\nspecs: [specs]\nenvironments:\n  dev: {servers: nats://127.0.0.1:1}\n"
    push_commit(work, bare, {"reconcile.yaml": project, "specs/orders.yaml": ORDERS}, "A")
    git = HangingGit(bare)
    git.hang.set()
    agent = agent_process(
        ["--git", git.url, "--all-envs", "--listen", "off", "--log-format", "json"], cwd=tmp_path
    )
    try:
        assert git.entered.wait(30), "the agent never fetched"
        agent.send_signal(signal.SIGTERM)
        _, rest = agent.communicate(timeout=5)
    finally:
        if agent.poll() is None:
            agent.kill()
        git.close()
    assert agent.returncode == 0, rest
    assert '"event": "stopped"' in rest and "Traceback" not in rest


def test_the_process_answers_healthz_while_the_first_fetch_of_every_environment_runs(
    tmp_path: Path,
) -> None:
    """``watch --git --all-envs`` fetches the branch head before it knows the environments
    to serve; the first fetch takes the whole history (30,000 commits: 13 s here, more
    for a larger one or over a slower link). The listener opened only after it, so the
    Kubernetes example's liveness probe (/healthz, six misses 10 s apart) killed the pod
    before any first fetch over a minute ended: restarted, fetched again from nothing,
    killed again. /healthz answers
    from the start now, /readyz is 503 saying why, and the same listener serves the
    agent once the environments are known."""
    bare, work = origin(tmp_path)
    project = "owner: shop\nspecs: [specs]\nenvironments:\n  dev: {servers: nats://127.0.0.1:1}\n"
    push_commit(work, bare, {"reconcile.yaml": project, "specs/orders.yaml": ORDERS}, "A")
    git = HangingGit(bare)
    git.hang.set()
    port = unused_port()
    args = ["--git", git.url, "--all-envs", "--listen", f"127.0.0.1:{port}"]
    agent = agent_process([*args, "--log-format", "json"], cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        assert git.entered.wait(30), "the agent never fetched"
        assert _get_eventually(f"{base}/healthz") == (200, b"ok\n")
        status, body = _get_eventually(f"{base}/readyz")
        assert status == 503 and b"fetching the first commit" in body, body
        git.release.set()
        git.hang.clear()
        run_until = time.monotonic() + 30
        while b"dev" not in _get_eventually(f"{base}/status")[1]:
            assert time.monotonic() < run_until, "the environments never served"
            time.sleep(0.1)
        agent.send_signal(signal.SIGTERM)
        _, rest = agent.communicate(timeout=10)
    finally:
        if agent.poll() is None:
            agent.kill()
        git.close()
    assert agent.returncode == 0, rest
    assert len([x for x in rest.splitlines() if '"event": "listening"' in x]) == 1, rest


def _get_eventually(url: str) -> tuple[int, bytes]:
    """``GET url`` (status, body), asked again while nothing listens (at most 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
