"""Validate 10,000 documents and print documents per second (a figure, never an assertion).

Run: ``python bench/bench_validate.py [COUNT]``. The set is realistic: streams with human
units and subjects, two consumers per stream, and buckets, spread over 100 files.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from reconciler.specs.loader import load_documents
from reconciler.specs.validate import validate_documents

STREAM = """---
kind: Stream
name: S{i}
subjects: ["s{i}.>"]
retention: limits
max_age: 7d
max_bytes: 1GiB
duplicate_window: 2m
"""
CONSUMERS = """---
kind: Consumer
stream: S{i}
name: WORK
filter_subject: s{i}.work
ack_policy: explicit
backoff: [1s, 5s]
max_deliver: 5
---
kind: Consumer
stream: S{i}
name: WATCH
deliver_subject: watch.s{i}
idle_heartbeat: 10s
"""
BUCKET = """---
kind: KeyValue
name: kv{i}
history: 5
ttl: 1h
max_value_size: 64KiB
"""


def write_specs(folder: Path, count: int) -> int:
    written = 0
    files: list[list[str]] = [[] for _ in range(100)]
    i = 0
    while written < count:
        chunk = STREAM + CONSUMERS if i % 4 else BUCKET
        files[i % 100].append(chunk.format(i=i))
        written += chunk.count("---")
        i += 1
    for index, chunks in enumerate(files):
        (folder / f"specs{index:03}.yaml").write_text("".join(chunks), encoding="utf-8")
    return written


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        written = write_specs(folder, count)
        started = time.perf_counter()
        documents = load_documents([folder])
        loaded = time.perf_counter()
        specs = validate_documents(documents)
        done = time.perf_counter()
    assert len(specs) == written
    total = done - started
    print(f"documents: {written}")
    print(f"load: {loaded - started:.3f}s  validate: {done - loaded:.3f}s  total: {total:.3f}s")
    print(f"throughput: {written / total:,.0f} documents/s")


if __name__ == "__main__":
    main()
