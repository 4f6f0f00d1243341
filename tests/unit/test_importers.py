"""The importers' registry: every `--from` name is one importer returning one result type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.cli.import_cmd import _own_folders, import_
from reconciler.errors import SpecError
from reconciler.importers import IMPORTERS, ImportResult, importer, read


def test_the_import_command_offers_exactly_the_registered_importers() -> None:
    choices = next(p for p in import_.params if p.name == "source").type.choices  # type: ignore[attr-defined]
    assert list(choices) == list(IMPORTERS) == ["nats-cli", "terraform", "nack"]


@pytest.mark.parametrize("name", list(IMPORTERS))
def test_each_registered_importer_has_a_read_function(name: str) -> None:
    assert callable(importer(name))


def test_an_unknown_importer_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        importer("pulumi")


def test_every_importer_returns_an_import_result(tmp_path: Path) -> None:
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "orders.json").write_text(
        json.dumps({"name": "ORDERS", "subjects": ["orders.>"], "retention": "limits"})
    )
    (tmp_path / "nack.yaml").write_text(
        "apiVersion: jetstream.nats.io/v1beta2\nkind: Stream\n"
        "metadata: {name: orders}\nspec: {name: ORDERS, subjects: [orders.>]}\n"
        "---\napiVersion: jetstream.nats.io/v1beta2\nkind: Account\n"
        "metadata: {name: prod}\nspec: {name: prod, servers: [nats://127.0.0.1:4222]}\n"
    )
    (tmp_path / "main.tf").write_text(
        'resource "jetstream_stream" "ORDERS" {\n  name = "ORDERS"\n  subjects = ["orders.>"]\n}\n'
    )
    found = {
        "nats-cli": read("nats-cli", [tmp_path / "cli"]),
        "nack": read("nack", [tmp_path / "nack.yaml"]),
        "terraform": read("terraform", [tmp_path / "main.tf"]),
    }
    for result in found.values():
        assert isinstance(result, ImportResult)
        assert [(s.kind, s.name) for s in result.specs] == [("Stream", "ORDERS")]
    assert list(found["nack"].environments) == ["prod"]
    assert found["nats-cli"].environments == found["terraform"].environments == {}


def test_an_importer_raises_every_problem_as_one_spec_error(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(
        'resource "jetstream_stream" "S" {\n  name = var.name\n  subjects = ["s"]\n}\n'
    )
    with pytest.raises(SpecError) as raised:
        read("terraform", [tmp_path / "main.tf"])
    assert f"{tmp_path / 'main.tf'}:2" in str(raised.value)


def test_nack_account_folders_differing_only_in_case_are_kept_apart_the_same_each_time(
    tmp_path: Path,
) -> None:
    """Two Accounts ``Team`` and ``team`` (the manifests' check refuses the first as no
    Kubernetes name; the folders do not count on it): folders a case-insensitive disk
    keeps apart (the export's ``apart_in_case``), the same on each import; an Account
    with no twin keeps ``OUT-<name>``."""
    out = tmp_path / "specs"
    folders = _own_folders(["team", "Team", "ops"], {}, out, None)
    assert folders["ops"] == tmp_path / "specs-ops"
    assert folders["Team"] == tmp_path / "specs-Team"
    assert folders["team"].name.startswith("specs-team~")
    assert len({f.name.lower() for f in folders.values()}) == 3
    assert _own_folders(["Team", "ops", "team"], {}, out, None) == folders
