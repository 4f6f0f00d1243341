"""The plan memo answers by shape: resources declared alike are compared once, and the
plan is always the plan computed from scratch, whatever the live configs hold in their
name fields (the names, a consumer's durable name, a stream's subjects)."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from live_samples import SERVER, live_of

from reconciler.errors import SpecError
from reconciler.locations import Location
from reconciler.model.normalize import VERBATIM_FIELDS, named_as_declared
from reconciler.model.state import LiveState
from reconciler.planning import memo as memo_module
from reconciler.planning.memo import _LEFT_OUT, DIGEST_SIZE, HASHED, Memo, spec_digest
from reconciler.planning.plan import build_plan
from reconciler.planning.steps import Plan
from reconciler.specs.document import Document
from reconciler.specs.spec import OWNER_KEY, Spec
from reconciler.specs.validate import validate_documents

#: Few shapes, so that many resources share one.
STREAM_SHAPES: list[dict[str, Any]] = [
    {"storage": "memory"},
    {"storage": "memory", "max_msgs": 10},
    {"storage": "file", "consumer_limits": {"max_ack_pending": 100}},
    {"storage": "file", "consumer_limits": {"inactive_threshold": "1h"}},
]
CONSUMER_SHAPES: list[dict[str, Any]] = [
    {"ack_policy": "explicit"},
    {"ack_policy": "explicit", "max_deliver": 5},
    {"ack_policy": "none", "deliver_subject": "push.here"},
    {"ack_policy": "explicit", "max_ack_pending": 100},
]


#: The fields taken verbatim (normalize.VERBATIM_FIELDS), declared or not: the memo leaves
#: them out of its digests where the live config holds them as declared.
VERBATIM_CHOICES: list[dict[str, Any]] = [
    {},
    {"description": "first"},
    {"description": ""},
    {"filter_subject": "one"},
    {"filter_subject": "two", "description": "first"},
]


class FromScratch(Memo):
    """A memo that never answers: the plan as computed from scratch."""

    def unchanged(self, key: bytes) -> bool:
        return False


@st.composite
def declared(draw: st.DrawFn) -> list[Spec]:
    """Streams of a few shapes, with or without declared subjects (one maybe external),
    each with consumers of a few shapes."""
    documents = []
    for index in range(draw(st.integers(min_value=1, max_value=6))):
        name = f"S{index}"
        body: dict[str, Any] = {"kind": "Stream", "name": name}
        body.update(copy.deepcopy(draw(st.sampled_from(STREAM_SHAPES))))
        if draw(st.booleans()):
            body["subjects"] = [f"s{index}.>"]
        body.update(draw(st.sampled_from(VERBATIM_CHOICES[:3])))
        if index == 0 and draw(st.booleans()):
            body = {"kind": "Stream", "name": name, "external": True}
        documents.append(body)
        for number in range(draw(st.integers(min_value=0, max_value=4))):
            shape = copy.deepcopy(draw(st.sampled_from(CONSUMER_SHAPES)))
            if "deliver_subject" in shape:
                shape["deliver_subject"] = f"push.{index}.{number}"
            shape.update(draw(st.sampled_from(VERBATIM_CHOICES)))
            if shape.get("filter_subject"):  # one of the stream's subjects
                subject = f"s{index}.{shape['filter_subject']}"
                shape["filter_subject"] = subject if "subjects" in body else name
            documents.append({"kind": "Consumer", "stream": name, "name": f"C{number}", **shape})
    where = Location("specs.yaml", 1)
    return validate_documents(Document(body=body, source=where) for body in documents)


def _perturbed(draw: st.DrawFn, live: LiveState) -> LiveState:
    """The live state with some resources changed out of band: a field, a name field,
    the marker, the owner, or the resource gone."""
    streams: dict[str, dict[str, Any]] = {
        name: copy.deepcopy(dict(config)) for name, config in live.streams.items()
    }
    consumers: dict[tuple[str, str], dict[str, Any]] = {
        key: copy.deepcopy(dict(config)) for key, config in live.consumers.items()
    }
    names = sorted(streams) + sorted(consumers)
    if not names:
        return live
    for target in draw(st.lists(st.sampled_from(names), max_size=6)):
        raw = streams.get(target) if isinstance(target, str) else consumers.get(target)
        if raw is None:
            continue
        change = draw(
            st.sampled_from(
                [
                    *["field", "names", "subjects", "marker", "owner", "gone", "description"],
                    *["like", "filter", "verbatim"],
                ]
            )
        )
        if change == "like":  # as another resource of its kind is, but for its names
            if isinstance(target, str):
                other = streams[draw(st.sampled_from(sorted(streams)))]
            else:
                other = consumers[draw(st.sampled_from(sorted(consumers)))]
            own: dict[str, Any] = {
                k: raw[k] for k in ("name", "durable_name", "subjects") if k in raw
            }
            raw.clear()
            raw.update({**copy.deepcopy(other), **own})
        elif change == "field":
            raw["max_msgs" if isinstance(target, str) else "max_deliver"] = 3
        elif change == "description":
            raw["description"] = "changed by hand"
        elif change == "filter" and not isinstance(target, str):
            raw["filter_subject"] = draw(st.sampled_from(["", "s0.one", "s1.two", "S0", "x.>"]))
        elif change == "verbatim":  # gone, or empty
            field = draw(st.sampled_from(["description", "filter_subject"]))
            if draw(st.booleans()):
                raw.pop(field, None)
            else:
                raw[field] = ""
        elif change == "names":
            field = draw(st.sampled_from(["name", "durable_name"]))
            if draw(st.booleans()):
                raw.pop(field, None)
            else:
                raw[field] = draw(st.sampled_from(["", "OTHER", "S0", "C0"]))
        elif change == "subjects" and isinstance(target, str):
            raw["subjects"] = draw(st.sampled_from([[], ["s0.>"], ["elsewhere.>"]]))
        elif change == "marker":
            raw["metadata"] = {}
        elif change == "owner":
            raw["metadata"] = {**raw.get("metadata", {}), OWNER_KEY: "shop"}
        elif change == "gone":
            if isinstance(target, str):
                del streams[target]
                consumers = {k: v for k, v in consumers.items() if k[0] != target}
            else:
                del consumers[target]
    return LiveState(server=SERVER, streams=streams, consumers=consumers)


def _outcome(specs: list[Spec], live: LiveState, memo: Memo | None) -> Plan | list[Any]:
    try:
        return build_plan(specs, live, memo=memo)
    except SpecError as err:
        return [str(problem) for problem in err.problems]


@settings(max_examples=300, deadline=None)
@given(specs=declared(), data=st.data())
def test_a_plan_with_the_memo_is_the_plan_from_scratch(specs: list[Spec], data: Any) -> None:
    """The memo of this plan alone, and a memo kept from a plan of another live state,
    never change the plan: every entry is what comparing it from scratch gives."""
    before = _perturbed(data.draw, _applied(data.draw, specs))
    after = _perturbed(data.draw, before)
    scratch = _outcome(specs, after, FromScratch(b""))
    assert _outcome(specs, after, None) == scratch
    earlier = Memo.for_plan(SERVER, "default")
    _outcome(specs, before, earlier)
    kept = Memo(earlier.salt, earlier.found)
    assert _outcome(specs, after, kept) == scratch


def _applied(draw: st.DrawFn, specs: list[Spec]) -> LiveState:
    """What the server holds after applying ``specs``; an external stream as another
    tool left it (no marker, maybe consumer limits of its own)."""
    managed = [s for s in specs if not s.external]
    external = [Spec(s.kind, s.name, {}, s.source) for s in specs if s.external]
    live = live_of(*external, *managed)
    for spec in external:
        config = live.streams[spec.name]
        config["metadata"] = {}  # type: ignore[index]
        config["consumer_limits"] = draw(  # type: ignore[index]
            st.sampled_from([{}, {"max_ack_pending": 7}, {"inactive_threshold": 10**12}])
        )
    return live


def test_consumers_and_streams_declared_alike_are_compared_once() -> None:
    """What the memo is for: 40 consumers of 20 streams, all declared alike, are two
    comparisons (one stream, one consumer), not 60."""
    documents: list[dict[str, Any]] = []
    for index in range(20):
        documents.append({"kind": "Stream", "name": f"S{index}", "subjects": [f"s{index}.>"]})
        for number in range(2):
            documents.append(
                {
                    "kind": "Consumer",
                    "stream": f"S{index}",
                    "name": f"C{number}",
                    **{"ack_policy": "explicit"},
                }
            )
    specs = validate_documents(
        Document(body=body, source=Location("specs.yaml", 1)) for body in documents
    )
    memo = Memo(b"count")
    plan = build_plan(specs, live_of(*specs), memo=memo)
    assert len(plan.unchanged) == 60 and not plan.changes
    assert memo.hits == 58 and len(memo.found) == 2


def test_consumers_differing_only_in_filters_and_descriptions_are_compared_once() -> None:
    """A repository's usual shape: each consumer filters its own subject and says what
    it is for; 40 consumers of 20 streams with their own descriptions are still two
    comparisons. A consumer whose live filter is not its declared one is compared (and
    updated)."""
    documents: list[dict[str, Any]] = []
    for index in range(20):
        documents.append(
            {"kind": "Stream", "name": f"S{index}", "subjects": [f"s{index}.>"],
             "description": f"stream {index}"}
        )  # fmt: skip
        for number in range(2):
            documents.append(
                {"kind": "Consumer", "stream": f"S{index}", "name": f"C{number}",
                 "ack_policy": "explicit", "filter_subject": f"s{index}.{number}",
                 "description": f"consumer {index}.{number}"}
            )  # fmt: skip
    specs = _specs(documents)
    memo = Memo(b"count")
    live = live_of(*specs)
    plan = build_plan(specs, live, memo=memo)
    assert len(plan.unchanged) == 60 and not plan.changes
    assert memo.hits == 58 and len(memo.found) == 2
    consumers = dict(live.consumers)
    consumers[("S3", "C1")] = {**consumers[("S3", "C1")], "filter_subject": "s3.other"}
    moved = LiveState(server=live.server, streams=live.streams, consumers=consumers)
    plan = build_plan(specs, moved, memo=Memo(b"count"))
    assert [(c.ref.stream_name, c.ref.name) for c in plan.changes] == [("S3", "C1")]


def _specs(documents: list[dict[str, Any]]) -> list[Spec]:
    where = Location("specs.yaml", 1)
    return validate_documents(Document(body=body, source=where) for body in documents)


@pytest.mark.parametrize("first", range(len(CONSUMER_SHAPES)))
@pytest.mark.parametrize("second", range(len(CONSUMER_SHAPES)))
def test_a_consumer_live_as_another_is_compared_with_its_own_spec(first: int, second: int) -> None:
    """Two consumers of one stream: the second's live config is the first's but for its
    names. Whatever their declared shapes, the memo answers for the second only what
    comparing it with its own spec gives."""
    shapes = [copy.deepcopy(CONSUMER_SHAPES[first]), copy.deepcopy(CONSUMER_SHAPES[second])]
    specs = _specs(
        [
            {"kind": "Stream", "name": "S", "subjects": ["s.>"]},
            *({"kind": "Consumer", "stream": "S", "name": f"C{i}", **shapes[i]} for i in (0, 1)),
        ]
    )
    live = live_of(*specs)
    consumers = dict(live.consumers)
    consumers[("S", "C1")] = {**consumers[("S", "C0")], "name": "C1", "durable_name": "C1"}
    live = LiveState(server=SERVER, streams=live.streams, consumers=consumers)
    scratch = _outcome(specs, live, FromScratch(b""))
    assert _outcome(specs, live, None) == scratch
    assert isinstance(scratch, Plan)
    assert bool(scratch.changes) == (first != second)


@pytest.mark.parametrize("first", range(len(STREAM_SHAPES)))
@pytest.mark.parametrize("second", range(len(STREAM_SHAPES)))
@pytest.mark.parametrize("subjects", [True, False])
def test_a_stream_live_as_another_is_compared_with_its_own_spec(
    first: int, second: int, subjects: bool
) -> None:
    """The same for streams (with and without declared subjects), and for the consumers
    planned against them."""
    documents: list[dict[str, Any]] = []
    for index, shape in enumerate((STREAM_SHAPES[first], STREAM_SHAPES[second])):
        body = {"kind": "Stream", "name": f"S{index}", **copy.deepcopy(shape)}
        if subjects:
            body["subjects"] = [f"s{index}.>"]
        documents += [body, {"kind": "Consumer", "stream": f"S{index}", "name": "C"}]
    specs = _specs(documents)
    live = live_of(*specs)
    streams = dict(live.streams)
    names = {k: v for k, v in streams["S1"].items() if k in ("name", "subjects")}
    streams["S1"] = {**streams["S0"], **names}
    consumers = dict(live.consumers)
    consumers[("S1", "C")] = consumers[("S0", "C")]
    live = LiveState(server=SERVER, streams=streams, consumers=consumers)
    scratch = _outcome(specs, live, FromScratch(b""))
    assert _outcome(specs, live, None) == scratch
    if (first, second) == (2, 3):  # a new inactive_threshold limit over a durable C without
        assert isinstance(scratch, list)  # one: 2.12 refuses it (planning.live_checks)
        assert all("err 10069" in problem for problem in scratch), scratch
        return
    assert isinstance(scratch, Plan)
    assert bool(scratch.changes) == (STREAM_SHAPES[first] != STREAM_SHAPES[second])


def test_consumers_of_external_streams_are_planned_against_each_live_stream() -> None:
    """Consumers declared alike on two streams managed elsewhere: each is planned against
    its own live stream's consumer limits, never answered with the other's."""
    specs = _specs(
        [
            {"kind": "Stream", "name": "A", "external": True},
            {"kind": "Stream", "name": "B", "external": True},
            {"kind": "Consumer", "stream": "A", "name": "C", "ack_policy": "explicit"},
            {"kind": "Consumer", "stream": "B", "name": "C", "ack_policy": "explicit"},
        ]
    )
    live = live_of(*(Spec(s.kind, s.name, {}, s.source) for s in specs[:2]), *specs[2:])
    streams = {name: {**config, "metadata": {}} for name, config in live.streams.items()}
    streams["B"]["consumer_limits"] = {"max_ack_pending": 7}  # after C was created
    live = LiveState(server=SERVER, streams=streams, consumers=live.consumers)
    scratch = _outcome(specs, live, FromScratch(b""))
    assert _outcome(specs, live, None) == scratch
    assert isinstance(scratch, Plan) and [s.name for s in scratch.changes] == ["C"]
    assert scratch.changes[0].ref.stream == "B"


def _key_fed_one_by_one(memo: Memo, spec: Spec, raw: Any, basis: bytes) -> bytes:
    """What :meth:`Memo.key` is defined as, computed the slow way it was first written:
    the salted hash fed part by part, the name fields left out by a comprehension."""
    digest = hashlib.blake2b(memo.salt, digest_size=DIGEST_SIZE, key=b"")
    names = named_as_declared(spec.kind, spec.name, spec.config, raw)
    if names is not None:
        config = {k: v for k, v in spec.config.items() if k not in _LEFT_OUT[spec.kind]}
        shape = hashlib.blake2b(
            orjson.dumps(
                [spec.kind, spec.external, config],
                option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
            ),
            digest_size=DIGEST_SIZE,
        ).digest()
        digest.update(b"s" + shape)
        marks: list[list[Any]] = []
        for field in VERBATIM_FIELDS[spec.kind]:
            declared_value = spec.config.get(field)
            if raw.get(field) == declared_value:
                names += (field,)
                marks.append([])
            else:
                marks.append([declared_value])
        digest.update(orjson.dumps(marks))
        raw = {k: v for k, v in raw.items() if k not in names}
    else:
        digest.update(b"e" + spec_digest(spec))
    digest.update(basis)
    digest.update(orjson.dumps(raw, option=orjson.OPT_NON_STR_KEYS))
    return digest.digest()


def _reordered(draw: st.DrawFn, raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` in another key order, or with a value of another JSON type that Python
    calls equal (``True`` and ``1``, ``1.0`` and ``1``), or as it is."""
    way = draw(st.sampled_from(["as is", "reversed", "bool", "float"]))
    if way == "reversed":
        return dict(reversed(list(raw.items())))
    number = next((k for k, v in raw.items() if type(v) is int and v in (0, 1)), None)
    if way == "bool" and number is not None:
        return {**raw, number: bool(raw[number])}
    if way == "float":
        return {**raw, "max_deliver": float(raw.get("max_deliver", 1))}
    return raw


@settings(max_examples=200, deadline=None)
@given(specs=declared(), data=st.data())
def test_a_key_is_the_salted_hash_of_its_inputs_fed_one_by_one(
    specs: list[Spec], data: Any
) -> None:
    """The memo's key, computed in one piece and kept for inputs met before, is the
    digest its definition gives, for every spec against every live config (its own,
    another's, one in another key order or with ``True`` where ``1`` was), met once or
    again, its digest kept or forgotten (``HASHED``)."""
    live = _perturbed(data.draw, _applied(data.draw, specs))
    configs = [dict(c) for c in (*live.streams.values(), *live.consumers.values())]
    memo = Memo(b"salt")
    try:
        for kept in (HASHED, 2, 2):  # met before; digests forgotten as they go
            memo_module.HASHED = kept
            for spec in specs:
                if not configs:
                    break
                raw = _reordered(data.draw, data.draw(st.sampled_from(configs)))
                basis = data.draw(st.sampled_from([b"", b"N", b"S" + bytes(16), b"L" + bytes(16)]))
                expected = _key_fed_one_by_one(memo, spec, raw, basis)
                assert memo.key(spec, raw, basis) == expected
    finally:
        memo_module.HASHED = HASHED
