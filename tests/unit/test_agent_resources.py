"""What the agent knows between cycles (``agent.status.Resources``): a targeted cycle
replaces only its streams' resources, and the result is the list, the counts and the
gauges a full recount of the same resources gives."""

from __future__ import annotations

import random
from typing import Any

from reconciler.agent.metrics import Metrics
from reconciler.agent.status import STATES, Resources, ResourceStatus, State
from reconciler.execution.standing import index_of, scope
from reconciler.identity import ResourceRef
from reconciler.locations import Location
from reconciler.specs.document import Document
from reconciler.specs.spec import Spec
from reconciler.specs.validate import validate_documents


def _stream(name: str, state: State = "in_sync", consumers: int = 2) -> list[ResourceStatus]:
    found = [ResourceStatus(ResourceRef("Stream", name), state)]
    found += [
        ResourceStatus(ResourceRef("Consumer", f"C{c}", name), state) for c in range(consumers)
    ]
    return found


def _recount(found: list[ResourceStatus]) -> dict[State, int]:
    counts = dict.fromkeys(STATES, 0)
    for r in found:
        counts[r.state] += 1
    return counts


def _gauges(resources: Resources) -> dict[tuple[str, str], float]:
    metrics = Metrics()
    metrics.of(None).set_resources(resources.tally)
    return {
        (s.labels["state"], s.labels["kind"]): s.value
        for family in metrics.resources.collect()
        for s in family.samples
    }


def test_a_targeted_replacement_equals_a_full_recount_of_the_same_resources() -> None:
    chance = random.Random(7)
    everything = {f"S{i:03d}": _stream(f"S{i:03d}") for i in range(50)}
    known = Resources.of(r for group in everything.values() for r in group)
    for _ in range(200):
        stream = f"S{chance.randrange(60):03d}"  # some named streams were never known
        state: State = chance.choice(STATES)
        if chance.random() < 0.2:  # the stream gone (deleted and not declared)
            everything.pop(stream, None)
            fresh: list[ResourceStatus] = []
        else:  # its consumers come and go with the state
            fresh = _stream(stream, state, consumers=chance.randrange(4))
            everything[stream] = fresh
        known = known.replaced(frozenset({stream}), fresh)
        whole = Resources.of(r for group in everything.values() for r in group)
        flat = [r for group in everything.values() for r in group]
        assert list(known) == sorted(flat, key=lambda r: r.ref.sort_key)
        assert known.counts() == _recount(flat) == whole.counts()
        assert len(known) == len(flat)
        assert list(known.of_streams([stream])) == everything.get(stream, [])
    assert _gauges(known) == _gauges(Resources.of(list(known)))


def test_the_streams_replaced_keep_nothing_of_what_they_held() -> None:
    known = Resources.of([*_stream("A"), *_stream("B", "drifted")])
    after = known.replaced(frozenset({"B"}), [ResourceStatus(ResourceRef("Stream", "B"), "healed")])
    assert [(r.ref.path, r.state) for r in after] == [
        ("A", "in_sync"),
        ("B", "healed"),
        ("A/C0", "in_sync"),
        ("A/C1", "in_sync"),
    ]
    assert after.counts()["drifted"] == 0 and after.counts()["healed"] == 1
    assert [(r.ref.path, r.state) for r in known][-1] == ("B/C1", "drifted")  # unchanged


def _declared(documents: list[dict[str, Any]]) -> list[Spec]:
    where = Location("specs.yaml", 1)
    return validate_documents(Document(body=body, source=where) for body in documents)


def test_a_targeted_plan_takes_the_origins_of_its_streams_from_the_kept_index() -> None:
    """``standing.scope`` over the index the agent keeps: a stream named by an advisory
    brings in what it mirrors or sources, to a fixed point, and nothing else; the specs
    chosen keep the request's order."""
    specs = _declared(
        [
            {"kind": "Stream", "name": "A", "subjects": ["a.>"]},
            {"kind": "Stream", "name": "B", "mirror": {"name": "A"}},
            {"kind": "Stream", "name": "C", "subjects": ["c.>"], "sources": [{"name": "B"}]},
            {"kind": "Consumer", "stream": "C", "name": "W", "ack_policy": "explicit"},
            {"kind": "Stream", "name": "D", "subjects": ["d.>"], "sources": [{"name": "C"}]},
            {"kind": "Stream", "name": "E", "subjects": ["e.>"]},
        ]
    )
    index = index_of(specs)
    assert scope(index, frozenset({"C"})) == {"A", "B", "C"}
    assert scope(index, frozenset({"D"})) == {"A", "B", "C", "D"}
    assert scope(index, frozenset({"E", "GONE"})) == {"E", "GONE"}  # GONE: declared by none
    chosen = sorted(pair for stream in scope(index, frozenset({"C"})) for pair in index[stream])
    assert [s.ref.path for _, s in chosen] == ["A", "B", "C", "C/W"]
