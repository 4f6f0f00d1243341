"""Other tools' files as validated specs: one importer per tool, one result type.

``reconcile import --from NAME`` looks ``NAME`` up in :data:`IMPORTERS` and calls the
module's ``read(paths, strict=...)``, which returns an :class:`ImportResult`:

- ``nats-cli`` (:mod:`.natscli`): stream and consumer config or info JSON, ``nats
  account backup`` folders;
- ``terraform`` (:mod:`.terraform`, ``.tf`` files through :mod:`.hcl`): state and
  configuration of the ``nats-io/jetstream`` provider;
- ``nack`` (:mod:`.nack`): NACK's custom resources; its ``Account`` resources become
  project environments, and the resources naming an Account (``spec.account``) that
  environment's own specs (``ImportResult.by_environment``).

An importer's module is loaded only when it is asked for. This package sits above
``reconciler.specs`` (it reads, maps and validates through it); nothing in the engine
imports it: only the ``import`` command does (an import-linter contract keeps it so).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reconciler.errors import Problem
    from reconciler.specs.spec import Spec


@dataclass(frozen=True)
class ImportResult:
    """What an importer found: validated specs, the warnings said about the files (odd
    but accepted; errors raise ``SpecError``), and the project environments the files
    declare (NACK's Accounts: name -> connection fields)."""

    specs: list[Spec]
    warnings: list[Problem] = field(default_factory=list)
    environments: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the specs only one of ``environments`` declares (a NACK resource naming its
    #: Account), validated apart from ``specs`` (which every environment shares)
    by_environment: dict[str, list[Spec]] = field(default_factory=dict)


#: ``read(paths, strict=...)``: raises ``SpecError`` listing every problem found.
Importer = Callable[..., ImportResult]

#: The importers by the name ``--from`` gives, each the module holding its ``read``.
IMPORTERS: Mapping[str, str] = {
    "nats-cli": "reconciler.importers.natscli",
    "terraform": "reconciler.importers.terraform",
    "nack": "reconciler.importers.nack",
}


def importer(name: str) -> Importer:
    """The ``read`` function of the importer registered as ``name`` (KeyError if none)."""
    read: Importer = importlib.import_module(IMPORTERS[name]).read
    return read


def read(name: str, paths: Sequence[Path], *, strict: bool = False) -> ImportResult:
    """The files at ``paths`` read by the importer registered as ``name``."""
    return importer(name)(list(paths), strict=strict)
