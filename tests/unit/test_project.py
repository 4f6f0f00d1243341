"""The project file and overlays: parsing, FILE:LINE errors, JSON Merge Patch semantics."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.errors import SpecError
from reconciler.specs.overlay import merge_patch
from reconciler.specs.project import load_project
from reconciler.specs.validate import load_specs

PROJECT = """\
owner: payments
specs: [specs]
environments:
  dev:
    embedded: true
    overlays: [overlays/dev]
  prod:
    servers: [nats://n1:4222, nats://n2:4222]
    user: deployer
    password: {env: PROD_NATS_PASSWORD}
    creds: secrets/prod.creds
    domain: hub
    overlays: [overlays/prod]
    resources: [only-prod]
"""

BASE = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_bytes: 1GiB
placement: {cluster: c1, tags: [ssd]}
---
kind: Consumer
stream: ORDERS
name: ship
ack_policy: explicit
max_deliver: 5
---
kind: KeyValue
name: config
history: 5
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_project_names_its_environments_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    write(tmp_path, {"reconcile.yaml": PROJECT})
    project = load_project(tmp_path / "reconcile.yaml")
    assert project.owner == "payments"
    assert project.specs == (tmp_path / "specs",)
    prod = project.environment("prod")
    assert prod.domain == "hub"
    assert project.spec_paths(prod) == [tmp_path / "specs", tmp_path / "only-prod"]
    values = prod.connection({"PROD_NATS_PASSWORD": "pw-from-env"})
    assert values == {
        "servers": "nats://n1:4222,nats://n2:4222",
        "user": "deployer",
        "password": "pw-from-env",
        "creds": str(tmp_path / "secrets" / "prod.creds"),
        "domain": "hub",
    }
    described = str(prod.describe())
    assert "$PROD_NATS_PASSWORD" in described and "pw-from-env" not in described
    assert project.environment("dev").describe()["servers"] == "embedded nats-server"


def test_an_unset_variable_is_an_error_naming_the_field_and_line_never_a_value(
    tmp_path: Path,
) -> None:
    write(tmp_path, {"reconcile.yaml": PROJECT})
    prod = load_project(tmp_path / "reconcile.yaml").environment("prod")
    with pytest.raises(SpecError) as unset:
        prod.connection({})
    assert str(unset.value.problems[0]) == (
        f"{tmp_path / 'reconcile.yaml'}:10: environments.prod.password: "
        "environment variable PROD_NATS_PASSWORD is not set (or empty)"
    )


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (PROJECT.replace("{env: PROD_NATS_PASSWORD}", "hunter2"), 10, "write {env: NAME}"),
        (PROJECT.replace("n1:4222,", "ops:s3cret@n1:4222,"), 8, "carries credentials"),
        (PROJECT.replace("    domain: hub", "    domian: hub"), 12, "did you mean 'domain'"),
        (PROJECT.replace("specs: [specs]", "specs: []"), 2, "should be non-empty"),
        (PROJECT.replace("  prod:", "  'bad name':"), 3, "'bad name' does not match"),
    ],
)
def test_project_errors_are_reported_at_their_line(
    tmp_path: Path, text: str, where: int, message: str
) -> None:
    write(tmp_path, {"reconcile.yaml": text})
    with pytest.raises(SpecError) as bad:
        load_project(tmp_path / "reconcile.yaml")
    said = str(bad.value)
    assert f"reconcile.yaml:{where}:" in said and message in said, said
    assert "hunter2" not in said and "s3cret" not in said


def test_an_unknown_environment_gets_a_did_you_mean(tmp_path: Path) -> None:
    write(tmp_path, {"reconcile.yaml": PROJECT})
    with pytest.raises(SpecError, match=r"no environment 'prdo' \(did you mean 'prod'\?\)"):
        load_project(tmp_path / "reconcile.yaml").environment("prdo")


def test_an_unknown_environment_is_reported_at_the_environments_line(tmp_path: Path) -> None:
    """`--env nope` named reconcile.yaml:1 (a comment in the shipped examples), not the
    line of `environments:` where the known ones are."""
    write(tmp_path, {"reconcile.yaml": "# a comment\n" + PROJECT})
    with pytest.raises(SpecError) as bad:
        load_project(tmp_path / "reconcile.yaml").environment("nope")
    assert str(bad.value).startswith(f"{tmp_path / 'reconcile.yaml'}:4: environments: "), bad.value


def test_overlays_merge_fields_replace_lists_remove_nulls_and_delete_resources(
    tmp_path: Path,
) -> None:
    overlay = """\
kind: Stream
name: ORDERS
max_bytes: 10GiB
num_replicas: 3
placement: {tags: [nvme, fast]}
---
kind: Consumer
stream: ORDERS
name: ship
max_deliver: null
---
kind: KeyValue
name: config
$patch: delete
"""
    write(tmp_path, {"specs/base.yaml": BASE, "overlays/prod.yaml": overlay})
    specs = {
        s.ref.label: s for s in load_specs([tmp_path / "specs"], overlays=[tmp_path / "overlays"])
    }
    assert set(specs) == {"Stream ORDERS", "Consumer ORDERS/ship"}
    orders = specs["Stream ORDERS"]
    assert orders.config["max_bytes"] == 10 * 2**30 and orders.config["num_replicas"] == 3
    assert orders.config["placement"] == {"cluster": "c1", "tags": ["nvme", "fast"]}
    assert orders.config["subjects"] == ["orders.>"]
    assert str(orders.where("max_bytes")).endswith("overlays/prod.yaml:3")
    assert str(orders.where("subjects")).endswith("specs/base.yaml:3")
    assert orders.written["max_bytes"] == "10GiB"
    assert "max_deliver" not in specs["Consumer ORDERS/ship"].config


def test_a_bad_merged_value_names_the_overlay_line_and_the_base(tmp_path: Path) -> None:
    overlay = "kind: Stream\nname: ORDERS\nmax_bytes: lots\nretention: forever\n"
    write(tmp_path, {"specs/base.yaml": BASE, "overlays/o.yaml": overlay})
    with pytest.raises(SpecError) as bad:
        load_specs([tmp_path / "specs"], overlays=[tmp_path / "overlays"])
    lines = [str(p) for p in bad.value.problems]
    base, over = tmp_path / "specs/base.yaml", tmp_path / "overlays/o.yaml"
    assert any(
        line.startswith(f"{over}:4: retention:")
        and f"(in {base}:1 merged with the overlay at {over}:1)" in line
        for line in lines
    ), lines


@pytest.mark.parametrize(
    ("overlay", "message"),
    [
        (
            "kind: Stream\nname: ORDRES\nmax_bytes: 1\n",
            "no such resource in the shared specs (did you mean 'ORDERS'?)",
        ),
        ("kind: Consumer\nstream: ORDERS\nname: nope\n", "Consumer ORDERS/nope: no such resource"),
        ("name: ORDERS\nmax_bytes: 1\n", "an overlay names its resource"),
        ("kind: Stream\nname: ORDERS\n$patch: replace\n", "'replace' is not one of merge, delete"),
        ("kind: Stream\nname: ORDERS\nunknown_field: 1\n", "unknown field"),
    ],
)
def test_broken_overlays_are_refused_at_their_line(
    tmp_path: Path, overlay: str, message: str
) -> None:
    write(tmp_path, {"specs/base.yaml": BASE, "overlays/o.yaml": overlay})
    with pytest.raises(SpecError) as bad:
        load_specs([tmp_path / "specs"], overlays=[tmp_path / "overlays"])
    said = str(bad.value)
    assert message in said and f"{tmp_path / 'overlays/o.yaml'}:" in said, said


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(json_values, json_values)
def test_merge_patch_follows_rfc_7386(target: object, patch: object) -> None:
    merged = merge_patch(target, patch)
    if not isinstance(patch, dict):
        assert merged == patch
        return
    assert isinstance(merged, dict)
    for key, value in patch.items():
        if value is None:
            assert key not in merged
        elif not isinstance(value, dict):
            assert merged[key] == value
    if isinstance(target, dict):
        for key in set(target) - set(patch):
            assert merged[key] == target[key]
    assert merge_patch(merged, patch) == merged  # idempotent


def test_merge_patch_examples_from_the_rfc() -> None:
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    assert merge_patch([1, 2], {"a": "b", "c": None}) == {"a": "b"}
    assert merge_patch({}, {"a": {"bb": {"ccc": None}}}) == {"a": {"bb": {}}}
