"""The loader under atheris (coverage-guided), when atheris is installed (optional)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"
RUNS = 10_000


@pytest.mark.slow
def test_atheris_finds_no_exception_but_spec_error(tmp_path: Path, figures) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for index, path in enumerate(
        sorted(EXAMPLES.rglob("*.y*ml")) + sorted(EXAMPLES.rglob("*.json"))
    ):
        (corpus / f"seed{index}").write_bytes(b"\x00" + path.read_bytes())

    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "fuzz_loader.py"),
            str(corpus),
            f"-runs={RUNS}",
            "-max_len=4096",
            "-rss_limit_mb=1024",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-4000:]
    executed = re.findall(r"Done (\d+) runs", done.stderr)
    figures.add("inputs_tried", int(executed[-1]) if executed else RUNS)
