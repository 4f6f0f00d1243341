"""Every bench command runs to its end at a small size.

docs/performance.md takes every figure from a command under ``bench/``; a bench that
no longer runs (an engine function renamed under it, a ratio dividing by zero) would
leave those figures with no command to measure them again. Each bench runs here as a
process, as its docstring says to run it, at a size that takes seconds, and must exit 0
with its figures printed and no traceback. Nothing here looks at a figure's value.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench"

#: Each bench and the arguments of a run of a few seconds.
SMALL_RUNS = {
    "bench_agent.py": ["--resources", "10", "--trials", "2", "--cycles", "2"],
    "bench_agent_edits.py": ["--envs", "3", "--live", "2", "--interval", "1"],
    "bench_agent_envs.py": ["--envs", "2", "--streams", "1", "--trials", "2", "--idle", "1"],
    "bench_backup.py": ["1", "10"],
    "bench_failover.py": ["2", "5", "1"],
    "bench_fleet.py": ["--records", "2000", "--envs", "2", "--days", "1", "--sample", "2"],
    "bench_import.py": ["30", "--turns", "1"],
    "bench_kv_scan.py": ["--keys", "200", "--orphans", "5", "--turns", "1", "--declared", "50"],
    "bench_load.py": ["--streams", "5", "--consumers-per-stream", "2", "--turns", "1"],
    "bench_migrate.py": ["--messages", "1000"],
    "bench_plan_apply.py": ["--streams", "10", "--consumers-per-stream", "2"],
    "bench_policy.py": ["--streams", "10", "--consumers-per-stream", "2", "--turns", "1"],
    "bench_process.py": ["--streams", "5", "--consumers-per-stream", "2", "--turns", "1"],
    "bench_pulumi_lock.py": ["2"],
    "bench_validate.py": ["100"],
    "bench_wan.py": ["--streams", "5", "--consumers-per-stream", "2", "--delay-ms", "1"],
}


def test_every_bench_is_run_here() -> None:
    """A bench added under bench/ is added above (``reliability_report.py`` times
    nothing: it runs the tests and sums their counts)."""
    benches = {path.name for path in BENCH.glob("bench_*.py")}
    assert benches == set(SMALL_RUNS)


@pytest.mark.parametrize("bench", sorted(SMALL_RUNS))
def test_a_bench_runs_to_its_end_at_a_small_size(bench: str, tmp_path: Path) -> None:
    if bench == "bench_fleet.py" and shutil.which("java") is None:
        pytest.skip("Spark needs Java 17+ (.ci/run installs it)")
    done = subprocess.run(
        [sys.executable, str(BENCH / bench), *SMALL_RUNS[bench]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    assert "Traceback" not in said, said[-4000:]
    assert done.stdout.strip(), said[-4000:]
