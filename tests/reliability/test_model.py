"""No data loss: a model-based run of random spec changes against a real server.

Each round makes one random change to a model of the spec files (a new stream or
consumer, a field an update can change, or one that needs a replace), publishes a few
messages, and applies *without* ``--allow-replace``. Then:

- a change an update can make is applied, and the re-plan is empty;
- a change that needs a replace is refused as a whole: the server is untouched, the
  re-plan holds only that replace (and its stream's consumers), and the model goes
  back to what was applied, as a person reading the refusal would;
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

from reconciler import run
from reconciler.errors import RefusedPlan
from reconciler.jetstream import ConnectionOptions, open_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = 5
ROUNDS = 20  # per example: EXAMPLES x ROUNDS rounds in all
STREAMS = ["MODEL_A", "MODEL_B", "MODEL_C"]
CONSUMERS = ["C1", "C2"]


class Model:
    """The spec files as a person edits them, and what the server should hold."""

    def __init__(self) -> None:
        self.streams: dict[str, dict[str, Any]] = {}
        self.consumers: dict[tuple[str, str], dict[str, Any]] = {}
        self.published: dict[str, int] = {}
        self.destructive = False

    def documents(self) -> list[dict[str, Any]]:
        docs = [stream_doc(name, **fields) for name, fields in sorted(self.streams.items())]
        docs += [consumer_doc(s, c, **f) for (s, c), f in sorted(self.consumers.items())]
        return docs

    def snapshot(self) -> tuple[dict, dict]:
        return copy.deepcopy(self.streams), copy.deepcopy(self.consumers)

    def restore(self, saved: tuple[dict, dict]) -> None:
        self.streams, self.consumers = copy.deepcopy(saved[0]), copy.deepcopy(saved[1])


def mutate(model: Model, data: st.DataObject) -> str:
    """One random edit of the model; says what it was."""
    model.destructive = False
    choices = ["add_stream"]
    if model.streams:
        choices += ["tweak_stream", "add_consumer", "publish", "replace_stream"]
    if model.consumers:
        choices += ["tweak_consumer", "replace_consumer"]
    action = data.draw(st.sampled_from(choices), label="action")
    if action == "add_stream":
        name = data.draw(st.sampled_from(STREAMS), label="stream")
        storage = data.draw(st.sampled_from(["file", "memory"]), label="storage")
        model.streams.setdefault(name, {"storage": storage, "max_msgs": 100_000})
    elif action == "tweak_stream":
        name = data.draw(st.sampled_from(sorted(model.streams)), label="stream")
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
    elif action == "replace_stream":
        name = data.draw(st.sampled_from(sorted(model.streams)), label="stream")
        fields = model.streams[name]
        fields["storage"] = "memory" if fields.get("storage") == "file" else "file"
        model.destructive = True
    elif action == "add_consumer":
        stream = data.draw(st.sampled_from(sorted(model.streams)), label="stream")
        name = data.draw(st.sampled_from(CONSUMERS), label="consumer")
        policy = data.draw(st.sampled_from(["all", "new", "last"]), label="deliver_policy")
        model.consumers.setdefault((stream, name), {"deliver_policy": policy})
    elif action == "tweak_consumer":
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
    elif action == "replace_consumer":
        key = data.draw(st.sampled_from(sorted(model.consumers)), label="consumer")
        now = model.consumers[key]["deliver_policy"]
        others = [p for p in ("all", "new", "last") if p != now]
        model.consumers[key]["deliver_policy"] = data.draw(st.sampled_from(others))
        model.destructive = True
    else:  # publish: only to streams the server already has
        name = data.draw(st.sampled_from(sorted(model.streams)), label="stream")
        model.published[name] = model.published.get(name, 0)
        return f"publish {name}"
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
                    await client.publish(f"{name.lower()}.m", b"payload")
                model.published[name] += count

    async def play(self, model: Model, applied: tuple[dict, dict]) -> tuple[dict, dict]:
        paths = [write_specs(self.folder, model.documents())]
        before = await self.live()
        try:
            await run.apply(paths, self.options, allow_replace=False, lock_timeout=10)
        except RefusedPlan:
            assert model.destructive, "an edit an update can make was refused"
            after = await self.live()
            assert {n: i["config"] for n, i in after.items()} == {
                n: i["config"] for n, i in before.items()
            }, "a refused plan changed the server"
            self._only_replaces(await run.plan(paths, self.options))
            model.restore(applied)
            return applied
        assert not model.destructive, "a change needing a replace was applied without the flag"
        replan = await run.plan(paths, self.options)
        assert not replan.has_changes, replan.to_json()["changes"]
        return model.snapshot()

    @staticmethod
    def _only_replaces(plan: Any) -> None:
        changes = plan.to_json()["changes"]
        replaced = {
            c["name"] for c in changes if c["action"] == "replace" and c["kind"] == "Stream"
        }
        for change in changes:
            ok = change["action"] == "replace" or change.get("stream") in replaced
            assert ok, f"the re-plan holds more than the refused replace: {changes}"
        assert changes, "a refused plan must show its replace"

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
    figures.add("messages_checked", checker.messages_checked)
