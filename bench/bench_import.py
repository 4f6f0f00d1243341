"""Import 30,000 Terraform resources and print the time against the compiled parser's bare
parse of the same file, measured in the same run (a figure, never an assertion).

Run: ``python bench/bench_import.py [RESOURCES]``. The ``.tf`` file holds streams, a
consumer per stream naming it (``stream_id = jetstream_stream.S1.id``) and KeyValue
buckets, in equal numbers, with integer arithmetic (``60 * 60 * 24 * 7``) as people write
it. Two figures:

- end to end: ``reconcile import --from terraform main.tf --out specs`` as a process, from
  the ``.tf`` file to the spec files written (interpreter start-up included), its wall
  time and its CPU time (user + system: on a shared machine the wall time also counts the
  waits for a core);
- in process, by phase: read and resolve (:func:`reconciler.importers.terraform.load`),
  validate, and turn into spec files (:func:`reconciler.planning.export.import_files`),
  without writing them; with the process's peak RSS.

The baseline is tree-sitter's parse of the whole file at once (``tree-sitter-hcl``, the
grammar the importer parses with), nothing else: the floor any importer built on it pays.
"""

from __future__ import annotations

import itertools
import resource
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


def baseline(path: Path) -> tuple[float, float]:
    """Wall and CPU seconds for tree-sitter to parse the whole file, nothing else."""
    import tree_sitter_hcl
    from tree_sitter import Language, Parser

    parser = Parser(Language(tree_sitter_hcl.language()))
    data = path.read_bytes()
    started, cpu = time.perf_counter(), time.process_time()
    parser.parse(data)
    return time.perf_counter() - started, time.process_time() - cpu


def end_to_end(path: Path) -> tuple[float, float, int]:
    """Wall and CPU seconds of ``reconcile import`` as a process, and the files it wrote."""
    out = path.parent / "specs"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [sys.executable, "-m", "reconciler", "import", "--from", "terraform"]
    subprocess.run([*command, str(path), "--out", str(out)], check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, sum(1 for _ in out.iterdir())


def imported(path: Path) -> tuple[list[float], list[float], int]:
    """Wall and CPU seconds to read, validate and export the file's specs (each phase),
    and how many files."""
    from reconciler.importers import terraform
    from reconciler.model.defaults import newest_server
    from reconciler.planning.export import import_files
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


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "main.tf"
        write_tf(path, count)
        size = path.stat().st_size
        wall, cpu, written = end_to_end(path)
        phase_wall, phase_cpu, files = imported(path)
        import_peak = peak_mib()  # before the baseline's whole-file tree
        raw, raw_cpu = baseline(path)
    print(f"resources: {count // 3 * 3}  file: {size / 2**20:.1f} MiB  spec files: {files}")
    print(
        f"end to end, `reconcile import` as a process: {wall:.2f}s wall, {cpu:.2f}s CPU "
        f"({written} files written; goal < 10 s)"
    )
    names = ("read", "validate", "export")
    phases = ", ".join(f"{n} {c:.2f}s" for n, c in zip(names, phase_cpu, strict=True))
    print(
        f"in process: {sum(phase_cpu):.2f}s CPU ({phases}), {sum(phase_wall):.2f}s wall; "
        f"peak RSS {import_peak:.0f} MiB"
    )
    print(f"baseline, tree-sitter's parse of the whole file: {raw:.2f}s wall, {raw_cpu:.2f}s CPU")
    print(
        f"end to end / baseline: {wall / raw:.2f}x wall, {cpu / raw_cpu:.2f}x CPU  "
        f"({count / cpu:,.0f} resources per CPU second)"
    )


if __name__ == "__main__":
    main()
