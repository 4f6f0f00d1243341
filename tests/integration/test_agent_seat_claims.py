"""Agents of different processes (two shards, two single-environment agents) healing two
environments that write in one account (one server named ``127.0.0.1`` and
``localhost``, or two users of one account: the project file's text differs): the seat
each environment took is claimed on the server (reconciler.agent.claims), so the second
to seat itself is refused and heals nothing; one environment served by two agents is
not refused; the claim of an agent killed goes stale and the other takes the seat, that
of an agent stopped is deleted and the other takes it at once."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_harness import (
    Other,
    git_agent,
    lines,
    one_server_by_two_names,
    stop_all,
    stopped,
    wait_for_line,
)
from cli_runner import cleaned_environ, reconcile
from servers import Cluster, NatsServer, write
from test_agent_envs import _drift, _healed, _names_one_per_shard
from test_agent_git import origin, push_commit

from reconciler.agent.claims import CLAIMED, TTL_FLOOR, TTL_VARIABLE, Claim, SeatClaim, ttl_for
from reconciler.agent.logs import Log
from reconciler.agent.seats import claimed_error, seat_of
from reconciler.errors import ReconcileError, RequestTimeout, SpecError
from reconciler.identity import LOCK_BUCKET
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.model.timestamps import rfc3339
from reconciler.specs.project import load_project

COPIED = "copied"
DECLARED = "orders as declared"
_ORDERS = (
    f'kind: Stream\nname: ORDERS\nsubjects: ["orders.>"]\nmax_msgs: 1000\ndescription: {DECLARED}\n'
)
_COPY = f"kind: Stream\nname: ORDERS\ndescription: {COPIED}\n"


def _project(folder: Path, url: str) -> tuple[str, str]:
    """Two environments, ``zero`` (shard 0 of 2) naming the server ``127.0.0.1`` and
    ``one`` (shard 1) naming it ``localhost``, ``one`` declaring ORDERS otherwise."""
    zero, one = _names_one_per_shard()
    (folder / "specs").mkdir()
    write(folder / "specs", _ORDERS, "orders.yaml")
    (folder / "overlays").mkdir()
    write(folder / "overlays", _COPY, "o.yaml")
    one_server_by_two_names(folder, url, zero, one)
    return zero, one


def _agent(
    which: list[str],
    *,
    cwd: Path,
    log: Path,
    ttl: float | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """``reconcile watch --mode heal`` of ``which`` (``--shard 0/2``, ``--env NAME``) as its
    own process (``env`` added to its environment), its JSON log into ``log``, planning
    every second; a claim lasting ``ttl`` seconds when given."""
    args = ["--mode", "heal", "--interval", "1s", "--listen", "127.0.0.1:0"]
    added = dict(env or {}) | ({TTL_VARIABLE: str(ttl)} if ttl is not None else {})
    env = cleaned_environ(added)
    return subprocess.Popen(
        [sys.executable, "-m", "reconciler", "watch", *args, "--log-format", "json", *which],
        cwd=cwd,
        env=env,
        stderr=log.open("w"),
        text=True,
    )


def _refused_by(other: str) -> Any:
    return lambda line: (
        line["event"] == "error" and f"writes where environments.{other} " in line["message"]
    )


def _status(log: Path) -> dict[str, Any]:
    """The agent's /status (its address read from its log)."""
    (line,) = wait_for_line(log, lambda line: line["event"] == "listening", "listening")
    url = str(line["message"]).removesuffix("/metrics") + "/status"
    with urllib.request.urlopen(url, timeout=10) as reply:
        body: dict[str, Any] = json.loads(reply.read())
    return body


async def _described(url: str) -> tuple[str, int]:
    async with Other.connect(url, name="checker") as bob:
        info = await bob.info("ORDERS")
    return str(info["config"].get("description")), int(info["state"]["messages"])


async def _publish(url: str, n: int) -> None:
    async with Other.connect(url) as alice:
        await alice.publish("orders.new", n)


