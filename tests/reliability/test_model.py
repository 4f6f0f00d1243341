"""No data loss: a model-based run of random spec changes against a real server.

Each round makes one random change to a model of the spec files (a new stream, consumer
or KeyValue bucket, a field an update can change, one that needs a replace, or a shrink:
a tighter max_msgs, max_msgs_per_subject or max_age on a stream holding messages,
retention limits → interest, a bucket's shorter history or ttl), applies *without*
``--allow-replace`` or ``--allow-data-loss`` and publishes a few messages. Then:

- a change that loses nothing is applied, and the re-plan is empty;
- a change that destroys data (a replace, a lossy update) is refused as a whole: the
  server is untouched, the re-plan holds only that step (and its stream's consumers),
  and the model goes back to what was applied, as a person reading the refusal would;
- every message published so far is still in its stream (count and first sequence).
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
from harness import consumer_doc, stream_doc, write_specs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.errors import RefusedPlan
from reconciler.execution import run
from reconciler.execution.requests import ApplyRequest, PlanRequest
from reconciler.jetstream import ConnectionOptions, open_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = 5
ROUNDS = 20  # per example: EXAMPLES x ROUNDS rounds in all
STREAMS = ["MODEL_A", "MODEL_B", "MODEL_C"]
CONSUMERS = ["C1", "C2"]
BUCKETS = ["model_kv", "model_cfg"]


class Model:
    """The spec files as a person edits them, and what the server should hold."""

    def __init__(self) -> None:
        self.streams: dict[str, dict[str, Any]] = {}
        self.consumers: dict[tuple[str, str], dict[str, Any]] = {}
        self.buckets: dict[str, dict[str, Any]] = {}
        self.published: dict[str, int] = {}  # stream (KV_<bucket> for buckets) -> messages
        self.destructive = False

    def documents(self) -> list[dict[str, Any]]:
        docs = [stream_doc(name, **fields) for name, fields in sorted(self.streams.items())]
        docs += [consumer_doc(s, c, **f) for (s, c), f in sorted(self.consumers.items())]
        docs += [{"kind": "KeyValue", "name": b, **f} for b, f in sorted(self.buckets.items())]
        return docs

    def snapshot(self) -> tuple[dict, ...]:
        return copy.deepcopy((self.streams, self.consumers, self.buckets))

    def restore(self, saved: tuple[dict, ...]) -> None:
        self.streams, self.consumers, self.buckets = copy.deepcopy(saved)


def _add_stream(model: Model, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(STREAMS), label="stream")
    storage = data.draw(st.sampled_from(["file", "memory"]), label="storage")
    model.streams.setdefault(name, {"storage": storage, "max_msgs": 100_000})


AGES = {"1h": 3600, "2h": 7200, "1d": 86400, "1w": 604800}


def _tweak_stream(model: Model, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(model.streams)), label="stream")
    old_age = model.streams[name].get("max_age")
    field, value = data.draw(
        st.one_of(
            st.tuples(st.just("description"), st.text(max_size=20)),
            st.tuples(st.just("max_msgs"), st.integers(10_000, 10**6)),
            st.tuples(st.just("max_age"), st.sampled_from(["1h", "2h", "1d", "1w"])),
            st.tuples(st.just("max_msgs_per_subject"), st.sampled_from([-1, 5000])),
            st.tuples(st.just("compression"), st.sampled_from(["none", "s2"])),
            st.tuples(st.just("deny_delete"), st.just(True)),  # false→true is an update
        ),
        label="stream field",
    )
    model.streams[name][field] = value
    if field == "max_age" and model.published.get(name):
        # A shorter (or a first) age limit deletes stored messages sooner: lossy.
        model.destructive = old_age is None or AGES[value] < AGES[old_age]


def _shrink_stream(model: Model, data: st.DataObject) -> None:
    """A tighter limit on a stream holding messages, or retention limits → interest."""
    full = sorted(n for n, count in model.published.items() if n in model.streams and count >= 2)
    name = data.draw(st.sampled_from(full), label="stream")
    held = model.published[name]
    field, value = data.draw(
        st.one_of(
            st.tuples(st.just("max_msgs"), st.integers(1, held - 1)),
            st.tuples(st.just("max_msgs_per_subject"), st.integers(1, held - 1)),
            st.tuples(st.just("max_age"), st.just("1s")),
            st.tuples(st.just("retention"), st.just("interest")),
        ),
        label="shrink",
    )
    model.streams[name][field] = value
    model.destructive = True


def _replace_stream(model: Model, data: st.DataObject) -> None:
    fields = model.streams[data.draw(st.sampled_from(sorted(model.streams)), label="stream")]
    fields["storage"] = "memory" if fields.get("storage") == "file" else "file"
    model.destructive = True


def _add_consumer(model: Model, data: st.DataObject) -> None:
    stream = data.draw(st.sampled_from(sorted(model.streams)), label="stream")
    name = data.draw(st.sampled_from(CONSUMERS), label="consumer")
    policy = data.draw(st.sampled_from(["all", "new", "last"]), label="deliver_policy")
    model.consumers.setdefault((stream, name), {"deliver_policy": policy})


def _tweak_consumer(model: Model, data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(model.consumers)), label="consumer")
    field, value = data.draw(
        st.one_of(
            st.tuples(st.just("description"), st.text(max_size=20)),
            st.tuples(st.just("ack_wait"), st.sampled_from(["10s", "30s", "2m"])),
            st.tuples(st.just("max_deliver"), st.sampled_from([-1, 3, 10])),
            st.tuples(st.just("max_ack_pending"), st.integers(1, 5000)),
        ),
        label="consumer field",
    )
    model.consumers[key][field] = value


def _replace_consumer(model: Model, data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(model.consumers)), label="consumer")
    now = model.consumers[key]["deliver_policy"]
    others = [p for p in ("all", "new", "last") if p != now]
    model.consumers[key]["deliver_policy"] = data.draw(st.sampled_from(others))
    model.destructive = True


def _add_bucket(model: Model, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(BUCKETS), label="bucket")
    storage = data.draw(st.sampled_from(["file", "memory"]), label="storage")
    model.buckets.setdefault(name, {"storage": storage, "history": 1})


def _tweak_bucket(model: Model, data: st.DataObject) -> None:
    fields = model.buckets[data.draw(st.sampled_from(sorted(model.buckets)), label="bucket")]
    if data.draw(st.booleans(), label="history"):  # only grows: a shorter history drops
        fields["history"] = min(64, fields["history"] + data.draw(st.integers(1, 5)))
    else:
        fields["description"] = data.draw(st.text(max_size=20), label="description")


def _shrink_bucket(model: Model, data: st.DataObject) -> None:
    """A shorter ttl, or less history than the bucket holds revisions of."""
    full = sorted(b for b in model.buckets if model.published.get(f"KV_{b}", 0) >= 2)
    name = data.draw(st.sampled_from(full), label="bucket")
    fields = model.buckets[name]
    if fields["history"] > 1 and data.draw(st.booleans(), label="history"):
        fields["history"] = 1  # it holds at least 2 revisions: some go
    else:
        fields["ttl"] = "1s"
    model.destructive = True


def _replace_bucket(model: Model, data: st.DataObject) -> None:
    fields = model.buckets[data.draw(st.sampled_from(sorted(model.buckets)), label="bucket")]
    fields["storage"] = "memory" if fields["storage"] == "file" else "file"
    model.destructive = True


def _publish_to(model: Model, data: st.DataObject) -> None:
    targets = sorted(model.streams) + [f"KV_{b}" for b in sorted(model.buckets)]
    name = data.draw(st.sampled_from(targets), label="publish to")
    model.published.setdefault(name, 0)


EDITS = {
    "add_stream": (_add_stream, lambda m: True),
    "tweak_stream": (_tweak_stream, lambda m: bool(m.streams)),
    "replace_stream": (_replace_stream, lambda m: bool(m.streams)),
    "shrink_stream": (
        _shrink_stream,
        lambda m: any(n in m.streams and c >= 2 for n, c in m.published.items()),
    ),
    "add_consumer": (_add_consumer, lambda m: bool(m.streams)),
    "tweak_consumer": (_tweak_consumer, lambda m: bool(m.consumers)),
    "replace_consumer": (_replace_consumer, lambda m: bool(m.consumers)),
    "add_bucket": (_add_bucket, lambda m: True),
    "tweak_bucket": (_tweak_bucket, lambda m: bool(m.buckets)),
    "replace_bucket": (_replace_bucket, lambda m: bool(m.buckets)),
    "shrink_bucket": (
        _shrink_bucket,
        lambda m: any(m.published.get(f"KV_{b}", 0) >= 2 for b in m.buckets),
    ),
    "publish": (_publish_to, lambda m: bool(m.streams or m.buckets)),
}


def mutate(model: Model, data: st.DataObject) -> str:
    """One random edit of the model; its name."""
    model.destructive = False
    possible = sorted(name for name, (_, allowed) in EDITS.items() if allowed(model))
    action = data.draw(st.sampled_from(possible), label="edit")
    EDITS[action][0](model, data)
    return action


class Round:
    """Apply the model, re-plan, and check the invariants."""

    def __init__(self, url: str, folder: Path) -> None:
        self.options = ConnectionOptions(servers=url)
        self.folder = folder
        self.messages_checked = 0

    async def live(self) -> dict[str, dict[str, Any]]:
        async with open_client(self.options) as client:
            return {i["config"]["name"]: i for i in await client.list_streams()}

    async def publish(self, model: Model, count: int) -> None:
        async with open_client(self.options) as client:
            for name in model.published:
                for _ in range(count):
                    await client.publish(self._subject(name, model.published[name]), b"payload")
                    model.published[name] += 1

    @staticmethod
    def _subject(stream: str, index: int) -> str:
        if stream.startswith("KV_"):
            return f"$KV.{stream[3:]}.key{index}"  # a new key each time: history never drops
        return f"{stream.lower()}.m"

    async def play(self, model: Model, applied: tuple[dict, ...]) -> tuple[dict, ...]:
        wanted = PlanRequest.of([write_specs(self.folder, model.documents())], self.options)
        before = await self.live()
        try:
            await run.apply_for(ApplyRequest(plan=wanted, lock_timeout=10))
        except RefusedPlan:
            assert model.destructive, "an edit that loses nothing was refused"
            after = await self.live()
            assert {n: i["config"] for n, i in after.items()} == {
                n: i["config"] for n, i in before.items()
            }, "a refused plan changed the server"
            self._only_replaces(await run.plan_for(wanted))
            model.restore(applied)
            return applied
        assert not model.destructive, "a change destroying data was applied without the flag"
        replan = await run.plan_for(wanted)
        assert not replan.has_changes, replan.to_json()["changes"]
        return model.snapshot()

    @staticmethod
    def _only_replaces(plan: Any) -> None:
        changes = plan.to_json()["changes"]
        replaced = {
            c["name"] for c in changes if c["action"] == "replace" and c["kind"] == "Stream"
        }
        for change in changes:
            ok = change["destructive"] or change.get("stream") in replaced
            assert ok, f"the re-plan holds more than the refused step: {changes}"
        assert changes, "a refused plan must show its destructive step"

    async def check_messages(self, model: Model) -> None:
        live = await self.live()
        for name, count in model.published.items():
            state = live[name]["state"]
            assert state["messages"] == count, f"{name}: {state['messages']} of {count} messages"
            if count:
                assert state["first_seq"] == 1, f"{name}: messages lost from the front"
            self.messages_checked += count


def test_random_spec_changes_never_lose_a_message(server_factory, tmp_path: Path, figures):
    server = server_factory()
    rounds: list[str] = []
    checker = Round(server.url, tmp_path / "specs")

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(st.data())
    def play(data: st.DataObject) -> None:
        model = Model()
        applied = model.snapshot()
        try:
            for _ in range(ROUNDS):
                what = mutate(model, data)
                applied = asyncio.run(checker.play(model, applied))
                count = data.draw(st.integers(0, 20), label="messages")
                asyncio.run(checker.publish(model, count))
                asyncio.run(checker.check_messages(model))
                rounds.append(what)
        finally:
            from servers import delete_all_streams

            asyncio.run(delete_all_streams(server.url))

    play()

    assert len(rounds) >= 50
    figures.add("rounds_run", len(rounds))
    figures.add("refused_replaces", sum(r.startswith("replace") for r in rounds))
    figures.add("refused_shrinks", sum(r.startswith("shrink") for r in rounds))
    figures.add("messages_checked", checker.messages_checked)
