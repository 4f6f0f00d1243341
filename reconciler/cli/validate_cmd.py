"""``reconcile validate PATH...``: schema and cross-resource checks, no server."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import click

from reconciler.cli.options import (
    format_option,
    policy_option,
    project_file_option,
    required_project,
    strict_option,
)
from reconciler.console.terminal import TerminalConsole
from reconciler.errors import Problem, SpecError
from reconciler.model.values import inert_json
from reconciler.specs.files import spec_files
from reconciler.specs.ignore import rules_next_to
from reconciler.specs.spec import KINDS, Spec
from reconciler.specs.validate import load_specs


@click.command("validate")
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
@format_option(["text", "json"], "result")
@strict_option
@project_file_option
@policy_option
@click.pass_context
def validate(
    ctx: click.Context,
    paths: tuple[str, ...],
    fmt: str,
    strict: bool,
    project_file: Path | None,
    policies: tuple[Path, ...],
) -> None:
    """Check spec files (YAML/JSON, files or folders) without a server.

    Errors are what a server would refuse or what could never converge; warnings are odd
    but accepted (an identical duplicate key, ack_wait next to backoff). Exit 1 on an
    error, or on a warning with --strict. Without PATHS, in a repository with a project
    file: the project file and every environment's specs with its overlays merged in.
    Policy files are compiled too: the project's policies and each --policy FILE.
    """
    if not paths:
        _validate_project(project_file, fmt, strict, policies)
        return
    warnings: list[Problem] = []
    try:
        specs, rules = _specs_and_rules(paths, warnings, strict, project_file, policies)
    except SpecError as err:
        if fmt != "json":
            _show_invalid(err.problems, warnings, strict)
            ctx.exit(1)
        payload = {
            "valid": False,
            "errors": [p.to_json() for p in err.problems],
            "warnings": [w.to_json() for w in warnings],
        }
        click.echo(inert_json(json.dumps(payload, indent=2)))
        ctx.exit(1)
    files = len(spec_files(list(paths), []))
    counts = Counter(spec.kind for spec in specs)
    per_kind = ", ".join(f"{counts[k]} {k}" for k in KINDS if counts[k])
    noun = "document" if len(specs) == 1 else "documents"
    summary = f"{files} file{'s' if files != 1 else ''}, {len(specs)} {noun} valid"
    summary += f": {per_kind}" if per_kind else ""
    summary += f"; {rules} policy rule(s) compiled" if rules else ""
    if fmt == "json":
        kinds = {k: counts[k] for k in KINDS}
        body = {"valid": True, "files": files, "documents": len(specs), "kinds": kinds}
        body["policy_rules"] = rules
        body["warnings"] = [w.to_json() for w in warnings]
        click.echo(inert_json(json.dumps(body)))
    else:
        console = TerminalConsole()
        for warning in warnings:
            console.problem(str(warning))
        click.echo(summary + (f" ({len(warnings)} warning(s))" if warnings else ""))


def _show_invalid(errors: list[Problem], warnings: list[Problem], strict: bool) -> None:
    """Every error, then the warnings beside them (a failed run hides none), then one
    summary line: how many of each, and under --strict that warnings count as errors."""
    console = TerminalConsole()
    for line in [*map(str, errors), *map(str, warnings)]:
        console.problem(line)
    counted = sum(1 for p in errors if p.warning)
    summary = f"invalid: {_count(len(errors) - counted, 'error')}"
    if strict:
        summary += f", {_count(counted, 'warning')} (--strict: warnings are errors)"
    elif warnings:
        summary += f", {_count(len(warnings), 'warning')}"
    click.echo(summary, err=True)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' if number != 1 else ''}"


def _specs_and_rules(
    paths: tuple[str, ...],
    warnings: list[Problem],
    strict: bool,
    project_file: Path | None,
    policies: tuple[Path, ...],
) -> tuple[list[Spec], int]:
    """The specs of ``paths`` and how many policy rules there are; one SpecError with
    the problems of both (specs first)."""
    problems: list[Problem] = []
    specs: list[Spec] = []
    rules = 0
    try:
        specs = load_specs(list(paths), warnings=warnings, strict=strict)
        rules_next_to([Path(p) for p in paths])  # a bad .reconcileignore line: FILE:LINE
    except SpecError as err:
        problems += err.problems
    try:
        rules = _policy_rules(project_file, policies)
    except SpecError as err:
        problems += err.problems
    if problems:
        raise SpecError(problems)
    return specs, rules


def _policy_rules(project_file: Path | None, policies: tuple[Path, ...]) -> int:
    """How many rules the policy files hold, each file read and every expression compiled
    as plan reads them (``specs.policy.load_policy``: a problem is a SpecError at its
    FILE:LINE): the project's ``policies:`` when --project is given, then --policy."""
    from reconciler.specs.policy import load_policy

    project: tuple[Path, ...] = ()
    if project_file is not None:
        from reconciler.specs.project import load_project

        project = load_project(project_file).policies
    return len(load_policy((*project, *policies)).rules)


def _validate_project(
    project_file: Path | None, fmt: str, strict: bool, policies: tuple[Path, ...]
) -> None:
    """The project file, its policy files, then each environment's merged specs; every
    problem of every environment is reported in one run (no variable is read, no server
    asked)."""
    from reconciler.specs.policy import load_policy

    project = required_project(project_file, "give spec PATHS, or run where a project file is")
    problems: list[Problem] = []
    results: dict[str, int] = {}
    rules = 0
    try:
        rules = len(load_policy((*project.policies, *policies)).rules)
    except SpecError as err:
        problems += err.problems
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
        document = {"valid": True, "project": str(project.path), "environments": results}
        document["policy_rules"] = rules
        click.echo(inert_json(json.dumps(document)))
        return
    for name, count in results.items():
        click.echo(f"{name}: {count} document{'s' if count != 1 else ''} valid")
    if rules:
        click.echo(f"policies: {rules} rule(s) compiled")
