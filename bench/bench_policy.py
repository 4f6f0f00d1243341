"""Policy evaluation against plain planning, measured in the same run.

    python bench/bench_policy.py [--streams 7000] [--consumers-per-stream 2] [--turns 3]

Builds 21,000 resources by default (7,000 streams with 2 consumers each), a live state
holding every one of them as planned (a no-change re-plan: every entry ``Unchanged``,
the case where evaluation also works out each desired config again), then times, in
turns:

- the raw baseline: ``planning.plan.build_plan`` over the specs and that live state
  (the planner's whole work for a plan, without the network);
- ``planning.policy.evaluate`` with examples/policies/starter.yaml (4 rules) on that plan;
- the same with the starter policy's one cheapest rule (``step.loss_messages <= 1000``),
  to tell the per-resource cost (configs to CEL values) from the per-rule cost.

Prints medians and the ratio of each evaluation to the baseline. Figures only: nothing
here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reconciler.model.normalize import desired_config
from reconciler.model.state import LiveState, ServerInfo
from reconciler.planning.plan import build_plan
from reconciler.planning.policy import evaluate
from reconciler.specs.policy import Policy, load_policy
from reconciler.specs.spec import Spec
from reconciler.specs.validate import load_specs

ROOT = Path(__file__).resolve().parents[1]
STARTER = ROOT / "examples" / "policies" / "starter.yaml"
SERVER = ServerInfo(version="2.12.4", api_level=2)


def specs_of(folder: Path, streams: int, per_stream: int) -> list[Spec]:
    docs = []
    for i in range(streams):
        docs.append(
            f"kind: Stream\nname: B{i:05d}\nsubjects: [b{i}.>]\nmax_bytes: 1GiB\nmax_age: 7d\n"
        )
        for c in range(per_stream):
            docs.append(f"kind: Consumer\nstream: B{i:05d}\nname: C{c}\nack_policy: explicit\n")
    for first in range(0, len(docs), 5000):
        part = "---\n".join(docs[first : first + 5000])
        (folder / f"bench-{first // 5000:04d}.yaml").write_text(part, encoding="utf-8")
    return load_specs([folder])


def live_state(specs: list[Spec]) -> LiveState:
    """Every spec on the server exactly as planned (the managed marker included)."""
    streams = {s.stream_name: desired_config(s, SERVER) for s in specs if s.kind == "Stream"}
    consumers = {
        (s.stream_name, s.name): desired_config(s, SERVER, stream_config=streams[s.stream_name])
        for s in specs
        if s.kind == "Consumer"
    }
    return LiveState(server=SERVER, streams=streams, consumers=consumers)


def median_of(turns: int, work: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(turns):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=7000)
    parser.add_argument("--consumers-per-stream", type=int, default=2)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        specs = specs_of(Path(temp), args.streams, args.consumers_per_stream)
        starter = load_policy([STARTER])
    live = live_state(specs)
    one_rule = Policy(tuple(r for r in starter.rules if r.id == "bounded-loss"))
    print(f"{len(specs):,} resources, {args.turns} turns each (medians)")
    baseline, plan = median_of(args.turns, lambda: build_plan(specs, live))
    assert not plan.changes, "the live state should hold every spec as planned"
    print(f"  build_plan (raw baseline)         {baseline:7.3f} s")
    for label, policy in (("starter policy, 4 rules", starter), ("one rule", one_rule)):
        run = lambda p=policy: asyncio.run(evaluate(p, plan, specs, live))  # noqa: E731
        took, found = median_of(args.turns, run)
        ratio = took / baseline
        per = took / len(specs) * 1e6
        print(
            f"  evaluate, {label:<22} {took:7.3f} s  x{ratio:.2f} of build_plan, "
            f"{per:.0f} us per resource, {len(found)} finding(s)"
        )


if __name__ == "__main__":
    main()
