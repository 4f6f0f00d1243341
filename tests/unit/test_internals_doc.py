"""docs/internals.md lists every module of the package, and no module that is gone;
pyproject.toml ships every package."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "reconciler"
TREE_HEADING = "## The tree reads like the pipeline"


def documented() -> set[str]:
    """The modules the tree of docs/internals.md names, as ``package/module.py``."""
    text = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
    block = text.split(TREE_HEADING, 1)[1].split("```")[1]
    found: set[str] = set()
    package: str | None = None
    for line in block.splitlines()[1:]:  # the first line is the block's language, if any
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            package = None if line.strip() else package  # another top-level folder
            continue
        head = re.match(r"(\w+)/(\s|$)", line.strip())
        if indent == 2 and head:
            package = head.group(1)
            continue
        if indent == 2:
            package = ""
        if package is None:
            continue
        for name in re.findall(r"\b(\w+\.py)\b", line):
            found.add(f"{package}/{name}" if package else name)
    return found


def on_disk() -> set[str]:
    return {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts and path.name != "__init__.py"
    } | {"__init__.py"}


def test_every_module_is_in_the_internals_tree() -> None:
    assert sorted(on_disk() - documented()) == []


def test_the_internals_tree_names_no_module_that_is_gone() -> None:
    assert sorted(documented() - on_disk()) == []


def test_every_package_ships_in_a_non_editable_install() -> None:
    """``[tool.setuptools] packages`` lists every package: one missing there is missing
    from a wheel (the GitHub Action's install) while an editable install still works."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    packages = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for top in ("reconciler", "pulumi_provider", "action")
        for path in (ROOT / top).rglob("__init__.py")
    }
    assert sorted(packages - listed) == []
