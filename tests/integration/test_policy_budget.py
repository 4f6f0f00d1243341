"""A policy rule cannot stop CI or the agent (issue 39, docs/policy.md#budgets): a rule
too costly by its shape is refused at load, FILE:LINE; one that goes over its budget
while evaluated is stopped and is a finding naming the rule; the agent keeps answering
/healthz and /readyz meanwhile, and SIGTERM ends it.

Each rule here ran for minutes before (or crashed the process): the generous timeouts
fail without the bounds, never a tight wall-clock assertion."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_front_doors import STREAM, _messages, _publish

from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions

pytestmark = pytest.mark.integration

#: 200 regexes compiled anew on each call, 0.4 s each: over a minute per resource, and
#: within every static bound (no comprehension, 8,000 characters, 800 operators).
SLOW = " && ".join(["!resource.name.matches('\\\\pL{150}')"] * 200)
#: Eight nested comprehensions over ten elements: 10^8 iterations per resource.
NESTED = "true"
for _level in range(8):
    NESTED = f"[0, 1, 2, 3, 4, 5, 6, 7, 8, 9].all(x{_level}, {NESTED})"


def _policy(tmp_path: Path, expr: str, level: str = "deny") -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "rules:\n"
        "  - id: named-upper-case\n"
        "    level: warn\n"
        "    message: names are upper case\n"
        "    expr: resource.name.matches('^[A-Z]+$')\n"
        "  - id: costly\n"
        f"    level: {level}\n"
        "    message: a rule that costs too much\n"
        f"    expr: {json.dumps(expr)}\n",
        encoding="utf-8",
    )
    return path


def _specs(tmp_path: Path, max_msgs: int = 1000) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    (specs / "orders.yaml").write_text(STREAM.format(max_msgs=max_msgs), encoding="utf-8")
    (specs / "more.yaml").write_text(
        "".join(f"---\nkind: Stream\nname: more{n}\nsubjects: [more{n}]\n" for n in range(3)),
        encoding="utf-8",
    )
    return specs


def test_a_rule_over_its_budget_is_a_finding_and_apply_changes_nothing(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """ORDERS holds 20 messages; the specs tighten it to 10 (a loss apply would make with
    --allow-data-loss). The costly deny rule is stopped at its budget, named with its
    FILE:LINE: plan exits 3, and apply refuses with the 20 messages kept."""
    specs = _specs(tmp_path)
    options = ConnectionOptions(servers=clean_server.url)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(clean_server.url, 20))
    _specs(tmp_path, max_msgs=10)
    policy = _policy(tmp_path, SLOW)
    where = ("--server", clean_server.url, "--policy", str(policy))

    planned = reconcile("plan", str(specs), *where, cwd=tmp_path)  # 120 s timeout: minutes before

    assert planned.returncode == 3, planned.stderr
    assert "Traceback" not in planned.stderr
    assert f"deny costly: a rule that costs too much  ({policy}:9)" in planned.stdout
    assert "over its evaluation budget" in planned.stdout
    assert "skipped: the rule went over its evaluation budget" in planned.stdout  # once only
    assert "warn named-upper-case" in planned.stdout  # the other rule still evaluated
    assert "Stream more0 (unchanged)" in planned.stdout

    applied = reconcile("apply", str(specs), *where, "--allow-data-loss", "--yes", cwd=tmp_path)
    assert applied.returncode == 3, applied.stderr
    assert "costly" in applied.stderr and "nothing was changed" in applied.stderr
    assert run(_messages(clean_server.url)) == 20


def test_a_warn_rule_over_its_budget_warns_and_plan_succeeds(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = _specs(tmp_path)
    policy = _policy(tmp_path, SLOW, level="warn")
    planned = reconcile(
        "plan", str(specs), "--server", clean_server.url, "--policy", str(policy), cwd=tmp_path
    )
    assert planned.returncode == 0, planned.stderr
    assert f"warn costly: a rule that costs too much  ({policy}:9)" in planned.stdout
    assert "over its evaluation budget" in planned.stdout


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        (NESTED, "its comprehensions would take about 10^8 iterations"),
        ("+".join(["1"] * 9000) + " > 0", "nests too deep"),  # 9,000 levels
        ("+".join(["1"] * 30000) + " > 0", "characters long"),  # a segfault before
    ],
    ids=["nested-comprehensions", "deep", "crashed-the-parser"],
)
def test_a_rule_too_costly_by_its_shape_is_refused_at_load(
    clean_server: NatsServer, tmp_path: Path, expr: str, why: str
) -> None:
    specs = _specs(tmp_path)
    policy = _policy(tmp_path, expr)
    for command in (
        ("plan", str(specs), "--server", clean_server.url),
        ("validate", str(specs)),
    ):
        done = reconcile(*command, "--policy", str(policy), cwd=tmp_path)
        assert done.returncode == 1, (command, done.returncode, done.stderr[-300:])
        assert "Traceback" not in done.stderr
        assert f"{policy}:9: rules.1.expr: rule 'costly': " in done.stderr
        assert why in done.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(port: int, path: str) -> int:
    """The status of ``GET path``, raw; raises when the agent does not answer in 10 s."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        head = sock.recv(64)
    return int(head.split()[1])


def test_the_agent_answers_and_stops_while_a_costly_rule_is_evaluated(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = _specs(tmp_path)
    policy = _policy(tmp_path, SLOW)
    port = _free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}
    command = ("watch", str(specs), "--server", clean_server.url, "--policy", str(policy))
    settings = ("--interval", "1s", "--listen", f"127.0.0.1:{port}", "--log-format", "json")
    agent = subprocess.Popen(
        [sys.executable, "-m", "reconciler", *command, *settings],
        cwd=tmp_path,
        env=environ,
        stderr=subprocess.PIPE,
        text=True,
    )
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(agent.stderr or ()), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any('"listening"' in line for line in log):
            assert time.monotonic() < deadline and agent.poll() is None, log
            time.sleep(0.1)
        answers = []
        for _ in range(10):  # while the first cycles evaluate the rule
            answers += [_get(port, "/healthz"), _get(port, "/readyz")]
            time.sleep(0.5)
        assert set(answers) <= {200, 503}, answers
        deadline = time.monotonic() + 120  # 2 s of CPU, on a busy machine
        while not any('"cycle"' in line for line in log):  # a cycle ends: the rule stopped
            assert time.monotonic() < deadline, log
            time.sleep(0.1)
        assert _get(port, "/healthz") == 200
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=20)  # ignored for minutes before
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    reader.join(5)
    assert agent.returncode == 0, log[-5:]
    assert any('"stopped"' in line for line in log)
    cycles = [json.loads(line) for line in log if '"cycle"' in line]
    assert cycles, log[-5:]
