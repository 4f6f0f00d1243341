"""``reconcile validate PATH...``: schema and cross-resource checks, no server."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import click

from reconciler.cli.options import format_option, project_file_option, strict_option
from reconciler.console.terminal import TerminalConsole
from reconciler.errors import Problem, SpecError
from reconciler.model.values import inert_json
from reconciler.specs.files import spec_files
from reconciler.specs.ignore import rules_next_to
from reconciler.specs.spec import KINDS
from reconciler.specs.validate import load_specs


@click.command("validate")
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
@format_option(["text", "json"], "result")
@strict_option
@project_file_option
@click.pass_context
def validate(
    ctx: click.Context, paths: tuple[str, ...], fmt: str, strict: bool, project_file: Path | None
) -> None:
    """Check spec files (YAML/JSON, files or folders) without a server.

    Errors are what a server would refuse or what could never converge; warnings are odd
    but accepted (an identical duplicate key, ack_wait next to backoff). Exit 1 on an
    error, or on a warning with --strict. Without PATHS, in a repository with a project
    file: the project file and every environment's specs with its overlays merged in.
    """
    if not paths:
        _validate_project(project_file, fmt, strict)
        return
    warnings: list[Problem] = []
    try:
        specs = load_specs(list(paths), warnings=warnings, strict=strict)
        rules_next_to([Path(p) for p in paths])  # a bad .reconcileignore line: FILE:LINE
    except SpecError as err:
        if fmt != "json":
            raise
        payload = {"valid": False, "errors": [p.to_json() for p in err.problems]}
        click.echo(inert_json(json.dumps(payload, indent=2)))
        ctx.exit(1)
    files = len(spec_files(list(paths), []))
    counts = Counter(spec.kind for spec in specs)
    per_kind = ", ".join(f"{counts[k]} {k}" for k in KINDS if counts[k])
    noun = "document" if len(specs) == 1 else "documents"
    summary = f"{files} file{'s' if files != 1 else ''}, {len(specs)} {noun} valid"
    summary += f": {per_kind}" if per_kind else ""
    if fmt == "json":
        kinds = {k: counts[k] for k in KINDS}
        body = {"valid": True, "files": files, "documents": len(specs), "kinds": kinds}
        body["warnings"] = [w.to_json() for w in warnings]
        click.echo(inert_json(json.dumps(body)))
    else:
        console = TerminalConsole()
        for warning in warnings:
            console.problem(str(warning))
        click.echo(summary + (f" ({len(warnings)} warning(s))" if warnings else ""))


def _validate_project(project_file: Path | None, fmt: str, strict: bool) -> None:
    """The project file, then each environment's merged specs; every problem of every
    environment is reported in one run (no variable is read, no server asked)."""
    from reconciler.specs.project import find_project, load_project

    found = project_file or find_project()
    if found is None:
        raise click.UsageError("give spec PATHS (or run where a reconcile.yaml is)")
    project = load_project(found)
    problems: list[Problem] = []
    results: dict[str, int] = {}
    for name, environment in project.environments.items():
        try:
            specs = project.load_specs(environment, strict=strict)
        except SpecError as err:
            problems += [p for p in err.problems if p not in problems]
            continue
        results[name] = len(specs)
    if problems:
        raise SpecError(problems)
    if fmt == "json":
        document = {"valid": True, "project": str(found), "environments": results}
        click.echo(inert_json(json.dumps(document)))
        return
    for name, count in results.items():
        click.echo(f"{name}: {count} document{'s' if count != 1 else ''} valid")
