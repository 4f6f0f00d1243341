"""Ways past a policy ``deny`` rule (docs/policy.md), tried on real servers: each test
is a plan a deny rule must stop, and checks that apply changes nothing (messages and
streams counted on the server)."""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest
from servers import NatsServer, run

from reconciler.errors import PolicyDenied
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
