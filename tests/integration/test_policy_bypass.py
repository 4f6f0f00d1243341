"""Ways past a policy ``deny`` rule (docs/policy.md), tried on real servers: each test
is a plan a deny rule must stop, and checks that apply changes nothing (messages and
streams counted on the server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nats
import pytest
from servers import NatsServer, run

from reconciler.errors import PolicyDenied, RefusedPlan
from reconciler.execution import run as engine
from reconciler.execution.requests import ApplyRequest, PlanRequest
from reconciler.jetstream import ConnectionOptions

pytestmark = pytest.mark.integration


async def _stream(url: str, name: str) -> dict[str, object] | None:
    """The stream's INFO (config and state), None when there is none."""
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        reply = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)).data)
        return None if "error" in reply else dict(reply)
    finally:
        await nc.close()


def _specs(tmp_path: Path, text: str) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    (specs / "stream.yaml").write_text(text, encoding="utf-8")
    return specs


#: A deny rule written with CEL comments (an apostrophe in each), next to another rule
#: that reads ``resource.declared``.
COMMENTED = """\
rules:
  - id: described
    level: warn
    message: a stream says what it is for
    expr: "!has(resource.declared.description) || size(resource.declared.description) > 0"
  - id: quota
    level: deny
    message: a stream keeps at most 1,000 messages
    expr: |
      // a stream can't keep more than 1,000 messages
      !has(resource.declared.max_msgs) || resource.declared.max_msgs <= 1000 // it's the quota
"""


