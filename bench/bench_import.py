"""Import 30,000 Terraform resources and print the time against python-hcl2's bare parse of
the same file, measured in the same run (a figure, never an assertion).

Run: ``python bench/bench_import.py [RESOURCES]``. The ``.tf`` file holds streams, a
consumer per stream naming it (``stream_id = jetstream_stream.S1.id``) and KeyValue
buckets, in equal numbers, with integer arithmetic (``60 * 60 * 24 * 7``) as people write
it. The import is what ``reconcile import --from terraform FILE --out DIR`` runs, in
process: read and resolve (:func:`reconciler.importers.terraform.load`), validate, and turn
into spec files (:func:`reconciler.planning.export.import_files`), without writing them.
The import runs as the CLI runs it. The baseline is ``hcl2.loads`` of the whole file
(reading it at all), with the cyclic collector off so that it is the parse's own work: on
a whole file the collector walks the growing parse tree again and again (3,000 to 6,000
resources: 7.2 to 17.5 s with it on, 3.7 to 7.5 s off). Both run with the parser's grammar
already built.
"""

from __future__ import annotations

import resource
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


def baseline(path: Path) -> float:
    """Seconds for python-hcl2 to parse the whole file, nothing else."""
    import gc

    import hcl2

    text = path.read_text("utf-8")
    options = hcl2.SerializationOptions(with_comments=False, strip_string_quotes=True)
    gc.disable()
    try:
        started = time.perf_counter()
        hcl2.loads(text, serialization_options=options)
        return time.perf_counter() - started
    finally:
        gc.enable()


def imported(path: Path) -> tuple[float, float, float, int]:
    """Seconds to read, validate and export the file's specs; and how many files."""
    from reconciler.importers import terraform
    from reconciler.model.defaults import newest_server
    from reconciler.planning.export import import_files
    from reconciler.specs.validate import validate_documents

    started = time.perf_counter()
    documents, warnings = terraform.load([path])
    read = time.perf_counter()
    specs = validate_documents(documents, warnings=warnings)
    validated = time.perf_counter()
    files = import_files(specs, newest_server())
    done = time.perf_counter()
    return read - started, validated - read, done - validated, len(files)


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
    import hcl2

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000
    hcl2.loads("a = 1\n")  # builds the grammar: paid once per process, by both
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "main.tf"
        write_tf(path, count)
        size = path.stat().st_size
        read, validate, export, files = imported(path)
        import_peak = peak_mib()
        raw = baseline(path)
    total = read + validate + export
    print(f"resources: {count // 3 * 3}  file: {size / 2**20:.1f} MiB  spec files: {files}")
    phases = f"read {read:.2f}s, validate {validate:.2f}s, export {export:.2f}s"
    print(f"import: {total:.2f}s ({phases})")
    print(f"baseline, hcl2.loads of the whole file: {raw:.2f}s")
    print(f"import / baseline: {total / raw:.2f}x  ({count / total:,.0f} resources/s)")
    after = peak_mib()
    print(f"peak RSS: {import_peak:.0f} MiB after the import, {after:.0f} MiB after the baseline")


if __name__ == "__main__":
    main()
