"""The public API (``reconciler.__all__``) names every exception a caller can catch."""

from __future__ import annotations

import importlib
import pkgutil

import reconciler
from reconciler.errors import ReconcileError

#: The engine's packages: what a caller of the public API runs (the front doors, cli,
#: fleet and console, raise their own errors to their own users).
ENGINE = ("specs", "model", "planning", "execution", "jetstream", "backup", "importers")


def engine_modules() -> list[str]:
    names = ["reconciler.errors", "reconciler.locations", "reconciler.identity"]
    for package in ENGINE:
        path = [str(reconciler.__path__[0]) + "/" + package]
        names += [f"reconciler.{package}.{m.name}" for m in pkgutil.iter_modules(path)]
    return names


def test_every_engine_exception_is_exported() -> None:
    found = {
        cls.__name__
        for name in engine_modules()
        for cls in vars(importlib.import_module(name)).values()
        if isinstance(cls, type) and issubclass(cls, ReconcileError)
    }
    assert found >= {"ReconcileError", "SpecError", "RefusedPlan", "LockError", "BackupError"}
    assert sorted(found - set(reconciler.__all__)) == []


def test_every_exported_name_resolves() -> None:
    for name in reconciler.__all__:
        value = getattr(reconciler, name)
        assert getattr(value, "__name__", name) in (name, "Literal")  # Kind: a Literal