def test_a_rule_with_comments_sees_the_fields_it_reads(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Evaluation hands CEL only the keys the rules select; an apostrophe in a ``//``
    comment was read as the start of a string that hid ``max_msgs`` from that list, so
    ``has()`` was false and the deny rule held for a stream of 5,000 messages."""
    specs = _specs(tmp_path, "kind: Stream\nname: BIG\nsubjects: [big.>]\nmax_msgs: 5000\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text(COMMENTED, encoding="utf-8")
    options = ConnectionOptions(servers=clean_server.url)
    wanted = PlanRequest.of([specs], options, policies=(policy,))
    plan = run(engine.plan_for(wanted))
    assert [(f.rule, f.level, f.error) for f in plan.policy] == [("quota", "deny", "")]
    with pytest.raises(PolicyDenied, match="quota"):
        run(engine.apply_for(ApplyRequest(plan=wanted, approved=True, lock_timeout=None)))
    assert run(_stream(clean_server.url, "BIG")) is None  # nothing was created


MAX_BYTES = """\
rules:
  - id: stream-max-bytes
    level: deny
    message: every stream sets max_bytes
    kinds: [Stream]
    expr: resource.desired.max_bytes > 0 && resource.live.max_bytes > 0
"""


def test_an_unchanged_resource_is_judged_on_what_the_server_keeps(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A stream without a size limit whose spec declares ``max_bytes`` under lifecycle
    ``ignore_changes``: the plan leaves it unchanged (unlimited), so the rule must see
    the live -1, not the spec's value (it saw the spec's value as desired and live)."""
    specs = _specs(tmp_path, "kind: Stream\nname: LOGS\nsubjects: [logs.>]\n")
    options = ConnectionOptions(servers=clean_server.url)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    _specs(
        tmp_path,
        "kind: Stream\nname: LOGS\nsubjects: [logs.>]\nmax_bytes: 1MiB\n"
        "lifecycle: {ignore_changes: [max_bytes]}\n",
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text(MAX_BYTES, encoding="utf-8")
    wanted = PlanRequest.of([specs], options, policies=(policy,))
    plan = run(engine.plan_for(wanted))
    assert [s.label for s in plan.unchanged] == ["Stream LOGS"] and not plan.changes
    assert [(f.rule, f.action) for f in plan.policy] == [("stream-max-bytes", "unchanged")]
    info = run(_stream(clean_server.url, "LOGS"))
    assert info is not None and info["config"]["max_bytes"] == -1  # type: ignore[index]


def _forged_without_policies(plan: Path) -> None:
    """What someone who can write the saved plan does: drop its policy files from the
    request and the file digests, drop its findings, fix every digest up."""
    from reconciler.planning.saved import integrity
    from reconciler.specs.fingerprint import FileDigest, SpecDigest

    document = json.loads(plan.read_text(encoding="utf-8"))
    document.pop("digest")
    document["request"]["policies"] = []
    files = [f for f in document["specs"]["files"] if not f["path"].startswith("policies/")]
    document["specs"]["files"] = files
    digest = SpecDigest(document["specs"]["salt"], tuple(FileDigest(**f) for f in files))
    document["specs"]["digest"] = digest.digest
    document["plan"]["policy"] = []
    document["digest"] = integrity(document)
    plan.write_text(json.dumps(document), encoding="utf-8")


def _prod_project(tmp_path: Path, url: str) -> None:
    """A project whose environment prod names a policy that denies every create."""
    _specs(tmp_path, "kind: Stream\nname: PRODS\nsubjects: [prods.>]\n")
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "team.yaml").write_text(
        "rules:\n  - {id: no-streams, level: deny, message: no new streams, "
        "expr: 'step.action != \"create\"'}\n",
        encoding="utf-8",
    )
    (tmp_path / "reconcile.yaml").write_text(
        "owner: shop\nspecs: [specs]\npolicies: [policies/team.yaml]\n"
        f"environments:\n  prod: {{servers: '{url}'}}\n",
        encoding="utf-8",
    )


def test_a_saved_plan_without_the_projects_policies_is_refused(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The project file (digested in the saved plan) names the policy; a saved plan
    whose request leaves it out, digests fixed up, used to apply with no rule at all."""
    from cli_runner import reconcile

    _prod_project(tmp_path, clean_server.url)
    plan = tmp_path / "reviewed.plan"
    planned = reconcile("plan", "--env", "prod", "--out", str(plan), cwd=tmp_path)
    assert planned.returncode == 3 and plan.is_file(), planned.stderr
    _forged_without_policies(plan)
    applied = reconcile("apply", str(plan), "--env", "prod", cwd=tmp_path)
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert "policies/team.yaml" in applied.stderr and "Traceback" not in applied.stderr
    assert run(_stream(clean_server.url, "PRODS")) is None  # nothing was created


def test_a_policy_file_named_twice_is_read_once(clean_server: NatsServer, tmp_path: Path) -> None:
    """The project's policy named again with ``--policy`` (or the Action's ``policy``
    input) was a 'rule already defined' error at the rule's own line; now it is read
    once and its deny rule still refuses the plan."""
    from cli_runner import reconcile

    specs = _specs(tmp_path, "kind: Stream\nname: TWICE\nsubjects: [twice.>]\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text(MAX_BYTES, encoding="utf-8")
    again = tmp_path / "sub" / ".." / "policy.yaml"
    (tmp_path / "sub").mkdir()
    where = ("--server", clean_server.url, "--policy", str(policy), "--policy", str(again))
    planned = reconcile("plan", str(specs), *where, "--format", "json", cwd=tmp_path)
    assert planned.returncode == 3, planned.stderr
    found = json.loads(planned.stdout)["policy"]
    assert [(f["rule"], f["name"]) for f in found] == [("stream-max-bytes", "TWICE")]
    applied = reconcile("apply", str(specs), *where, "--yes", "--no-lock", cwd=tmp_path)
    assert applied.returncode == 3 and "stream-max-bytes" in applied.stderr
    assert run(_stream(clean_server.url, "TWICE")) is None


def test_plan_out_refuses_a_policy_file_outside_the_repository(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A saved plan names its files inside the repository; a policy outside it was
    saved anyway, and the plan could then never be applied."""
    from cli_runner import reconcile

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".git").mkdir()
    _specs(repo, "kind: Stream\nname: OUT\nsubjects: [out.>]\n")
    policy = tmp_path / "policy.yaml"  # outside the repository
    policy.write_text(MAX_BYTES.replace("deny", "warn"), encoding="utf-8")
    out = tmp_path / "saved.plan"
    where = ("--server", clean_server.url, "--policy", str(policy), "--out", str(out))
    planned = reconcile("plan", "specs", *where, cwd=repo)
    assert planned.returncode == 1, planned.stdout + planned.stderr
    assert "outside the repository" in planned.stderr and str(policy) in planned.stderr
    assert not out.exists()


