"""Import 30,000 Terraform resources and print the time against the compiled parser's bare
parse of the same file, measured in the same run (a figure, never an assertion).

Run: ``python bench/bench_import.py [RESOURCES] [--turns N]``. The ``.tf`` file holds
streams, a consumer per stream naming it (``stream_id = jetstream_stream.S1.id``) and
KeyValue buckets, in equal numbers, with integer arithmetic (``60 * 60 * 24 * 7``) as
people write it. Figures:

- end to end: ``reconcile import --from terraform main.tf --out specs`` as a process, from
  the ``.tf`` file to the spec files written (interpreter start-up included, into a new
  folder each turn), its wall time and its CPU time (user + system, the child's own: on
  this shared machine the wall time also counts the waits for a core and the file
  system's), and its peak RSS (VmHWM, read by the process as it exits);
- the baseline, in the same turns: tree-sitter's parse of the whole file at once
  (``tree-sitter-hcl``, the grammar the importer parses with) in a process of its own,
  nothing else: the floor any importer built on it pays. Each turn runs both, in turn
  about; the medians of the turns are printed, and the median of the turns' ratios;
- in process, by phase, once: read and resolve (:func:`reconciler.importers.terraform.load`),
  validate, the documents (:func:`reconciler.planning.export.import_files`), their text
  (``export_text.file_texts``); no file written.

The project's modules are compiled to bytecode first, as an install leaves them.
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCKS = """resource "jetstream_stream" "S{i}" {{
  name     = "S{i}"
  subjects = ["orders.{i}.>"]
  storage  = "file"
  max_age  = 60 * 60 * 24 * 7
  max_msgs = 100000
}}

resource "jetstream_consumer" "C{i}" {{
  stream_id      = jetstream_stream.S{i}.id
  durable_name   = "WORK"
  deliver_all    = true
  filter_subject = "orders.{i}.work"
  ack_wait       = 30
}}

resource "jetstream_kv_bucket" "KV{i}" {{
  name    = "kv{i}"
  history = 5
  ttl     = 60 * 60
}}