async def _claims(url: str) -> list[dict[str, Any]]:
    """The seat claims in the tool's bucket (raw KV reads, as another client makes them;
    a key deleted left out)."""
    async with Other.connect(url, name="checker") as bob:
        stream = f"KV_{LOCK_BUCKET}"
        info = await bob.api(f"STREAM.INFO.{stream}", {"subjects_filter": f"$KV.{LOCK_BUCKET}.>"})
        subjects = sorted(info["state"].get("subjects") or {})
        found = []
        for subject in subjects:
            if subject.startswith(f"$KV.{LOCK_BUCKET}.seat-"):
                reply = await bob.api(f"STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
                if reply["message"].get("data"):
                    found.append(json.loads(base64.b64decode(reply["message"]["data"])))
        return found


def _heals(log: Path, env: str | None) -> int:
    """ORDERS healed in ``env`` (None: a single-environment agent's log, no ``env``)."""
    return sum(
        1
        for line in lines(log.read_text())
        if line["event"] == "change"
        and line.get("env") == env
        and line["resource"] == "Stream ORDERS"
        and line["state"] == "healed"
    )


def test_the_second_shard_to_seat_itself_is_refused_and_heals_nothing(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """Shard 0 (``zero``) seats itself and heals; shard 1 (``one``, the same server as
    ``localhost``) is refused at its line naming ``zero`` (its log, its /status), again
    and again, and never heals: messages published stay, a change by hand is repaired to
    ``zero``'s spec only."""
    url = clean_server.url
    zero, one = _project(tmp_path, url)
    first, second = tmp_path / "shard0.log", tmp_path / "shard1.log"
    agents = [_agent(["--all-envs", "--shard", "0/2"], cwd=tmp_path, log=first)]
    try:
        wait_for_line(first, _healed(zero), f"shard 0 creates ORDERS in {zero}")
        agents.append(_agent(["--all-envs", "--shard", "1/2"], cwd=tmp_path, log=second))
        refusal = wait_for_line(second, _refused_by(zero), f"{one} refused, naming {zero}")
        assert "reconcile.yaml:6" in refusal[0]["message"], refusal[0]
        assert refusal[0].get("env") == one, refusal[0]
        status = _status(second)["environments"][one]
        assert f"writes where environments.{zero} (reconcile.yaml:4)" in status["error"]
        assert status["ready"] is False

        run(_publish(url, 10))
        run(_drift(url, description="changed by hand"))
        wait_for_line(first, lambda line: _heals(first, zero) > 1, f"{zero} heals the change")
        seen = len(wait_for_line(second, _refused_by(zero), "refused"))
        wait_for_line(
            second,
            lambda line: len([x for x in lines(second.read_text()) if _refused_by(zero)(x)]) > seen,
            f"{one} refused again after the change",
        )
        assert run(_described(url)) == (DECLARED, 10)  # zero's spec only, nothing recreated
        assert _heals(second, one) == 0
        assert not [x for x in lines(second.read_text()) if x["event"] == "cycle"]
        assert [c["env"] for c in run(_claims(url))] == [zero]
    finally:
        stop_all(agents)


def test_one_environment_served_by_two_agents_is_not_refused(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """Two agents of shard 0 (an old pod still stopping beside its successor): one
    claim, of their environment, and neither refused; a change is healed."""
    url = clean_server.url
    zero, _ = _project(tmp_path, url)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    agents = [_agent(["--all-envs", "--shard", "0/2"], cwd=tmp_path, log=log) for log in logs]
    try:
        for log in logs:
            wait_for_line(
                log,
                lambda line: line["event"] == "cycle" and line.get("env") == zero,
                "a cycle of each agent",
            )
        run(_drift(url, description="changed by hand"))
        for log in logs:  # both cycle again after the change (renewing the one claim)
            seen = len([x for x in lines(log.read_text()) if x["event"] == "cycle"])
            wait_for_line(
                log,
                lambda line, log=log, seen=seen: (
                    len([x for x in lines(log.read_text()) if x["event"] == "cycle"]) > seen + 1
                ),
                "two more cycles",
            )
        assert run(_described(url))[0] == DECLARED
        for log in logs:
            assert not [x for x in lines(log.read_text()) if "writes where" in str(x["message"])]
            assert _status(log)["environments"][zero]["ready"] is True
        assert [c["env"] for c in run(_claims(url))] == [zero]
    finally:
        stop_all(agents)


def test_a_killed_agents_claim_goes_stale_and_the_other_takes_the_seat(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """Two single-environment agents (``--env``): the second is refused while the first
    renews its claim; the first killed (SIGKILL: no goodbye), its claim goes stale after
    its short TTL and the second takes the seat and heals ``one``'s spec."""
    url = clean_server.url
    zero, one = _project(tmp_path, url)
    first, second = tmp_path / "zero.log", tmp_path / "one.log"
    agents = [_agent(["--env", zero], cwd=tmp_path, log=first, ttl=3)]
    try:
        wait_for_line(first, lambda line: _heals(first, None) > 0, f"ORDERS created in {zero}")
        agents.append(_agent(["--env", one], cwd=tmp_path, log=second, ttl=3))
        wait_for_line(second, _refused_by(zero), f"{one} refused, naming {zero}")
        assert f"environments.{zero}" in str(_status(second)["error"])
        assert run(_described(url))[0] == DECLARED
        agents[0].send_signal(signal.SIGKILL)
        agents[0].wait(10)
        wait_for_line(second, lambda line: _heals(second, None) > 0, f"{one} takes the seat")
        assert run(_described(url))[0] == COPIED
        assert [c["env"] for c in run(_claims(url))] == [one]
    finally:
        stop_all(agents)


def test_a_forged_claim_can_only_refuse_and_its_name_is_escaped(tmp_path: Path) -> None:
    """What a claim read back says is untrusted: an unreadable one is another's that
    never goes stale; a name with control characters is printed escaped; a name of the
    project is said at its line."""
    zero, one = _project(tmp_path, "nats://127.0.0.1:4222")
    peers = load_project(tmp_path / "reconcile.yaml").environments
    unreadable = Claim.from_bytes(b"\x1b[2J not json")
    assert unreadable.env != one and not unreadable.stale(1e12)
    forged = "evil\x1b[2J\nenvironments.x"
    said = str(claimed_error(peers[one], forged, CLAIMED, peers))
    assert "\x1b" not in said and "\n" not in said, said
    assert "writes where environments.'evil\\x1b[2J\\nenvironments.x' does" in said, said
    named = str(claimed_error(peers[one], zero, CLAIMED, peers))
    assert f"writes where environments.{zero} (" in named, named
    assert "reconcile.yaml:4) does (another agent heals it" in named, named
    stored = Claim(one, 10.0, 20.0)
    assert Claim.from_bytes(stored.to_bytes()) == stored and stored.stale(20.0)
    assert ttl_for(1.0, "") == TTL_FLOOR and ttl_for(600.0, "") == 1800.0
    assert ttl_for(1.0, "2.5") == 2.5
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(ReconcileError):
            ttl_for(1.0, bad)


def test_a_server_that_does_not_say_the_seat_heals_as_before_said_once(
    server_factory: Any, tmp_path: Path
) -> None:
    """A user not allowed to ask ``$SYS.REQ.USER.INFO``: the seat is not told, so it is
    not claimed; the agent says so once (not at every cycle) and heals as before."""
    deny = {"publish": {"deny": ["$SYS.REQ.USER.INFO"]}}
    server = server_factory(users=[{"user": "a", "password": "pw-a", "permissions": deny}])
    zero, _ = _names_one_per_shard()
    (tmp_path / "specs").mkdir()
    write(tmp_path / "specs", "kind: Stream\nname: ORDERS\nsubjects: [orders]\n", "o.yaml")
    project = (
        f"owner: shop\nspecs: [specs]\nenvironments:\n  {zero}:\n    servers: {server.url}\n"
        "    user: a\n    password: {env: TEAM_A_PASSWORD}\n"
    )
    write(tmp_path, project, "reconcile.yaml")
    log = tmp_path / "agent.log"
    agent = _agent(["--env", zero], cwd=tmp_path, log=log, env={"TEAM_A_PASSWORD": "pw-a"})
    try:
        wait_for_line(log, lambda line: _heals(log, None) > 0, "ORDERS created")
        wait_for_line(
            log,
            lambda line: len([x for x in lines(log.read_text()) if x["event"] == "cycle"]) >= 3,
            "three cycles",
        )
        said = [x for x in lines(log.read_text()) if "seat not claimed" in str(x["message"])]
        assert len(said) == 1, said
        assert "pw-a" not in log.read_text()
    finally:
        stop_all([agent])


@pytest.mark.cluster
def test_on_a_cluster_the_seat_is_claimed_in_the_locks_three_replica_bucket(
    cluster: Cluster, tmp_path: Path, run: Any
) -> None:
    """On a cluster the claim is written in the tool's bucket, which keeps the three
    replicas the apply lock gives it there (the claim, made before the first heal, makes
    the bucket as the lock does when the account's lineage has not made it already)."""
    zero, _ = _project(tmp_path, cluster.url)
    log = tmp_path / "agent.log"
    agent = _agent(["--env", zero], cwd=tmp_path, log=log)
    try:
        wait_for_line(log, lambda line: _heals(log, None) > 0, "ORDERS created")
        assert [c["env"] for c in run(_claims(cluster.url))] == [zero]
        assert run(_bucket_replicas(cluster.url)) == 3
    finally:
        stop_all([agent])


async def _bucket_replicas(url: str) -> int:
    async with Other.connect(url, name="checker") as bob:
        info = await bob.api(f"STREAM.INFO.KV_{LOCK_BUCKET}")
    return int(info["config"]["num_replicas"])


@pytest.mark.cluster
def test_a_seat_the_cluster_cannot_tell_yet_is_asked_again_never_healed_unchecked(
    tmp_path: Path, run: Any
) -> None:
    """Shard 0 holds the seat's claim; two of the cluster's three nodes stop (the tool's
    bucket has no leader: the lineage and the claim cannot be read in time), and shard 1
    connects to the node left then, as a pod restarted during a rolling restart of the
    cluster does. The seat it could not read is asked again, not left out for the
    connection's life: once the nodes are back it is refused naming ``zero`` and never
    heals ``one``'s spec beside shard 0."""
    cluster = Cluster(tmp_path / "cluster").start()
    agents: list[subprocess.Popen[str]] = []
    try:
        url = cluster.nodes[0].url
        zero, one = _project(tmp_path, url)
        first, second = tmp_path / "shard0.log", tmp_path / "shard1.log"
        agents.append(_agent(["--all-envs", "--shard", "0/2"], cwd=tmp_path, log=first, ttl=600))
        wait_for_line(first, _healed(zero), f"shard 0 creates ORDERS in {zero}")
        for node in cluster.nodes[1:]:
            node.stop()
        shard1 = ["--all-envs", "--shard", "1/2", "--timeout", "1"]
        agents.append(_agent(shard1, cwd=tmp_path, log=second, ttl=600))
        wait_for_line(
            second,
            lambda line: line.get("env") == one and line["event"] in ("error", "notice"),
            f"{one} connected while the bucket has no leader",
        )
        for node in cluster.nodes[1:]:
            node.start(wait=False)
        for node in cluster.nodes[1:]:
            node.wait_ready(jetstream=False)
        cluster.wait_for_meta_leader()
        wait_for_line(
            second,
            lambda line: _refused_by(zero)(line) or _healed(one)(line),
            f"{one} refused naming {zero} once the cluster is back",
        )
        assert _heals(second, one) == 0, second.read_text()[-3000:]
        assert "seat not claimed" not in second.read_text()
        assert run(_described(url))[0] == DECLARED
        assert [c["env"] for c in run(_claims(url))] == [zero]
    finally:
        stop_all(agents)
        cluster.stop()


def test_a_claim_that_cannot_be_read_in_time_is_asked_again_not_left_out(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """The seat told, then the server hangs while the claim is read (a leader being
    elected, a loaded node): the claim is asked again at the next connection (an error
    the connection fails with), never left out for the connection's life as a bucket the
    user may not write is (that healed unchecked beside the shard holding the seat)."""
    server = server_factory()
    zero, _ = _project(tmp_path, server.url)
    project = load_project(tmp_path / "reconcile.yaml")
    said = io.StringIO()
    claim = SeatClaim(Log("json", out=said), 1.0)

    async def take_while_hung() -> None:
        async with open_client(ConnectionOptions(servers=server.url, timeout=1)) as client:
            found = await seat_of(client)
            assert found is not None and found.user is not None
            server.pause()
            try:
                with pytest.raises(RequestTimeout):
                    await claim.take(
                        client,
                        project.environments[zero],
                        found,
                        "shop",
                        peers=project.environments,
                        write=True,
                    )
            finally:
                server.resume()

    run(take_while_hung())
    assert claim.key is None
    assert "seat not claimed" not in said.getvalue()


@pytest.mark.slow  # waits out a claim's 15 s TTL by design: CI's slow stage
def test_an_agent_taking_its_own_environments_claim_back_renews_it_at_once(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """An agent of ``zero`` restarted finds the claim its previous run left, about to go
    stale (a pod restarted late, a crash loop's back-off; here a short TTL): it is its
    own environment's, so it is taken as it is, and must be renewed at once, not one
    interval later (nothing to heal: no advisory wakes it before). Else it went stale
    while the agent served ``zero``, and the agent of ``one`` (the same seat) took the
    seat from it and healed ``one``'s spec."""
    url = clean_server.url
    zero, one = _project(tmp_path, url)
    first, again, second = tmp_path / "zero.log", tmp_path / "zero2.log", tmp_path / "one.log"
    previous = _agent(["--env", zero], cwd=tmp_path, log=first, ttl=15)
    agents = [previous]
    try:
        wait_for_line(first, lambda line: _heals(first, None) > 0, f"ORDERS created in {zero}")
        previous.send_signal(signal.SIGKILL)  # a crash: no goodbye (a stop deletes it)
        previous.wait(10)
        (left,) = run(_claims(url))
        assert left["env"] == zero
        restarted = ["--env", zero, "--interval", "30s"]
        agents.append(_agent(restarted, cwd=tmp_path, log=again, ttl=60))
        wait_for_line(again, lambda line: line["event"] == "cycle", f"{zero} in sync again")
        agents.append(_agent(["--env", one], cwd=tmp_path, log=second, ttl=60))
        later = rfc3339(Claim.from_bytes(json.dumps(left).encode()).expires_at + 2)
        wait_for_line(
            second,
            lambda line: line["time"] > later or _heals(second, None) > 0,
            f"{one} tried after the claim left by {zero}'s previous run would be stale",
        )
        assert _heals(second, None) == 0, second.read_text()[-3000:]
        refused = [x for x in lines(second.read_text()) if _refused_by(zero)(x)]
        assert refused and refused[-1]["time"] > later, second.read_text()[-3000:]
        assert run(_described(url))[0] == DECLARED
        assert [c["env"] for c in run(_claims(url))] == [zero]
        assert not [x for x in lines(again.read_text()) if "writes where" in str(x["message"])]
    finally:
        stop_all(agents)


OBSERVED = "    lifecycle: {mode: observe}\n"


def _one_refused_once_zero_seated(
    folder: Path, url: str, serve: Callable[[str], None], start: Callable[[], Any]
) -> tuple[str, str, str, Path]:
    """``zero`` and ``one`` in one seat, ``one`` observed at first (so ``zero`` takes
    the seat: two environments connecting at once race for it); ``serve(text)`` makes
    the project file ``text`` the one served (an edit, a commit), ``start()`` the agent.
    Once ``zero`` healed, ``one``'s observe is lifted: it takes the seat before its next
    cycle, refused naming ``zero`` (it healed unchecked beside it: the two undid each
    other's heals). The names, the project file (``one`` observed no more) and the log."""
    zero, one = _names_one_per_shard()
    one_server_by_two_names(folder, url, zero, one)
    text = (folder / "reconcile.yaml").read_text()
    ones = "    overlays: [overlays]\n"
    serve(text.replace(ones, ones + OBSERVED))
    log = folder / "agent.log"
    start()
    wait_for_line(log, lambda line: _heals(log, zero) > 0, f"ORDERS created in {zero}")
    serve(text)
    wait_for_line(log, _refused_by(zero), f"{one} refused, naming {zero}")
    assert _heals(log, one) == 0, log.read_text()[-3000:]
    return zero, one, text, log


def _files(folder: Path) -> dict[str, str]:
    (folder / "specs").mkdir()
    (folder / "overlays").mkdir()
    files = {"specs/orders.yaml": _ORDERS, "overlays/o.yaml": _COPY}
    for path, text in files.items():
        (folder / path).write_text(text)
    return files


@pytest.mark.slow  # an attack's regression test: .ci/run's second stage
def test_the_seat_follows_an_edit_of_the_environments_lifecycle(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """One process: an edit lifting ``one``'s observe gets it refused
    (:func:`_one_refused_once_zero_seated`); an edit then putting ``zero`` in observe
    (the refusal's own advice) frees the seat: ``one`` takes it and heals its spec (it
    stayed refused until a restart)."""
    url = clean_server.url
    _files(tmp_path)
    agents: list[subprocess.Popen[str]] = []

    def serve(text: str) -> None:
        write(tmp_path, text, "reconcile.yaml")

    def start() -> None:
        agents.append(_agent(["--all-envs"], cwd=tmp_path, log=tmp_path / "agent.log"))

    try:
        _, one, text, log = _one_refused_once_zero_seated(tmp_path, url, serve, start)
        assert run(_described(url))[0] == DECLARED
        zeros = f"    servers: {url}\n"
        serve(text.replace(zeros, zeros + OBSERVED))
        wait_for_line(log, lambda line: _heals(log, one) > 0, f"{one} takes the seat")
        assert run(_described(url))[0] == COPIED
        assert [c["env"] for c in run(_claims(url))] == [one]
    finally:
        stop_all(agents)


@pytest.mark.slow  # an attack's regression test: .ci/run's second stage
def test_a_commit_removing_the_environment_holding_the_seat_frees_it(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """``--git --all-envs``: ``one`` refused, ``zero`` holding the seat (each by a
    commit); a commit removes ``zero`` from the project file (the refusal's other way
    out). ``zero``'s cycles fail from then on (it heals nothing) and it leaves the seat:
    ``one`` takes it and heals its spec, without a restart (``zero`` kept the seat and
    renewed its claim, which would then refuse ``one`` for three intervals after a
    restart: three hours here)."""
    url = clean_server.url
    bare, work = origin(tmp_path)
    files = _files(tmp_path)
    agents: list[subprocess.Popen[str]] = []

    def serve(text: str) -> None:
        push_commit(work, bare, {"reconcile.yaml": text, **files}, "project")

    def start() -> None:
        agents.append(git_agent(bare, cwd=tmp_path, log=tmp_path / "agent.log"))

    try:
        zero, one, text, log = _one_refused_once_zero_seated(tmp_path, url, serve, start)
        kept = text.replace(f"  {zero}:\n    servers: {url}\n", "")
        assert kept != text
        serve(kept)
        wait_for_line(log, lambda line: _heals(log, one) > 0, f"{one} takes the seat")
        assert run(_described(url))[0] == COPIED
        assert [c["env"] for c in run(_claims(url))] == [one]
    finally:
        stop_all(agents)


@pytest.mark.slow  # an attack's regression test: .ci/run's second stage
def test_an_environment_moved_off_its_seat_frees_it_at_once(
    server_factory: Any, tmp_path: Path
) -> None:
    """One process, ``one`` refused (:func:`_one_refused_once_zero_seated`); an edit
    moves ``zero`` to a server of its own (the refusal's advice: its own account).
    ``zero`` leaves the seat it held as it connects there: ``one`` takes it at its next
    try, not once ``zero``'s claim went stale (three intervals, at least a minute)."""
    first, second = server_factory(), server_factory()
    _files(tmp_path)
    agents: list[subprocess.Popen[str]] = []

    def serve(text: str) -> None:
        write(tmp_path, text, "reconcile.yaml")

    def start() -> None:
        agents.append(_agent(["--all-envs"], cwd=tmp_path, log=tmp_path / "agent.log"))

    try:
        zero, one, text, log = _one_refused_once_zero_seated(tmp_path, first.url, serve, start)
        serve(text.replace(f"servers: {first.url}\n", f"servers: {second.url}\n"))
        wait_for_line(log, lambda line: _heals(log, one) > 0, f"{one} takes the seat", 20)
        wait_for_line(log, lambda line: _heals(log, zero) > 1, f"{zero} heals where it moved")
    finally:
        stop_all(agents)


async def _delete_bucket(url: str) -> None:
    async with Other.connect(url, name="checker") as bob:
        await bob.api(f"STREAM.DELETE.KV_{LOCK_BUCKET}")


@pytest.mark.slow  # an attack's regression test: .ci/run's second stage
def test_a_claim_deleted_mid_run_is_taken_again_before_the_next_heal(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """``zero`` holds the seat (planning on advisories only: an interval of an hour); the
    claim bucket is deleted and ORDERS changed by hand. Its renewal fails, and was let
    pass: ``zero`` healed the change holding no claim, so ``one`` started then took the
    seat and healed its own spec too (two heals of one change). Now the claim is taken
    again before the heal, said once, and ``one`` is refused."""
    url = clean_server.url
    zero, one = _project(tmp_path, url)
    first, second = tmp_path / "zero.log", tmp_path / "one.log"
    agents = [_agent(["--env", zero, "--interval", "1h"], cwd=tmp_path, log=first)]
    try:
        wait_for_line(first, lambda line: _heals(first, None) > 0, f"ORDERS created in {zero}")
        run(_delete_bucket(url))
        run(_drift(url, description="changed by hand"))
        wait_for_line(first, lambda line: _heals(first, None) > 1, f"{zero} heals the change")
        agents.append(_agent(["--env", one], cwd=tmp_path, log=second))
        wait_for_line(
            second,
            lambda line: _refused_by(zero)(line) or _heals(second, None) > 0,
            f"{one} refused (or healing)",
        )
        assert _heals(second, None) == 0, second.read_text()[-3000:]
        assert run(_described(url))[0] == DECLARED
        assert [c["env"] for c in run(_claims(url))] == [zero]
        said = [x for x in lines(first.read_text()) if "could not be renewed" in str(x["message"])]
        assert len(said) == 1, said
    finally:
        stop_all(agents)


@pytest.mark.slow  # an attack's regression test: .ci/run's second stage
def test_a_renewal_not_written_takes_the_claim_again_or_fails(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """Two agents' claims of one seat on a real server: ``zero`` holds it, ``one`` is
    refused. The bucket deleted, ``zero``'s renewal was let pass as a blip, so ``one``
    took the seat while ``zero`` went on healing. Now the renewal takes the claim again
    (``one`` refused); a renewal the server does not answer raises (the cycle does not
    run: the connection is opened again and the seat asked then)."""
    server = server_factory()
    zero, one = _project(tmp_path, server.url)
    envs = load_project(tmp_path / "reconcile.yaml").environments
    holder, other = (SeatClaim(Log("json", out=io.StringIO()), 1.0) for _ in range(2))

    async def scenario() -> None:
        async with open_client(ConnectionOptions(servers=server.url, timeout=1)) as client:
            found = await seat_of(client)

            async def take(claim: SeatClaim, env: str) -> None:
                await claim.take(client, envs[env], found, "shop", peers=envs, write=True)

            await take(holder, zero)
            await holder.renew(client)  # the first, skipped: just written
            await _delete_bucket(server.url)
            await holder.renew(client)
            with pytest.raises(SpecError, match=f"writes where environments.{zero} "):
                await take(other, one)
            server.pause()
            try:
                with pytest.raises(RequestTimeout):
                    await holder.renew(client)
            finally:
                server.resume()

    run(scenario())


@pytest.mark.slow  # an attack's regression test: .ci/run's second stage
def test_an_edit_of_the_owner_moves_the_claim_to_its_key(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """The claim's key holds the project's owner. ``zero`` holds the seat; the project
    file's owner is edited: ``zero`` went on renewing the old owner's key, so an agent
    of ``one`` (of the new owner, as every agent reading that file is) found no claim
    under the new key and took the seat beside it. Now ``zero`` deletes the old claim and
    takes the new key's before its next cycle: ``one`` is refused, one claim is left."""
    url = clean_server.url
    zero, one = _project(tmp_path, url)
    log = tmp_path / "zero.log"
    agents = [_agent(["--env", zero], cwd=tmp_path, log=log)]
    try:
        wait_for_line(log, lambda line: _heals(log, None) > 0, f"ORDERS created in {zero}")
        text = (tmp_path / "reconcile.yaml").read_text()
        write(tmp_path, text.replace("owner: shop\n", "owner: shop2\n"), "reconcile.yaml")
        wait_for_line(log, lambda line: _cycles_since_read(log) > 0, "a cycle after the edit")
        envs = load_project(tmp_path / "reconcile.yaml").environments
        assert [c["env"] for c in run(_claims(url))] == [zero]

        async def take_as_one() -> None:
            async with open_client(ConnectionOptions(servers=url)) as client:
                found = await seat_of(client)
                claim = SeatClaim(Log("json", out=io.StringIO()), 1.0)
                await claim.take(client, envs[one], found, "shop2", peers=envs, write=True)

        with pytest.raises(SpecError, match=f"writes where environments.{zero} "):
            run(take_as_one())
    finally:
        stop_all(agents)


def _cycles_since_read(log: Path) -> int:
    """The cycles an agent logged since it last read the project file again."""
    found = lines(log.read_text())
    read = [n for n, line in enumerate(found) if line["event"] == "project"]
    return len([x for x in found[read[-1] :] if x["event"] == "cycle"]) if read else 0


async def _claim_keys(url: str) -> list[str]:
    """The keys of the seat claims in the tool's bucket, deleted ones too."""
    async with Other.connect(url, name="checker") as bob:
        stream = f"KV_{LOCK_BUCKET}"
        info = await bob.api(f"STREAM.INFO.{stream}", {"subjects_filter": f"$KV.{LOCK_BUCKET}.>"})
    prefix = f"$KV.{LOCK_BUCKET}."
    return sorted(s.removeprefix(prefix) for s in info["state"].get("subjects") or {})


async def _taken_over(url: str, env: str) -> None:
    """Each seat claim written over by one of ``env``, fresh for ten minutes (another
    agent took the seat: the claim's revision is no longer the writer's)."""
    keys = [key for key in await _claim_keys(url) if key.startswith("seat-")]
    assert keys
    now = time.time()
    async with Other.connect(url, name="checker") as bob:
        js = bob.nc.jetstream()
        for key in keys:
            await js.publish(f"$KV.{LOCK_BUCKET}.{key}", Claim(env, now, now + 600).to_bytes())


def _first_try(log: Path) -> Any:
    """The first line saying how ``log``'s single-environment agent fared in its seat:
    refused, or a heal."""
    return wait_for_line(
        log,
        lambda line: "writes where" in str(line["message"]) or _heals(log, None) > 0,
        "refused, or healing",
    )


def test_a_stopped_agent_deletes_its_claim_and_another_environment_takes_the_seat(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """An agent of ``zero`` holds the seat (a claim lasting ten minutes); a ``--once``
    run of ``zero`` beside it writes no claim and deletes none. Stopped as Kubernetes
    and systemd stop it (SIGTERM), the agent deletes its claim: an agent of ``one`` (the
    same seat: ``zero`` renamed in a deploy, a shard re-assigned) heals at once. The
    claim was left to go stale, and ``one`` was refused for three intervals."""
    url = clean_server.url
    zero, one = _project(tmp_path, url)
    first, second = tmp_path / "zero.log", tmp_path / "one.log"
    agents = [_agent(["--env", zero], cwd=tmp_path, log=first, ttl=600)]
    try:
        wait_for_line(first, lambda line: _heals(first, None) > 0, f"ORDERS created in {zero}")
        once = reconcile(
            "watch", "--once", "--listen", "off", "--mode", "heal", "--env", zero, cwd=tmp_path
        )
        assert once.returncode == 0, once.stderr
        assert [c["env"] for c in run(_claims(url))] == [zero]
        assert stopped(agents[0]) == 0
        assert run(_claims(url)) == []
        assert "could not be deleted" not in first.read_text()
        agents.append(_agent(["--env", one], cwd=tmp_path, log=second, ttl=600))
        _first_try(second)
        assert _heals(second, None) > 0, second.read_text()[-3000:]
        assert run(_described(url))[0] == COPIED
        assert [c["env"] for c in run(_claims(url))] == [one]
    finally:
        stop_all(agents)


def test_a_stopping_agent_never_deletes_a_claim_another_took_since(
    clean_server: NatsServer, tmp_path: Path, run: Any
) -> None:
    """The claim of ``zero``'s agent (idle: an interval of an hour) is written over by
    one of ``one`` (another agent took the seat meanwhile); stopped, ``zero``'s agent
    deletes its claim only at its own revision: ``one``'s stays."""
    url = clean_server.url
    zero, one = _project(tmp_path, url)
    log = tmp_path / "zero.log"
    agents = [_agent(["--env", zero, "--interval", "1h"], cwd=tmp_path, log=log, ttl=600)]
    try:
        wait_for_line(log, lambda line: _heals(log, None) > 0, f"ORDERS created in {zero}")
        run(_taken_over(url, one))
        assert stopped(agents[0]) == 0
        assert [c["env"] for c in run(_claims(url))] == [one]
    finally:
        stop_all(agents)


def test_a_server_not_answering_never_holds_up_the_stop(
    server_factory: Any, tmp_path: Path
) -> None:
    """The server hangs (SIGSTOP) under an idle agent holding the seat, whose requests
    may take 30 s (``--timeout``): SIGTERM ends it all the same (the harness kills an
    agent not ended 10 s later), its claim left to go stale, said in the log (the
    delete sent may still be done once the server answers again)."""
    server = server_factory()
    zero, _ = _project(tmp_path, server.url)
    log = tmp_path / "zero.log"
    which = ["--env", zero, "--interval", "1h", "--timeout", "30"]
    agent = _agent(which, cwd=tmp_path, log=log, ttl=600)
    try:
        wait_for_line(log, lambda line: _heals(log, None) > 0, f"ORDERS created in {zero}")
        server.pause()
        try:
            assert stopped(agent) == 0
        finally:
            server.resume()
        said = [x for x in lines(log.read_text()) if "could not be deleted" in str(x["message"])]
        assert len(said) == 1 and "goes stale" in said[0]["message"], said
    finally:
        stop_all([agent])


def test_a_claim_another_agent_of_the_environment_renews_is_left_at_a_stop(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """Two agents of ``zero`` share its claim (an old pod stopping beside its successor,
    which found the claim fresh and took it as it is): the one stopping leaves it, said
    in the log (the successor renews it; deleted, another environment of the seat could
    take it until the successor's next renewal); once no other agent of ``zero`` wrote
    it for a claim's life, a stop deletes it."""
    server = server_factory()
    zero, _ = _project(tmp_path, server.url)
    envs = load_project(tmp_path / "reconcile.yaml").environments
    said = io.StringIO()
    old, new = SeatClaim(Log("json", out=io.StringIO()), 1.0), SeatClaim(Log("json", out=said), 1.0)

    async def scenario() -> None:
        async with open_client(ConnectionOptions(servers=server.url)) as client:
            found = await seat_of(client)
            for claim in (old, new):
                await claim.take(client, envs[zero], found, "shop", peers=envs, write=True)
            await new.stopping(client)
            assert [c["env"] for c in await _claims(server.url)] == [zero]
            await old.renew(client)  # the first, skipped: just written
            await old.renew(client)
            await old.stopping(client)  # it never saw another agent write it
            assert await _claims(server.url) == []

    run(scenario())
    assert "left to go stale: another agent of this environment" in said.getvalue()


def test_a_successor_writing_the_shared_claim_alone_leaves_it_at_a_stop(
    server_factory: Any, tmp_path: Path, run: Any
) -> None:
    """Two agents of ``zero`` share its claim for longer than a claim's life: the
    successor's renewals are written, the old pod's fail (the revision moved) and it
    found the claim fresh, its own environment's, and wrote nothing. The successor saw no
    other agent write it since it connected, so its stop (a rollout rolled back) deleted
    the claim the old pod still heals under: another environment of the seat could take
    it until the old pod's next renewal. The old pod now renews it too."""
    server = server_factory()
    zero, _ = _project(tmp_path, server.url)
    envs = load_project(tmp_path / "reconcile.yaml").environments
    old, new = (
        SeatClaim(Log("json", out=io.StringIO()), 1.0),
        SeatClaim(Log("json", out=io.StringIO()), 1.0),
    )
    for claim in (old, new):
        claim.ttl = 0.5  # a claim's life, renewed every 0.2 s below

    async def scenario() -> list[dict[str, Any]]:
        async with open_client(ConnectionOptions(servers=server.url)) as client:
            found = await seat_of(client)
            for claim in (old, new):
                await claim.take(client, envs[zero], found, "shop", peers=envs, write=True)
            await old.renew(client)  # the first, skipped: just written
            for _ in range(6):  # 1.2 s: more than the claim's life since the successor's take
                await new.renew(client)
                await old.renew(client)
                await asyncio.sleep(0.2)
            await new.stopping(client)
            return await _claims(server.url)

    assert [c["env"] for c in run(scenario())] == [zero]


def test_two_users_of_one_account_are_one_seat(server_factory: Any, tmp_path: Path) -> None:
    """One account, two users: ``zero`` connects as ``a``, ``one`` as ``b`` (the
    project file's text differs: other credentials), both of the owner ``shop``. A
    stream is the account's, whichever user writes it: the seat was the user's too, so
    both healed ORDERS, each undoing the other's heal until the flapping hold. The
    second is refused, naming the first, while the first holds the seat."""
    users = [{"user": "a", "password": "pw-a"}, {"user": "b", "password": "pw-b"}]
    server = server_factory(config={"accounts": {"APP": {"jetstream": "enabled", "users": users}}})
    zero, one = _names_one_per_shard()
    _files(tmp_path)
    project = (
        f"owner: shop\nspecs: [specs]\nenvironments:\n"
        f"  {zero}:\n    servers: {server.url}\n    user: a\n    password: {{env: PW_A}}\n"
        f"  {one}:\n    servers: {server.url}\n    user: b\n    password: {{env: PW_B}}\n"
        "    overlays: [overlays]\n"
    )
    write(tmp_path, project, "reconcile.yaml")
    secrets = {"PW_A": "pw-a", "PW_B": "pw-b"}
    first, second = tmp_path / "zero.log", tmp_path / "one.log"
    agents = [_agent(["--env", zero], cwd=tmp_path, log=first, ttl=600, env=secrets)]
    try:
        wait_for_line(first, lambda line: _heals(first, None) > 0, f"ORDERS created in {zero}")
        agents.append(_agent(["--env", one], cwd=tmp_path, log=second, ttl=600, env=secrets))
        (said,) = _first_try(second)[:1]
        assert _refused_by(zero)(said), second.read_text()[-3000:]
        assert "reconcile.yaml:8" in said["message"], said
        assert _heals(second, None) == 0
        assert not [x for x in lines(first.read_text()) if "writes where" in str(x["message"])]
        for log in (first, second):
            assert "pw-a" not in log.read_text() and "pw-b" not in log.read_text()
    finally:
        stop_all(agents)