STARTER = Path(__file__).resolve().parents[2] / "examples" / "policies" / "starter.yaml"


async def _publish(url: str, subject: str, count: int, size: int) -> None:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        for _ in range(count):
            await nc.request(subject, b"x" * size, timeout=5)
    finally:
        await nc.close()


def test_a_tighter_max_bytes_is_an_unknown_loss_the_starter_policy_denies(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """max_bytes 10MiB -> 4KiB on 3,000 messages deletes all but a few dozen; the plan
    can only prove one (``loss_messages`` 1), and said ``loss_unknown`` false, so the
    starter's 'no step deletes more than 1,000 messages' held and apply (with
    --allow-data-loss) deleted them."""
    stream = "kind: Stream\nname: BYTES\nsubjects: [bytes.>]\nmax_bytes: {size}\n"
    specs = _specs(tmp_path, stream.format(size="10MiB"))
    options = ConnectionOptions(servers=clean_server.url)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(clean_server.url, "bytes.x", 3000, 100))
    _specs(tmp_path, stream.format(size="4KiB"))
    wanted = PlanRequest.of([specs], options, policies=(STARTER,))
    plan = run(engine.plan_for(wanted))
    assert [(f.rule, f.action) for f in plan.policy] == [("bounded-loss", "update")]
    request = ApplyRequest(plan=wanted, allow_data_loss=True, approved=True, lock_timeout=None)
    with pytest.raises(PolicyDenied, match="bounded-loss"):
        run(engine.apply_for(request))
    info = run(_stream(clean_server.url, "BYTES"))
    assert info is not None and info["state"]["messages"] == 3000  # type: ignore[index]


