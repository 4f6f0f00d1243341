"""Policy rules (docs/policy.md) on real servers: a deny rule stops apply before any step
and fails plan with exit status 3, a warn rule only warns, a broken rule is FILE:LINE
before any server is asked, an expression that cannot be evaluated is a finding."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_front_doors import _messages, _publish

from reconciler.errors import PolicyDenied, SpecError
from reconciler.execution import run as engine
from reconciler.execution.requests import ApplyRequest, PlanRequest
from reconciler.jetstream import ConnectionOptions

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STARTER = ROOT / "examples" / "policies" / "starter.yaml"
STREAM = "kind: Stream\nname: ORDERS\nsubjects: [orders.>]\nmax_msgs: {max_msgs}\n"
LOSS_50 = """\
rules:
  - id: loses-at-most-50
    level: deny
    message: no step loses more than 50 messages
    expr: step.loss_messages <= 50
"""


@pytest.fixture
def lossy(clean_server: NatsServer, tmp_path: Path) -> tuple[NatsServer, Path, Path]:
    """ORDERS holding 100 messages; the specs now ask for max_msgs 10 (loses 90); a
    policy denying a loss over 50."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "orders.yaml").write_text(STREAM.format(max_msgs=1000), encoding="utf-8")
    options = ConnectionOptions(servers=clean_server.url)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(clean_server.url, 100))
    (specs / "orders.yaml").write_text(STREAM.format(max_msgs=10), encoding="utf-8")
    policy = tmp_path / "policy.yaml"
    policy.write_text(LOSS_50, encoding="utf-8")
    return clean_server, specs, policy


def test_loss_messages_of_a_lossy_update_is_denied(lossy: tuple[NatsServer, Path, Path]) -> None:
    server, specs, policy = lossy
    wanted = PlanRequest.of([specs], ConnectionOptions(servers=server.url), policies=(policy,))
    plan = run(engine.plan_for(wanted))
    (finding,) = plan.policy
    assert (finding.rule, finding.level, finding.action) == ("loses-at-most-50", "deny", "update")
    assert finding.rule_source == f"{policy}:5"
    assert plan.to_json()["policy"][0]["rule"] == "loses-at-most-50"
    request = ApplyRequest(plan=wanted, allow_data_loss=True, lock_timeout=None)
    with pytest.raises(PolicyDenied, match="loses-at-most-50") as denied:
        run(engine.apply_for(request))
    assert "nothing was changed" in denied.value.headline
    assert "Stream ORDERS (update)" in denied.value.details[0]
    assert run(_messages(server.url)) == 100  # refused before any step


def test_cli_plan_exits_3_after_the_plan_and_apply_changes_nothing(
    lossy: tuple[NatsServer, Path, Path],
) -> None:
    server, specs, policy = lossy
    where = ("--server", server.url, "--policy", str(policy))
    planned = reconcile("plan", str(specs), *where, cwd=specs.parent)
    assert planned.returncode == 3, planned.stderr
    assert "~ update Stream ORDERS" in planned.stdout  # the plan first
    assert "deny loses-at-most-50: no step loses more than 50 messages" in planned.stdout
    assert "loses-at-most-50" in planned.stderr and "Traceback" not in planned.stderr
    as_json = reconcile("plan", str(specs), *where, "--format", "json", cwd=specs.parent)
    assert as_json.returncode == 3
    assert json.loads(as_json.stdout)["policy"][0]["rule"] == "loses-at-most-50"
    as_markdown = reconcile("plan", str(specs), *where, "--format", "markdown", cwd=specs.parent)
    assert as_markdown.returncode == 3 and "#### Policy" in as_markdown.stdout
    applied = reconcile(
        "apply", str(specs), *where, "--allow-data-loss", "--yes", "--no-lock", cwd=specs.parent
    )
    assert applied.returncode == 3, applied.stderr
    assert "refusing to apply: policy rule(s) loses-at-most-50 deny" in applied.stderr
    drift = reconcile("drift", str(specs), *where, cwd=specs.parent)
    assert drift.returncode == 3 and "deny loses-at-most-50" in drift.stdout
    assert run(_messages(server.url)) == 100


def test_a_warn_rule_only_warns(lossy: tuple[NatsServer, Path, Path]) -> None:
    server, specs, policy = lossy
    policy.write_text(LOSS_50.replace("level: deny", "level: warn"), encoding="utf-8")
    where = ("--server", server.url, "--policy", str(policy))
    planned = reconcile("plan", str(specs), *where, cwd=specs.parent)
    assert planned.returncode == 0, planned.stderr
    assert "warn loses-at-most-50" in planned.stdout
    applied = reconcile(
        "apply", str(specs), *where, "--allow-data-loss", "--yes", "--no-lock", cwd=specs.parent
    )
    assert applied.returncode == 0, applied.stderr
    assert run(_messages(server.url)) == 10  # applied: the warning stopped nothing


