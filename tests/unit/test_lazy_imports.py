"""What a command does not use is not imported (issue 31): `reconcile --help` and
`--version` load no Spark, Pulumi, rich nor jsonschema, and a plan of valid specs loads no
jsonschema (jsonschema-rs says yes to valid documents; jsonschema only explains errors).

Each check runs a fresh interpreter and reads its ``sys.modules``: no time is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("pyspark", "pulumi", "rich", "jsonschema", "referencing", "deepdiff", "tree_sitter")


def _loaded_after(code: str, cwd: Path) -> set[str]:
    """The top-level packages in ``sys.modules`` once ``code`` ran in a fresh process."""
    probe = (
        "import json, sys\n"
        f"{code}\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def _cli(*args: str) -> str:
    return (
        "from reconciler.cli import cli\n"
        f"cli.main(args={list(args)!r}, prog_name='reconcile', standalone_mode=False)"
    )


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("plan", "--help")])
def test_help_and_version_import_nothing_heavy(args: tuple[str, ...], tmp_path: Path) -> None:
    loaded = _loaded_after(_cli(*args), tmp_path)
    assert "click" in loaded  # the probe ran the command
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_validating_valid_specs_does_not_import_jsonschema(tmp_path: Path) -> None:
    (tmp_path / "orders.yaml").write_text(
        'kind: Stream\nname: ORDERS\nsubjects: ["orders.>"]\n---\n'
        "kind: Consumer\nstream: ORDERS\nname: worker\nack_policy: explicit\n",
        encoding="utf-8",
    )
    code = (
        "from reconciler.execution import run\n"
        "from reconciler.specs.validate import load_specs\n"
        "assert len(load_specs(['orders.yaml'])) == 2"
    )
    loaded = _loaded_after(code, tmp_path)
    assert "jsonschema_rs" in loaded  # the quick yes answered
    assert not loaded & {"jsonschema", "referencing", "rich", "pyspark", "pulumi"}


def test_an_invalid_spec_is_still_explained(tmp_path: Path) -> None:
    """jsonschema, loaded on demand, still names the field and the line."""
    (tmp_path / "orders.yaml").write_text(
        "kind: Stream\nname: ORDERS\nsubjects: [a]\nstorage: memry\n", encoding="utf-8"
    )
    code = (
        "from reconciler.errors import SpecError\n"
        "from reconciler.specs.validate import load_specs\n"
        "try:\n"
        "    load_specs(['orders.yaml'])\n"
        "except SpecError as err:\n"
        "    print(str(err).splitlines()[0], file=sys.stderr)\n"
    )
    probe = f"import sys\n{code}"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stderr.startswith("orders.yaml:4:") and "'memory'" in done.stderr
