"""Properties of the engine over random valid configs, and a loader fuzzed with garbage.

- the diff of a config with itself is empty, on every server version;
- a live state holding exactly the desired configs plans no change;
- wire configs → human units (export form) → validation gives the same configs back;
- export then plan is empty against a real server, for random resource sets;
- the loader and the validation raise nothing but SpecError on fuzzed YAML and JSON.

(Durations and sizes round-trip through their human form in ``tests/unit/test_units.py``.)
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import SERVERS, resource_set

from reconciler.errors import SpecError
from reconciler.locations import Location
from reconciler.model.diff import diff_configs
from reconciler.model.normalize import desired_config
from reconciler.model.state import LiveState
from reconciler.planning.plan import build_plan
from reconciler.specs.document import Document
from reconciler.specs.loader import load_documents
from reconciler.specs.units import to_human
from reconciler.specs.validate import load_specs, validate_documents

# The ``figures`` fixture only counts examples, so sharing it across them is intended.
SHARED = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
PURE = settings(max_examples=150, deadline=None, suppress_health_check=SHARED)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=SHARED)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _specs(documents: list[dict[str, Any]]) -> list[Any]:
    return validate_documents(
        [
            Document(body=dict(d), source=Location("gen.yaml", i + 1))
            for i, d in enumerate(documents)
        ]
    )


def _desired_state(specs: list[Any], server: Any) -> LiveState:
    streams = {s.stream_name: desired_config(s, server) for s in specs if s.kind != "Consumer"}
    consumers = {
        (s.stream_name, s.name): desired_config(s, server, stream_config=streams[s.stream_name])
        for s in specs
        if s.kind == "Consumer"
    }
    return LiveState(server=server, streams=streams, consumers=consumers)


@PURE
@given(resource_set(), st.sampled_from(SERVERS))
def test_diff_of_a_config_with_itself_is_empty(figures, documents, server) -> None:
    figures.add("inputs_tried")
    for desired in _desired_state(_specs(documents), server).streams.values():
        assert diff_configs(desired, desired) == []


@PURE
@given(resource_set(), st.sampled_from(SERVERS))
def test_a_server_holding_the_desired_configs_plans_no_change(figures, documents, server) -> None:
    figures.add("inputs_tried")
    specs = _specs(documents)

    plan = build_plan(specs, _desired_state(specs, server))

    assert not plan.has_changes, plan.to_json()["changes"]


@PURE
@given(resource_set())
def test_wire_configs_survive_the_human_units_round_trip(figures, documents) -> None:
    figures.add("inputs_tried")
    specs = _specs(documents)
    human = []
    for spec in specs:
        head = {"kind": spec.kind, "name": spec.name}
        if spec.stream:
            head["stream"] = spec.stream
        human.append({**head, **to_human(spec.kind, dict(spec.config))})

    again = _specs(human)

    assert [dict(s.config) for s in again] == [dict(s.config) for s in specs]


# --- export then plan, against a real server ------------------------------------------------


@pytest.mark.integration
def test_export_then_plan_is_empty_for_random_resource_sets(
    server_factory, tmp_path: Path, figures
) -> None:
    server = server_factory()
    from reconciler.execution import run
    from reconciler.jetstream import ConnectionOptions, open_client
    from reconciler.planning.export import export_state

    options = ConnectionOptions(servers=server.url)
    tried = []

    async def round_trip(documents: list[dict[str, Any]], folder: Path) -> Any:
        async with open_client(options) as client:
            info = await client.server_info()
            live = _desired_state(_specs(documents), info)
            for config in live.streams.values():  # as another tool would have created them
                await client.create_stream(dict(config))
            for (stream, _), config in live.consumers.items():
                await client.create_consumer(stream, dict(config), action="create")
            exported = export_state(await client.fetch_live())
            for item in exported:
                (folder / item.name).write_text(yaml.safe_dump_all(list(item.documents)))
            specs = load_specs([folder])
            plan = await run.plan_with(client, specs)
            for name in live.streams:
                await client.delete_stream(name)
            return plan

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(resource_set())
    def check(documents: list[dict[str, Any]]) -> None:
        folder = Path(tempfile.mkdtemp(dir=tmp_path))
        plan = asyncio.run(round_trip(documents, folder))
        tried.append(len(documents))
        assert not plan.has_changes, (documents, plan.to_json()["changes"])

    check()
    figures.add("inputs_tried", len(tried))


# --- loader fuzzing ---------------------------------------------------------------------------


def _seed_texts() -> list[str]:
    return [p.read_text() for p in sorted(EXAMPLES.rglob("*.yaml"))] or ["kind: Stream\nname: A\n"]


SEEDS = _seed_texts()
YAML_NOISE = [*"-:[]{}&*!|>'\"#%@`,?\n\t ", "<<: *a", "&a ", "!!python/object:os.system", "---\n"]


@st.composite
def mutated_yaml(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    rng = random.Random(draw(st.integers(0, 2**32)))
    chars = list(text)
    for _ in range(draw(st.integers(1, 12))):
        at = rng.randrange(len(chars) + 1)
        match rng.randrange(3):
            case 0:
                chars.insert(at, rng.choice(YAML_NOISE))
            case 1 if chars:
                del chars[min(at, len(chars) - 1)]
            case _:
                chars[at:at] = list(draw(st.text(max_size=8)))
    return "".join(chars)


def _load_and_validate(text: str | bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"fuzz{suffix}"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            validate_documents(load_documents([path]))
        except SpecError as err:
            assert err.problems, "a SpecError carries its problems"
            assert all(str(p) for p in err.problems)


@FUZZ
@given(mutated_yaml())
def test_loader_raises_only_spec_error_on_mutated_yaml(figures, text: str) -> None:
    figures.add("inputs_tried")
    _load_and_validate(text, ".yaml")


@FUZZ
@given(st.text(max_size=300))
def test_loader_raises_only_spec_error_on_random_text(figures, text: str) -> None:
    figures.add("inputs_tried")
    _load_and_validate(text, ".yaml")
    _load_and_validate(text, ".json")


@FUZZ
@given(st.binary(max_size=300))
def test_loader_raises_only_spec_error_on_random_bytes(figures, data: bytes) -> None:
    figures.add("inputs_tried")
    _load_and_validate(data, ".yaml")
    _load_and_validate(data, ".json")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "kind",
                "name",
                "stream",
                "subjects",
                "max_age",
                "config",
                "type",
                "configuration",
                "checksum",
                "ack_policy",
                "storage",
            ]
        ),
        json_values,
        max_size=6,
    )
)
def test_loader_raises_only_spec_error_on_random_json_documents(
    figures, body: dict[str, Any]
) -> None:
    figures.add("inputs_tried")
    _load_and_validate(json.dumps(body), ".json")
    _load_and_validate(json.dumps([body, body]), ".json")
    _load_and_validate(yaml.safe_dump(body), ".yaml")