def _action(root: Path, **inputs: str) -> subprocess.CompletedProcess[str]:
    """``python -m action`` as the runner runs it in workspace ``root``."""
    temp = root / f"runner-{len(list(root.glob('runner-*')))}"
    temp.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(root),
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(root),
        "GITHUB_OUTPUT": str(temp / "output"),
        "GITHUB_STEP_SUMMARY": str(temp / "summary.md"),
        "RUNNER_TEMP": str(temp),
    } | {"INPUT_" + name.upper().replace("-", "_"): value for name, value in inputs.items()}
    return subprocess.run(
        [sys.executable, "-m", "action"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_action_refuses_a_saved_plan_without_the_projects_policies(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The Action's plan-file input goes through the same check as ``apply FILE``."""
    _prod_project(tmp_path, clean_server.url)
    saved = {"environment": "prod", "plan-file": "p.json"}
    planned = _action(tmp_path, mode="plan", **saved)
    assert planned.returncode == 3 and (tmp_path / "p.json").is_file(), planned.stdout
    _forged_without_policies(tmp_path / "p.json")
    applied = _action(tmp_path, mode="apply", **saved)
    assert applied.returncode == 1, applied.stdout
    assert "leaves out the policy file" in applied.stdout
    assert run(_stream(clean_server.url, "PRODS")) is None  # nothing was created


def test_apply_without_yes_and_a_terminal_exits_3_for_a_denied_plan(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """CI without --yes: a plan a deny rule refuses said 'pass --yes' (exit 1), and
    only the run with --yes said the rule (exit 3); the refusal that no approval can
    lift comes first."""
    from cli_runner import reconcile

    specs = _specs(tmp_path, "kind: Stream\nname: NOYES\nsubjects: [noyes.>]\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text(MAX_BYTES, encoding="utf-8")
    where = ("--server", clean_server.url, "--policy", str(policy), "--no-lock")
    applied = reconcile("apply", str(specs), *where, cwd=tmp_path)
    assert applied.returncode == 3, applied.stderr
    assert "stream-max-bytes" in applied.stderr and "--yes" not in applied.stderr
    assert run(_stream(clean_server.url, "NOYES")) is None


def test_pruning_the_last_consumer_of_an_interest_stream_counts_its_messages(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Deleting an interest stream's only consumer deletes every message with it (the
    server keeps none nobody is interested in); the plan said only 'its delivery state
    is lost' (no count), so the starter's bounded-loss held and apply --prune deleted
    the 1,500 messages."""
    stream = "kind: Stream\nname: INTR\nsubjects: [intr.>]\nretention: interest\nmax_bytes: 1MiB\n"
    specs = _specs(tmp_path, stream)
    (specs / "consumer.yaml").write_text(
        "kind: Consumer\nstream: INTR\nname: ONLY\nack_policy: explicit\n", encoding="utf-8"
    )
    options = ConnectionOptions(servers=clean_server.url)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(clean_server.url, "intr.x", 1500, 10))
    (specs / "consumer.yaml").unlink()
    wanted = PlanRequest.of([specs], options, policies=(STARTER,), prune=True)
    plan = run(engine.plan_for(wanted))
    assert [(s.label, s.losses[0].messages) for s in plan.changes] == [("Consumer INTR/ONLY", 1500)]
    assert [(f.rule, f.action) for f in plan.policy] == [("bounded-loss", "delete")]
    request = ApplyRequest(plan=wanted, allow_replace=True, approved=True, lock_timeout=None)
    with pytest.raises(PolicyDenied, match="bounded-loss"):
        run(engine.apply_for(request))
    info = run(_stream(clean_server.url, "INTR"))
    assert info is not None and info["state"]["messages"] == 1500  # type: ignore[index]


def test_pulumi_destroy_of_an_interest_streams_last_consumer_needs_allow_destroy(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Pulumi's destroy built a consumer's delete as losing nothing: without
    ``allow_destroy`` it deleted the last consumer of an interest stream and the
    server deleted its 1,200 messages with it; a bounded-loss rule saw 0."""
    from pulumi_provider import JetStreamProvider

    specs = _specs(tmp_path, "kind: Stream\nname: INTP\nsubjects: [intp.>]\nretention: interest\n")
    (specs / "consumer.yaml").write_text(
        "kind: Consumer\nstream: INTP\nname: ONLY\nack_policy: explicit\n", encoding="utf-8"
    )
    assert run(engine.apply([specs], ConnectionOptions(servers=clean_server.url))).ok
    run(_publish(clean_server.url, "intp.x", 1200, 10))
    provider = JetStreamProvider(connection={"servers": clean_server.url})
    props = {"kind": "Consumer", "stream": "INTP", "name": "ONLY", "ack_policy": "explicit"}
    with pytest.raises(RefusedPlan, match="allow_destroy"):
        provider.delete("INTP/ONLY", props)
    with_policy = JetStreamProvider(
        connection={"servers": clean_server.url}, policies=[str(STARTER)]
    )
    with pytest.raises(PolicyDenied, match="bounded-loss"):
        with_policy.delete("INTP/ONLY", {**props, "allow_destroy": True})
    info = run(_stream(clean_server.url, "INTP"))
    assert info is not None and info["state"]["messages"] == 1200  # type: ignore[index]


def test_replacing_the_last_consumer_of_an_interest_stream_counts_its_messages(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A consumer is replaced by deleting it first: an interest stream's only consumer
    takes every message along (40 of 40, measured); the plan counted nothing, so the
    starter's bounded-loss held for 1,500 messages."""
    stream = "kind: Stream\nname: INTQ\nsubjects: [intq.>]\nretention: interest\nmax_bytes: 1MiB\n"
    consumer = "kind: Consumer\nstream: INTQ\nname: ONLY\nack_policy: explicit\n"
    specs = _specs(tmp_path, stream)
    (specs / "consumer.yaml").write_text(consumer, encoding="utf-8")
    options = ConnectionOptions(servers=clean_server.url)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(clean_server.url, "intq.x", 1500, 10))
    (specs / "consumer.yaml").write_text(consumer + "deliver_policy: new\n", encoding="utf-8")
    wanted = PlanRequest.of([specs], options, policies=(STARTER,))
    plan = run(engine.plan_for(wanted))
    assert [(s.action, s.losses[0].messages) for s in plan.changes] == [("replace", 1500)]
    assert [(f.rule, f.action) for f in plan.policy] == [("bounded-loss", "replace")]
    request = ApplyRequest(plan=wanted, allow_replace=True, approved=True, lock_timeout=None)
    with pytest.raises(PolicyDenied, match="bounded-loss"):
        run(engine.apply_for(request))
    info = run(_stream(clean_server.url, "INTQ"))
    assert info is not None and info["state"]["messages"] == 1500  # type: ignore[index]
