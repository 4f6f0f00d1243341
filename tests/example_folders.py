"""What each folder of examples/ holds, read from its files (not from a list of names),
so a test iterating over the examples plans the folders that hold specs and a new folder
of another kind is recognised (or fails loudly as unknown), never skipped blindly.

Kinds: ``project`` (a reconcile.yaml; its specs in ``specs/``), ``specs`` (every YAML
document has a ``kind``), ``policies`` (every YAML file has ``rules:``), ``pulumi`` (a
Pulumi.yaml), ``workflows`` (GitHub workflows: ``jobs:``), ``deployment`` (how the agent
is run: Kubernetes manifests, whose documents have ``apiVersion``, beside a Dockerfile and
a systemd unit; no spec), ``no-specs`` (no YAML or JSON file at all), ``unknown``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: The kinds whose folder holds specs the tool plans (project: its ``specs/``).
SPEC_KINDS = frozenset({"project", "specs"})


def _yaml_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in {".yaml", ".yml"})


def _documents(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _all(files: list[Path], key: str) -> bool:
    docs = [doc for path in files for doc in _documents(path)]
    return bool(docs) and all(isinstance(doc, dict) and key in doc for doc in docs)


def kind_of(folder: Path) -> str:
    """What ``folder`` (one of examples/) holds."""
    if (folder / "reconcile.yaml").is_file():
        return "project"
    if (folder / "Pulumi.yaml").is_file():
        return "pulumi"
    files = _yaml_files(folder)
    if not files and not any(folder.rglob("*.y*ml")) and not any(folder.rglob("*.json")):
        return "no-specs"
    if files and _all(files, "apiVersion"):
        return "deployment"  # Kubernetes objects have a kind too: never specs
    for kind, key in (("specs", "kind"), ("policies", "rules"), ("workflows", "jobs")):
        if _all(files, key):
            return kind
    return "unknown"


def example_folders() -> list[Path]:
    return sorted(p for p in EXAMPLES.iterdir() if p.is_dir())


def spec_folders() -> list[str]:
    """The names of the example folders holding specs the tool plans."""
    return [p.name for p in example_folders() if kind_of(p) in SPEC_KINDS]
