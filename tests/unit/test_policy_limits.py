"""Budgets of policy rules (docs/policy.md#budgets): the shape a rule may have
(``specs.policy_bounds``, at load) and the evaluation's bounds at run time
(``planning.policy_worker``): a rule over budget is a finding, the rest goes on."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from reconciler.errors import SpecError
from reconciler.model.normalize import desired_config
from reconciler.model.state import LiveState, ServerInfo
from reconciler.planning import policy_worker
from reconciler.planning.plan import build_plan
from reconciler.planning.policy import evaluate
from reconciler.specs.policy import code_of, load_policy
from reconciler.specs.policy_bounds import MAX_ITERATIONS, shape_problem
from reconciler.specs.validate import load_specs

SERVER = ServerInfo(version="2.12.4", api_level=2)
TEN = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
#: 0.4 s per call (a regex compiled anew each time), 30 calls: 12 s per resource.
SLOW = " && ".join(["!resource.name.matches('\\\\pL{150}')"] * 30)


def nested(levels: int, receiver: str = TEN) -> str:
    expr = "true"
    for level in range(levels):
        expr = f"{receiver}.all(x{level}, {expr})"
    return expr


def shape(expr: str) -> str | None:
    return shape_problem(expr, code_of(expr))


@pytest.mark.parametrize(
    "expr",
    [
        "resource.desired.num_replicas >= 3",
        "resource.name.matches('^[A-Z][A-Z0-9_]*$')",
        nested(5),  # 111,110 iterations
        "resource.desired.subjects.all(s, step.fields.exists(f, f != s))",
        "[1, 2, 3].map(x, x * 2).all(y, y > 0)",
        " || ".join(f"resource.name == 'N{n}'" for n in range(700)),  # 702 levels
        "resource.name in [" + ", ".join(f"'N{n}'" for n in range(1000)) + "]",
        "'[[[[(((' + resource.name == ''",  # brackets in strings are not code
    ],
)
def test_rules_of_ordinary_shape_load(expr: str) -> None:
    assert shape(expr) is None


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        (nested(8), "about 10^8 iterations"),
        (nested(7), "about 10^7 iterations"),
        (nested(4, "resource.desired.subjects"), "about 10^8 iterations"),  # 100 each
        (nested(2, "[" + ", ".join(["0"] * 2000) + "]"), "about 4,002,000 iterations"),
        (TEN + ".map(a, " + nested(6) + ")", "10^7"),
        ("+".join(["1"] * 2000), "nests too deep (a syntax tree of about 2,000 levels"),
        ("(" * 600 + "1" + ")" * 600, "nests too deep (a syntax tree of about 1,201 levels"),
        ("(" * 3000 + "1" + ")" * 3000, "nests too deep (a syntax tree of more than 1,000"),
        ("!" * 600 + "x.y" + ".z" * 400, "nests too deep (a syntax tree of about 1,002"),
        ("'" + "x" * 20_001 + "' == ''", "characters long"),
    ],
)
def test_rules_too_costly_by_their_shape_are_refused(expr: str, why: str) -> None:
    problem = shape(expr)
    assert problem is not None and why in problem, problem


def test_a_long_chain_of_macros_is_measured_without_recursion() -> None:
    """990 chained ``map`` calls: the receiver of each is found by a loop (a recursion
    that deep broke Python's limit, a traceback at load)."""
    chain = "[1, 2]" + ".map(x, x)" * 990 + ".all(y, true)"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        assert shape(chain) is None  # 2 iterations per link
    finally:
        sys.setrecursionlimit(limit)


def test_an_expression_of_open_quotes_is_one_syntax_error(tmp_path: Path) -> None:
    """18,000 characters of ``'\\``: every quote opens a literal that never closes
    (``code_of`` took 4 s on it, tried again from each quote; now once through)."""
    path = _policy(tmp_path, ("quotes", "'\\" * 9000))
    with pytest.raises(SpecError) as refused:
        load_policy([path])
    assert str(refused.value).startswith(f"{path}:5: rules.0.expr: rule 'quotes': invalid CEL")
    assert code_of("'\\" * 3) == '""\\'  # the last one left open: to its end


def test_the_refusal_names_file_line_and_rule(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    rules = [("fine", "true"), ("nested", nested(8))]
    path.write_text(
        "rules:\n"
        + "".join(
            f"  - id: {name}\n    level: deny\n    message: m\n    expr: {json.dumps(expr)}\n"
            for name, expr in rules
        ),
        encoding="utf-8",
    )
    with pytest.raises(SpecError) as refused:
        load_policy([path])
    assert str(refused.value).startswith(f"{path}:9: rules.1.expr: rule 'nested': its compre")
    assert f"at most {MAX_ITERATIONS:,}" in str(refused.value)


def test_more_than_a_thousand_rules_are_refused_at_the_first_one_over(tmp_path: Path) -> None:
    rules = [(f"r{n}", "true") for n in range(1001)]
    path = _policy(tmp_path, *rules)
    with pytest.raises(SpecError) as refused:
        load_policy([path])
    (line,) = str(refused.value).splitlines()
    assert line.startswith(f"{path}:{1 + 4 * 1000 + 4}: rules: 1,001 rules in all (at most 1,000)")
    load_policy([_policy(tmp_path, *rules[:1000])])  # a thousand load


def _planned(tmp_path: Path, streams: int) -> tuple[object, list, LiveState]:
    text = "".join(f"---\nkind: Stream\nname: S{n}\nsubjects: [s{n}]\n" for n in range(streams))
    (tmp_path / "specs.yaml").write_text(text, encoding="utf-8")
    specs = load_specs([tmp_path / "specs.yaml"])
    live = LiveState(server=SERVER, streams={"S0": desired_config(specs[0], SERVER)})
    return build_plan(specs, live), specs, live


def _policy(tmp_path: Path, *rules: tuple[str, str]) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "rules:\n"
        + "".join(
            f"  - id: {name}\n    level: deny\n    message: m\n    expr: {json.dumps(expr)}\n"
            for name, expr in rules
        ),
        encoding="utf-8",
    )
    return path


def test_a_rule_over_its_budget_is_stopped_once_and_the_others_evaluate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(policy_worker, "EVALUATION_SECONDS", 0.5)
    plan, specs, live = _planned(tmp_path, 3)
    path = _policy(tmp_path, ("short", "size(resource.name) < 2"), ("slow", SLOW))
    findings = asyncio.run(evaluate(load_policy([path]), plan, specs, live))  # 36 s before
    slow = [(f.ref.name, f.error) for f in findings if f.rule == "slow"]
    assert slow == [
        ("S1", "over its evaluation budget (0.5 s)"),
        ("S2", "skipped: the rule went over its evaluation budget (0.5 s) on Stream S1"),
        ("S0", "skipped: the rule went over its evaluation budget (0.5 s) on Stream S1"),
    ]
    short = sorted(f.ref.name for f in findings if f.rule == "short")
    assert short == ["S0", "S1", "S2"]  # false for each (names of 2), evaluated


def test_what_the_run_budget_leaves_is_a_finding_per_rule_and_resource(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reconciler.planning import policy

    monkeypatch.setattr(policy, "run_budget", lambda evaluations: 0.3)
    plan, specs, live = _planned(tmp_path, 2)
    path = _policy(tmp_path, ("slow", SLOW), ("always", "true"))
    findings = asyncio.run(evaluate(load_policy([path]), plan, specs, live))
    spent = "skipped: the policy's time budget for this run (0 s) was spent"
    assert sorted((f.rule, f.ref.name, f.error) for f in findings) == [
        ("always", "S0", spent),
        ("always", "S1", spent),
        ("slow", "S0", spent),
        ("slow", "S1", spent),
    ]


def test_a_worker_killed_while_idle_is_said_and_stopped() -> None:
    async def killed() -> str:
        worker = policy_worker.Worker([("", "true")])
        await worker.start()
        assert worker.process is not None
        worker.process.kill()
        await worker.process.wait()
        with pytest.raises(policy_worker.WorkerGone) as gone:
            await worker.evaluate([({}, (0,))], deadline=float("inf"))
        assert worker.process is None  # stopped: nothing left to kill
        return str(gone.value)

    assert asyncio.run(killed()) == "the evaluator process had ended (exit status -9)"


def _workers() -> list[int]:
    """The policy workers among this process's children (Linux /proc)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and stat[0] != "Z" and b"policy_worker" in cmdline:
            found.append(int(pid))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_cancelled_evaluation_kills_its_worker(tmp_path: Path) -> None:
    plan, specs, live = _planned(tmp_path, 2)
    path = _policy(tmp_path, ("slow", SLOW))

    async def cancelled() -> list[int]:
        task = asyncio.ensure_future(evaluate(load_policy([path]), plan, specs, live))
        for _ in range(200):  # the worker started and evaluates
            await asyncio.sleep(0.05)
            if _workers():
                break
        assert _workers(), "no worker started"
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):  # killed at once; reaped within moments
            if not _workers():
                break
            await asyncio.sleep(0.05)
        return _workers()

    assert asyncio.run(cancelled()) == []
