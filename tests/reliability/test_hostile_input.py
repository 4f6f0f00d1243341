"""Large and hostile spec files are refused quickly, with a clear error and bounded memory.

Each input is loaded in a fresh interpreter so its peak RSS (``VmHWM``, or ``ru_maxrss``
off Linux) is its own.
The time limit of the subprocess is only a hang guard, never a timing assertion.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

MEMORY_BUDGET_MIB = 200
HANG_GUARD_S = 120

PROBE = r"""
import json, resource, sys
from reconciler.errors import SpecError
from reconciler.specs.loader import load_documents
try:
    docs = load_documents([sys.argv[1]])
    outcome = {"documents": len(docs)}
except SpecError as err:
    outcome = {"error": str(err), "problems": len(err.problems)}
# Linux keeps ru_maxrss across fork+exec (the test process's own peak would show through):
# read this process image's high-water mark, VmHWM, where the kernel offers it.
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1])
except OSError:
    pass
outcome["peak_rss_mib"] = peak / 1024
print(json.dumps(outcome))
"""


def _laughs(depth: int = 10, width: int = 10) -> str:
    lines = ["kind: Stream", "name: LOL", f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, depth):
        refs = ", ".join([f"*a{i - 1}"] * width)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def _merge_laughs(depth: int = 12) -> str:
    lines = ["m0: &m0 {a: 1, b: 2}"]
    for i in range(1, depth):
        lines.append(f"m{i}: &m{i} {{x: [*m{i - 1}, *m{i - 1}, *m{i - 1}], <<: *m{i - 1}}}")
    return "kind: Stream\nname: MERGE\n" + "\n".join(lines) + "\n"


def _documents(count: int) -> str:
    return "".join(f"---\nkind: Stream\nname: S{i}\nsubjects: [s.{i}]\n" for i in range(count))


def _json_documents(count: int) -> str:
    return json.dumps([{"kind": "Stream", "name": f"S{i}"} for i in range(count)])


#: The phrase of the tool's own limit a case must name, or None where the YAML library may
#: refuse first in its own words (PyYAML 6.0.4 bounds flow nesting itself): then the behaviour
#: is what counts, an error at the file's line, never the library's wording.
HOSTILE: dict[str, tuple[str, Callable[[], str], str | None]] = {
    "billion_laughs": ("laughs.yaml", _laughs, "alias expansion"),
    "merge_key_bomb": ("merge.yaml", _merge_laughs, "alias expansion"),
    "deep_flow_sequences": (
        "deep.yaml",
        lambda: "kind: Stream\nname: D\nx: " + "[" * 100_000 + "]" * 100_000 + "\n",
        None,
    ),
    "deep_flow_mappings": (
        "deepmap.yaml",
        lambda: "kind: Stream\nname: D\nx: " + "{a: " * 50_000 + "1" + "}" * 50_000 + "\n",
        None,
    ),
    "deep_block_sequences": (
        "block.yaml",
        lambda: "kind: Stream\nname: D\nx:\n  " + "- " * 100_000 + "x\n",
        None,
    ),
    "deep_json": (
        "deep.json",
        lambda: '{"kind": "Stream", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        None,
    ),
    "hundred_thousand_yaml_documents": (
        "many.yaml",
        lambda: _documents(100_000),
        "too many documents",
    ),
    "hundred_thousand_json_documents": (
        "many.json",
        lambda: _json_documents(100_000),
        "too many documents",
    ),
    "fifty_mib_yaml_file": (
        "big.yaml",
        lambda: 'kind: Stream\nname: BIG\ndescription: "' + "x" * (50 * 2**20) + '"\n',
        "file too large",
    ),
    "fifty_mib_json_file": (
        "big.json",
        lambda: json.dumps({"kind": "Stream", "name": "BIG", "description": "x" * (50 * 2**20)}),
        "file too large",
    ),
}


def _probe(path: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )
    assert done.returncode == 0, f"loader crashed (rc {done.returncode}): {done.stderr[-2000:]}"
    outcome: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return outcome


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_spec_is_refused_with_a_clear_error_and_bounded_memory(
    case: str, tmp_path: Path, figures
) -> None:
    filename, make, expected = HOSTILE[case]
    path = tmp_path / filename
    path.write_text(make(), encoding="utf-8")

    outcome = _probe(path)

    assert "error" in outcome, f"{case} was accepted: {outcome}"
    message = str(outcome["error"])
    if expected is not None:
        assert expected in message
    assert re.match(rf"{re.escape(str(path))}:[0-9]+: ", message), "the error names FILE:LINE"
    assert "Traceback" not in message
    assert float(str(outcome["peak_rss_mib"])) < MEMORY_BUDGET_MIB
    figures.add("inputs_tried")
    figures.add("peak_rss_mib_max", int(float(str(outcome["peak_rss_mib"]))))


def test_ten_thousand_documents_still_load(tmp_path: Path, figures) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(_documents(10_000), encoding="utf-8")

    outcome = _probe(path)

    assert outcome.get("documents") == 10_000
    assert float(str(outcome["peak_rss_mib"])) < MEMORY_BUDGET_MIB
    figures.add("inputs_tried")


def test_cli_reports_a_yaml_bomb_in_one_line_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(_laughs(), encoding="utf-8")

    done = subprocess.run(
        [sys.executable, "-m", "reconciler", "plan", str(path), "--server", "nats://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )

    assert done.returncode == 1
    assert "alias expansion" in done.stderr
    assert "Traceback" not in done.stderr


# --- values that used to crash the loader, or were echoed back whole -------------------------

BIG = "9" * 5000
FILE_LINE_CASES: dict[str, tuple[str, str, int, str]] = {
    "yaml_count_of_5000_digits": (
        "count.yaml", f"kind: Stream\nname: S\nmax_msgs: {BIG}\n", 3, "not a number"
    ),
    "yaml_duration_of_5000_digits": (
        "age.yaml", f"kind: Stream\nname: S\nmax_age: {BIG}s\n", 3, "not a duration"
    ),
    "yaml_size_of_5000_digits": (
        "size.yaml", f"kind: Stream\nname: S\nmax_bytes: {BIG}MiB\n", 3, "not a size"
    ),
    "json_count_of_5000_digits": (
        "count.json", f'{{\n"kind": "Stream",\n"name": "S",\n"max_msgs": {BIG}\n}}', 4,
        "not a number",
    ),
    "json_lone_surrogate": (
        "sur.json", '{\n"kind": "Stream",\n"name": "S",\n"description": "\\ud800"\n}', 4,
        "lone surrogate",
    ),
    "json_tabs_escapes_and_a_duplicate_key": (
        "dup.json",
        '{\n\t"kind": "Stream",\n\t"name": "S\\u00e9\\u0007",\n\t"max_age": "1h",\n'
        '\t"max_age": "2h"\n}',
        5,
        "duplicate field",
    ),
    "ten_mib_value": (
        "huge.yaml", "kind: Stream\nname: S\nmax_age: " + "x" * (10 * 2**20) + "\n", 3,
        "not a duration",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(FILE_LINE_CASES))
def test_odd_values_are_file_line_errors_never_tracebacks_or_echoes(
    case: str, tmp_path: Path
) -> None:
    name, text, line, words = FILE_LINE_CASES[case]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "reconciler", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert f"{path}:{line}:" in done.stderr, done.stderr[:2000]
    assert words in done.stderr
    assert len(done.stderr) < 2000, "a huge value is not echoed back whole"
