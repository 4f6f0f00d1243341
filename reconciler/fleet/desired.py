"""The desired side: one folder of spec files per environment, normalised on the driver.

Each sub-folder of the fleet folder is an environment (hidden folders are skipped).
Its specs are loaded with ``reconciler.validate.load_specs`` and normalised with
``reconciler.normalize.desired_config``, exactly as ``reconcile plan`` does. An
environment whose folder does not validate is skipped: its problems (``FILE:LINE``) go
to the summary and stderr, the other environments are still processed, and the job
exits 1.

Like the plan, the desired config can depend on the live side: the server version
(which fields exist) and, for a consumer whose stream no spec declares (or an
``external`` stream), that stream's live ``consumer_limits``. :class:`Context` holds
exactly those facts for one environment and day; rows are built once per distinct
context, so a month of daily snapshots normalises each environment's specs once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.errors import Problem, ReconcileError, SpecError
from reconciler.fleet.canonical import server_info, to_json
from reconciler.normalize import desired_config, unsupported_fields
from reconciler.spec import Spec
from reconciler.validate import load_specs

#: (env, context id, stream_name, consumer, kind, name, desired JSON, source, external,
#:  server_version, api_level)
DesiredRow = tuple[str, int, str, str, str, str, str | None, str, bool, str | None, int | None]


@dataclass(frozen=True)
class EnvSpecs:
    """The validated specs of one environment, or why its folder is invalid."""

    env: str
    folder: Path
    specs: tuple[Spec, ...] = ()
    problems: tuple[Problem, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.problems

    def declared_streams(self) -> set[str]:
        """Streams the specs declare (buckets as their streams, external ones included)."""
        return {s.stream_name for s in self.specs if s.kind != "Consumer"}

    def needed_streams(self) -> tuple[str, ...]:
        """Live streams whose config the desired side reads (external, or undeclared)."""
        managed = {s.stream_name for s in self.specs if s.kind != "Consumer" and not s.external}
        external = {s.stream_name for s in self.specs if s.external}
        used = {s.stream for s in self.specs if s.kind == "Consumer" and s.stream}
        return tuple(sorted(external | (used - managed)))


def env_folders(fleet_dir: Path) -> list[tuple[str, Path]]:
    """``(env, folder)`` for each sub-folder of the fleet folder, sorted by name."""
    if not fleet_dir.is_dir():
        raise ReconcileError(f"{fleet_dir}: not a folder (expected one sub-folder per env)")
    found = sorted(
        (p.name, p) for p in fleet_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
    )
    if not found:
        raise ReconcileError(f"{fleet_dir}: no environment sub-folders")
    return found


def load_fleet(fleet_dir: Path) -> list[EnvSpecs]:
    """Every environment's specs; invalid folders carry their problems instead."""
    loaded = []
    for env, folder in env_folders(fleet_dir):
        try:
            specs = load_specs([folder])
        except SpecError as err:
            loaded.append(EnvSpecs(env, folder, problems=tuple(err.problems)))
            continue
        loaded.append(EnvSpecs(env, folder, specs=tuple(specs)))
    return loaded


@dataclass(frozen=True)
class Context:
    """What one environment's desired configs depend on, for one snapshot day."""

    version: str | None
    api_level: int | None
    streams: tuple[tuple[str, str | None], ...]  # needed stream → live config JSON or None


def desired_rows(env: EnvSpecs, context: Context, context_id: int) -> list[DesiredRow]:
    """One row per spec (the plan's own normalisation); raises on what the plan refuses."""
    server = server_info(context.version, context.api_level)
    problems = unsupported_fields(env.specs, server)
    if problems:
        raise SpecError(problems)
    live = {name: json.loads(text) for name, text in context.streams if text is not None}
    stream_configs: dict[str, Any] = {}
    rows: list[DesiredRow] = []

    def row(spec: Spec, consumer: str, desired: dict[str, Any] | None) -> DesiredRow:
        text = None if desired is None else to_json(desired)
        return (
            *(env.env, context_id, spec.stream_name, consumer, spec.kind, spec.name, text),
            *(str(spec.source), spec.external, context.version, context.api_level),
        )

    for spec in _streams(env.specs):
        if spec.external:
            if spec.stream_name not in live:
                message = f"external stream {spec.stream_name} does not exist on the server"
                problems.append(Problem(spec.source, "", message))
                continue
            stream_configs[spec.stream_name] = live[spec.stream_name]
            rows.append(row(spec, "", None))
            continue
        stream_configs[spec.stream_name] = desired_config(spec, server)
        rows.append(row(spec, "", stream_configs[spec.stream_name]))
    for spec in _consumers(env.specs):
        assert spec.stream is not None
        stream_config = stream_configs.get(spec.stream, live.get(spec.stream))
        if stream_config is None:
            message = f"stream {spec.stream} is neither declared nor on the server"
            problems.append(Problem(spec.where("stream"), "stream", message))
            continue
        desired = desired_config(spec, server, stream_config=stream_config)
        rows.append(row(spec, spec.name, desired))
    if problems:
        raise SpecError(problems)
    return rows


def _streams(specs: Sequence[Spec]) -> list[Spec]:
    return [s for s in specs if s.kind != "Consumer"]


def _consumers(specs: Sequence[Spec]) -> list[Spec]:
    return [s for s in specs if s.kind == "Consumer"]
