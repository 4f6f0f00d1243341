"""`reconcile validate` as a user runs it: exit codes, one line per problem, FILE:LINE."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[2]


def reconcile(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def test_the_example_sets_are_valid() -> None:
    done = reconcile("validate", "examples/shop", "examples/workqueue", "examples/buckets")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "5 files, 9 documents valid: 2 Stream, 5 Consumer, 1 KeyValue, 1 ObjectStore"
    )


def test_the_orders_scenario_summary() -> None:
    done = reconcile("validate", "examples/shop")
    assert done.stdout.strip() == "2 files, 4 documents valid: 1 Stream, 3 Consumer"


def _write(text: str | bytes, name: str = "spec.yaml") -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        path = folder / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    return make


def _symlink_loop(folder: Path) -> Path:
    specs = folder / "specs"
    specs.mkdir()
    (specs / "s.yaml").write_text("kind: Stream\nname: S\n", encoding="utf-8")
    os.symlink(specs, specs / "loop")
    return specs


def _many_documents(folder: Path) -> Path:
    text = "".join(f"---\nkind: Stream\nname: S{i}\nsubjects: [s.{i}]\n" for i in range(9_999))
    text += "---\nkind: Stream\nname: LAST\nmax_bytes: -7\n"
    path = folder / "many.yaml"
    path.write_text(text, encoding="utf-8")
    return path


STREAM = "kind: Stream\nname: S\n"
# case -> (make the input in a folder, line of the first problem (the file is the input
# unless it is a folder), a phrase of the message)
BAD_INPUTS: dict[str, tuple[Callable[[Path], Path], int, str]] = {
    "malformed_yaml": (_write("kind: Stream\nname: [S\nmax_age: 1h\n"), 2, "invalid YAML"),
    "json_trailing_garbage": (
        _write('{"kind": "Stream",\n "name": "S"}\n}', "s.json"),
        3,
        "unexpected content after the JSON value",
    ),
    "no_kind": (_write("name: S\nsubjects: [a]\n"), 1, "missing `kind`"),
    "unknown_kind": (_write("kind: Queue\nname: S\n"), 1, "unknown kind 'Queue'"),
    "wrong_type": (_write(STREAM + "max_msgs: lots\n"), 3, "expected an integer"),
    "negative_size": (_write(STREAM + "max_bytes: -2\n"), 3, "a size cannot be negative"),
    "parsecs": (_write(STREAM + "max_age: 10 parsecs\n"), 3, "'10 parsecs' is not a duration"),
    "overflowing_duration": (_write(STREAM + "max_age: 300000w\n"), 3, "signed 64-bit integer"),
    "unknown_field": (
        _write(STREAM + "subjects: [a]\nmax_mgs: 5\n"),
        4,
        "unknown field (did you mean 'max_msgs'?)",
    ),
    "bucket_name_with_dot": (
        _write("kind: KeyValue\nname: my.bucket\n"),
        2,
        "is not a valid bucket name",
    ),
    "consumer_on_missing_stream": (
        _write("kind: Consumer\nname: C\nstream: NOPE\n"),
        3,
        "stream 'NOPE' is not declared",
    ),
    "overlapping_subjects": (
        _write(
            "kind: Stream\nname: A\nsubjects:\n  - orders.>\n---\nkind: Stream\nname: B\n"
            "subjects: [orders.new]\n"
        ),
        4,
        "overlaps 'orders.new'",
    ),
    "source_cycle": (
        _write(
            "kind: Stream\nname: A\nsources: [{name: B}]\n---\n"
            "kind: Stream\nname: B\nsources: [{name: A}]\n"
        ),
        3,
        "form a cycle: A → B → A",
    ),
    "ten_thousand_documents": (_many_documents, 40_000, "a size cannot be negative"),
    "binary_garbage": (_write(bytes(range(256)) * 4, "blob.yaml"), 2, "not a text file"),
    "symlink_loop": (_symlink_loop, 1, "symlink loop"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_fails_with_one_located_line_per_problem(case: str, tmp_path: Path) -> None:
    make, line, phrase = BAD_INPUTS[case]
    target = make(tmp_path)

    done = reconcile("validate", target)

    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    first = done.stderr.splitlines()[0]
    expected_file = target / "loop" if case == "symlink_loop" else target
    assert first.startswith(f"{expected_file}:{line}: "), first
    assert phrase in first


def test_every_problem_is_printed_on_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("kind: Stream\nname: S\nmax_age: soon\nmax_bytes: big\nstorag: file\n")

    done = reconcile("validate", path)

    assert done.returncode == 1
    *lines, summary = done.stderr.splitlines()
    assert summary == "invalid: 3 errors"
    assert [line.split(": ", 2)[:2] for line in lines] == [
        [f"{path}:3", "max_age"],
        [f"{path}:4", "max_bytes"],
        [f"{path}:5", "storag"],
    ]


def test_a_broken_file_does_not_hide_problems_in_the_others(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("kind: Stream\nname: [A\n")
    (tmp_path / "b.yaml").write_text("kind: Stream\nname: B\nmax_age: 10 parsecs\n")
    (tmp_path / "c.yaml").write_text("kind: Consumer\nstream: A\nname: C\n")

    done = reconcile("validate", tmp_path)

    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines()[:-1] if not line.startswith("    ")]
    assert [line.split(":")[:2] for line in lines] == [
        [str(tmp_path / "a.yaml"), "2"],
        [str(tmp_path / "b.yaml"), "3"],
    ], "no 'stream A not declared' for the consumer: A's file could not be read"


def test_json_format_prints_the_problems_as_json(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("kind: Stream\nname: S\nmax_age: 10 parsecs\n")

    done = reconcile("validate", "--format", "json", path)

    assert done.returncode == 1
    payload = json.loads(done.stdout)
    assert payload["valid"] is False
    assert payload["errors"] == [
        {
            "file": str(path),
            "line": 3,
            "path": "max_age",
            "message": "'10 parsecs' is not a duration "
            "(250ms, 30s, 1h30m, 7d, 1M (30 days), 1y (365 days) or integer nanoseconds)",
            "severity": "error",
        }
    ]


def test_json_format_reports_a_valid_set() -> None:
    done = reconcile("validate", "--format", "json", "examples/shop")
    assert done.returncode == 0
    assert json.loads(done.stdout)["valid"] is True


def test_a_missing_path_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    done = reconcile("validate", tmp_path / "nothing-here")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"{tmp_path / 'nothing-here'}:1: no such file",
        "invalid: 1 error",
    ]


ODD_AND_BROKEN = {
    "odd.yaml": "kind: Consumer\nstream: S\nname: C\nack_wait: 30s\nbackoff: [1s, 5s]\n"
    "---\nkind: Stream\nname: S\nsubjects: [s.>]\n",
    "broken.yaml": "kind: Stream\nname: B\nmax_msgs: lots\n",
}


def test_warnings_are_shown_beside_errors_and_counted(tmp_path: Path) -> None:
    for name, text in ODD_AND_BROKEN.items():
        (tmp_path / name).write_text(text)

    done = reconcile("validate", tmp_path)

    assert done.returncode == 1
    *lines, summary = done.stderr.splitlines()
    assert [line.split(": ")[:2] for line in lines] == [
        [f"{tmp_path / 'broken.yaml'}:3", "max_msgs"],
        [f"{tmp_path / 'odd.yaml'}:4", "warning"],
    ]
    assert summary == "invalid: 1 error, 1 warning"
    as_json = json.loads(reconcile("validate", "--format", "json", tmp_path).stdout)
    assert [(w["file"], w["line"]) for w in as_json["warnings"]] == [
        (str(tmp_path / "odd.yaml"), 4)
    ]


def test_strict_ends_with_a_summary_saying_warnings_are_errors(tmp_path: Path) -> None:
    (tmp_path / "odd.yaml").write_text(ODD_AND_BROKEN["odd.yaml"])

    relaxed = reconcile("validate", tmp_path)
    strict = reconcile("validate", "--strict", tmp_path)

    assert relaxed.returncode == 0
    assert strict.returncode == 1
    *lines, summary = strict.stderr.splitlines()
    assert [line.split(": ")[:2] for line in lines] == [[f"{tmp_path / 'odd.yaml'}:4", "warning"]]
    assert summary == "invalid: 0 errors, 1 warning (--strict: warnings are errors)"


def test_times_are_accepted_as_seconds_or_durations(tmp_path: Path) -> None:
    from reconciler.cli.options import Seconds

    assert Seconds().convert("2m", None, None) == 120.0
    assert Seconds().convert("250ms", None, None) == 0.25
    assert Seconds().convert("30", None, None) == 30.0
    done = subprocess.run(
        [sys.executable, "-m", "reconciler", "apply", str(tmp_path), "--lock-timeout", "2 parsecs"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "is not a time" in done.stderr
    assert "Traceback" not in done.stderr


def test_every_command_describes_each_option_and_shows_examples() -> None:
    from reconciler.cli import COMMANDS, cli

    ctx = click.Context(cli)
    found = []

    def walk(command: click.Command, name: str) -> None:
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                walk(command.get_command(ctx, sub), f"{name} {sub}")  # type: ignore[arg-type]
            return
        found.append(name)
        undescribed = [p.name for p in command.params if isinstance(p, click.Option) and not p.help]
        assert undescribed == [], name
        help_text = command.get_help(click.Context(command, info_name=name))
        assert "Examples:" in help_text and f"reconcile {name}" in help_text, name

    for name in sorted(COMMANDS):
        walk(cli.get_command(ctx, name), name)  # type: ignore[arg-type]
    assert len(found) >= 10
