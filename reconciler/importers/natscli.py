"""The nats CLI's files as specs: stream and consumer config or info JSON
(``nats stream info -j``), and ``nats account backup`` folders.

These files are read as specs wherever specs are read (the spec loader recognises them:
:mod:`reconciler.specs.natscli_json`), so this importer is the loader and validation itself,
repository root and all.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from reconciler.importers import ImportResult
from reconciler.specs.validate import load_specs


def read(paths: Sequence[Path], *, strict: bool = False) -> ImportResult:
    """The specs the files at ``paths`` hold; raises SpecError listing every problem."""
    return ImportResult(load_specs(list(paths), strict=strict))