"""


def write_tf(path: Path, resources: int) -> None:
    path.write_text("".join(BLOCKS.format(i=i) for i in range(resources // 3)), "utf-8")


#: The baseline process: tree-sitter's parse of the whole file, timed inside it.
BARE_PARSE = """
import sys, time
import tree_sitter_hcl
from tree_sitter import Language, Parser
parser = Parser(Language(tree_sitter_hcl.language()))
data = open(sys.argv[1], "rb").read()
started, cpu = time.perf_counter(), time.process_time()
parser.parse(data)
print(time.perf_counter() - started, time.process_time() - cpu)
"""

#: ``reconcile`` as ``python -m reconciler`` does, saying its peak RSS as it exits.
IMPORT = """
import atexit, runpy, sys
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print("VmHWM", line.split()[1], file=sys.stderr)
atexit.register(peak)
sys.argv = ["reconcile", *sys.argv[1:]]
runpy.run_module("reconciler", run_name="__main__")
"""


def baseline(path: Path) -> tuple[float, float]:
    """Wall and CPU seconds for tree-sitter to parse the whole file, nothing else (in a
    process of its own: its tree, about 80 bytes per byte, is not the benchmark's)."""
    done = subprocess.run(
        [sys.executable, "-c", BARE_PARSE, str(path)], check=True, capture_output=True, text=True
    )
    wall, cpu = done.stdout.split()
    return float(wall), float(cpu)


def end_to_end(path: Path, out: Path) -> tuple[float, float, float, int, float]:
    """Wall, user and system CPU seconds of ``reconcile import`` as a process, the files
    it wrote and its peak RSS (MiB)."""
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [sys.executable, "-c", IMPORT, "import", "--from", "terraform"]
    done = subprocess.run(
        [*command, str(path), "--out", str(out)], check=True, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    peak = next(int(line.split()[1]) for line in done.stderr.splitlines() if line[:6] == "VmHWM ")
    return wall, user, system, sum(1 for _ in out.iterdir()), peak / 1024


def imported(path: Path) -> tuple[list[float], list[float], int]:
    """Wall and CPU seconds to read, validate, export and write out as text the file's
    specs (each phase), and how many files."""
    from reconciler.importers import terraform
    from reconciler.model.defaults import newest_server
    from reconciler.planning.export import import_files
    from reconciler.planning.export_text import file_texts
    from reconciler.specs.validate import validate_documents

    walls, cpus = [time.perf_counter()], [time.process_time()]

    def lap() -> None:
        walls.append(time.perf_counter())
        cpus.append(time.process_time())

    documents, warnings = terraform.load([path])
    lap()
    specs = validate_documents(documents, warnings=warnings)
    lap()
    files = import_files(specs, newest_server())
    lap()
    file_texts(files, command="import")
    lap()
    wall = [b - a for a, b in itertools.pairwise(walls)]
    cpu = [b - a for a, b in itertools.pairwise(cpus)]
    return wall, cpu, len(files)


def peak_mib() -> float:
    """This process's peak resident memory so far (VmHWM; ru_maxrss off Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _compile() -> None:
    import compileall

    import reconciler

    compileall.compile_dir(Path(reconciler.__file__).parent, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("resources", nargs="?", type=int, default=30_000)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    count = args.resources
    _compile()
    runs: list[tuple[float, float, float, int, float]] = []
    bases: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "main.tf"
        write_tf(path, count)
        size = path.stat().st_size
        for turn in range(args.turns):  # in turn about: the baseline first every other turn
            if turn % 2 == 0:
                bases.append(baseline(path))
            runs.append(end_to_end(path, Path(tmp) / "specs"))
            if turn % 2 == 1:
                bases.append(baseline(path))
        phase_wall, phase_cpu, files = imported(path)
        import_peak = peak_mib()
    walls = [r[0] for r in runs]
    cpus = [r[1] + r[2] for r in runs]
    raw_walls, raw_cpus = [b[0] for b in bases], [b[1] for b in bases]
    median = statistics.median
    print(f"resources: {count // 3 * 3}  file: {size / 2**20:.1f} MiB  spec files: {files}")
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average: {load} on {os.cpu_count()} cores")
    print(
        f"end to end, `reconcile import` as a process (median of {len(runs)} turns): "
        f"{median(walls):.2f}s wall, {median(cpus):.2f}s CPU "
        f"(user {median(r[1] for r in runs):.2f}s + system {median(r[2] for r in runs):.2f}s); "
        f"{runs[-1][3]} files written; "
        f"peak RSS {max(r[4] for r in runs):.0f} MiB   (goal: < 10 s)"
    )
    print("  turns, wall / CPU: " + ", ".join(f"{r[0]:.1f}s / {r[1] + r[2]:.1f}s" for r in runs))
    print(
        f"baseline, tree-sitter's parse of the whole file (median of {len(bases)}): "
        f"{median(raw_walls):.2f}s wall, {median(raw_cpus):.2f}s CPU"
    )
    ratios = [c / b for c, b in zip(cpus, raw_cpus, strict=True)]
    wall_ratios = [w / b for w, b in zip(walls, raw_walls, strict=True)]
    print(
        f"end to end / baseline (median of the turns' ratios): {median(ratios):.2f}x CPU, "
        f"{median(wall_ratios):.2f}x wall  ({count / median(cpus):,.0f} resources per CPU second)"
    )
    names = ("read", "validate", "documents", "text")
    phases = ", ".join(f"{n} {c:.2f}s" for n, c in zip(names, phase_cpu, strict=True))
    print(
        f"in process, once: {sum(phase_cpu):.2f}s CPU ({phases}), {sum(phase_wall):.2f}s wall; "
        f"peak RSS {import_peak:.0f} MiB"
    )


if __name__ == "__main__":
    main()