def test_the_starter_policy_passes_the_shop_and_denies_it_in_prod(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """examples/shop keeps the starter policy; planned as environment prod (one replica)
    it breaks prod-replicas, and apply creates nothing."""
    shop = ROOT / "examples" / "shop"
    where = ("--server", clean_server.url, "--policy", str(STARTER))
    planned = reconcile("plan", str(shop), *where, "--format", "json", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["policy"] == []
    (tmp_path / "reconcile.yaml").write_text(
        f"owner: shop\nspecs: [shop]\npolicies: [policies/starter.yaml]\n"
        f"environments:\n  prod: {{servers: '{clean_server.url}'}}\n",
        encoding="utf-8",
    )
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "starter.yaml").write_text(STARTER.read_text(), encoding="utf-8")
    (tmp_path / "shop").mkdir()
    for spec in shop.glob("*.yaml"):
        (tmp_path / "shop" / spec.name).write_text(spec.read_text(), encoding="utf-8")
    prod = reconcile("plan", "--env", "prod", "--format", "json", cwd=tmp_path)
    assert prod.returncode == 3, prod.stderr
    found = json.loads(prod.stdout)["policy"]
    assert [(f["rule"], f["kind"], f["name"]) for f in found] == [
        ("prod-replicas", "Stream", "ORDERS")
    ]
    every = reconcile("plan", "--all-envs", cwd=tmp_path)
    assert every.returncode == 3 and "deny prod-replicas" in every.stdout, every.stderr
    applied = reconcile("apply", "--env", "prod", "--yes", "--no-lock", cwd=tmp_path)
    assert applied.returncode == 3 and "prod-replicas" in applied.stderr
    streams = run(_stream_names(clean_server.url))
    assert streams == []  # nothing was created


async def _stream_names(url: str) -> list[str]:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        reply = await nc.request("$JS.API.STREAM.NAMES", b"", timeout=5)
        return list(json.loads(reply.data).get("streams") or [])
    finally:
        await nc.close()


def test_a_bad_rule_is_file_line_before_any_server_is_asked(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "orders.yaml").write_text(STREAM.format(max_msgs=10), encoding="utf-8")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n  - id: broken\n    level: deny\n    message: m\n"
        "    expr: resource.desired.max_msgs >\n",
        encoding="utf-8",
    )
    nowhere = ("--server", "nats://127.0.0.1:1", "--policy", str(policy))
    planned = reconcile("plan", str(specs), *nowhere, cwd=tmp_path)
    assert planned.returncode == 1
    assert f"{policy}:5: rules.0.expr: rule 'broken': invalid CEL" in planned.stderr
    assert "Traceback" not in planned.stderr and "127.0.0.1:1" not in planned.stderr
    policy.write_text(
        "rules:\n  - id: typo\n    level: warn\n    message: m\n"
        "    expr: resource.envirnoment == 'x'\n"
    )
    with socket.socket() as listener:  # a server address that counts who connects
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        url = f"nats://127.0.0.1:{listener.getsockname()[1]}"
        wanted = PlanRequest.of([specs], ConnectionOptions(servers=url), policies=(policy,))
        with pytest.raises(SpecError, match=r"policy\.yaml:5: .*unknown field resource\.envirn"):
            run(engine.plan_for(wanted))
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected


def test_an_expression_that_cannot_be_evaluated_is_a_finding(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``resource.live.max_msgs`` of a stream being created (live is {}): a finding naming
    the rule, the resource and why; the other rule still evaluates."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "orders.yaml").write_text(STREAM.format(max_msgs=10), encoding="utf-8")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n"
        "  - {id: live-limit, level: warn, message: m, expr: 'resource.live.max_msgs > 0'}\n"
        "  - {id: guarded, level: deny, message: m, expr: '!has(resource.live.max_msgs)'}\n",
        encoding="utf-8",
    )
    wanted = PlanRequest.of(
        [specs], ConnectionOptions(servers=clean_server.url), policies=(policy,)
    )
    plan = run(engine.plan_for(wanted))
    (finding,) = plan.policy
    assert (finding.rule, finding.ref.label, finding.level) == (
        "live-limit",
        "Stream ORDERS",
        "warn",
    )
    assert "max_msgs" in finding.error
    assert "could not evaluate" in finding.line
