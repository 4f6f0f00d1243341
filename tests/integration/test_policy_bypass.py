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
