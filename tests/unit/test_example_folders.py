"""Every folder of examples/ is recognised by what it holds (tests/example_folders.py),
and the folders that hold no specs are checked in their own way: the starter policies
compile, the agent's command lines use only flags `reconcile watch` has. The folders
holding specs are planned and applied on a real server
(tests/integration/test_plan_apply.py::test_every_example_applies_then_plans_empty)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from example_folders import EXAMPLES, example_folders, kind_of, spec_folders

from reconciler.specs.policy import load_policy

pytestmark = pytest.mark.unit


def test_every_example_folder_is_recognised() -> None:
    kinds = {folder.name: kind_of(folder) for folder in example_folders()}
    assert "unknown" not in kinds.values(), kinds
    assert {"shop", "buckets", "workqueue", "environments", "lifecycle"} <= set(spec_folders())
    assert kinds["policies"] == "policies" and kinds["agent"] == "deployment"


@pytest.mark.parametrize(
    "folder", [f for f in example_folders() if kind_of(f) == "policies"], ids=lambda f: f.name
)
def test_example_policies_compile(folder: Path) -> None:
    files = sorted(folder.glob("*.y*ml"))
    assert load_policy(files).rules


def _watch_flags() -> set[str]:
    shown = subprocess.run(
        [sys.executable, "-m", "reconciler", "watch", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return set(re.findall(r"--[a-z][a-z-]*", shown))


def _command_lines(folder: Path) -> list[str]:
    """The `reconcile watch` command lines of a folder: a systemd unit's ExecStart (its
    continued lines joined) and a Dockerfile's exec-form ENTRYPOINT."""
    lines = []
    for path in sorted(folder.iterdir()):
        text = path.read_text(encoding="utf-8").replace("\\\n", " ")
        lines += re.findall(r"^ExecStart=(.*)$", text, re.MULTILINE)
        lines += [" ".join(json.loads(m)) for m in re.findall(r"^ENTRYPOINT (\[.*\])$", text, re.M)]
    return [line for line in lines if "reconcile" in line and " watch" in line]


@pytest.mark.parametrize(
    "folder",
    [f for f in example_folders() if kind_of(f) in ("no-specs", "deployment")],
    ids=lambda f: f.name,
)
def test_example_command_lines_use_real_flags(folder: Path) -> None:
    commands = _command_lines(folder)
    assert commands, f"{folder.relative_to(EXAMPLES)} holds no spec and no reconcile command"
    flags = _watch_flags()
    for command in commands:
        used = set(re.findall(r"(?<!\S)--[a-z][a-z-]*", command))
        assert used and used <= flags, (command, used - flags)


def test_the_dr_docs_excerpt_is_the_shipped_spec() -> None:
    """docs/dr.md shows examples/dr/specs/orders.yaml; the file also declared a
    description, max_age and the consumer's max_deliver, so the plan a new user ran
    showed fields the page never mentioned. The excerpt's documents are the file's."""
    import yaml

    page = (EXAMPLES.parent / "docs" / "dr.md").read_text(encoding="utf-8")
    marker = "# examples/dr/specs/orders.yaml\n"
    excerpt = page[page.index(marker) :].split("```", 1)[0]
    shipped = (EXAMPLES / "dr" / "specs" / "orders.yaml").read_text(encoding="utf-8")
    assert list(yaml.safe_load_all(excerpt)) == list(yaml.safe_load_all(shipped))
