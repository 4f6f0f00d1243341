"""The spec side of a cold re-plan (issue 42): `load_specs` of repository-shaped specs,
phase by phase, in processes of its own, against libyaml's bare event scan of the same
files in the same run.

    python bench/bench_load.py [--streams 1000] [--consumers-per-stream 20] [--turns 5]

The specs are `bench_process.py`'s (one file per stream holding its consumers). Each turn
runs, one after the other in a rotating order, a process that loads the specs once (as a
`reconcile plan` process does: every cache of the loader empty) and prints the CPU
seconds (``time.process_time``) of each phase: the file walk, reading the YAML, documents
to specs (schema, units, `Spec`), the cross-resource checks; and a process that only
scans the same files' events with libyaml (``yaml.parse`` with the C loader, nothing
built): the floor of reading YAML through PyYAML. Medians of the turns are printed, and
the whole load over the scan. Figures only: nothing here asserts a time. With
``PYTHONPATH=<an older checkout>`` it times that tree's loader (a before/after).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_process import write_repo_specs

#: One cold load, phase by phase (the CPU seconds of each, as JSON on stdout).
LOAD = """
import json, sys, time
from reconciler.execution.run import fewer_collections
from reconciler.specs import validate
from reconciler.specs.checks import cross_resource_problems
from reconciler.specs import files as spec_files
from reconciler.specs.paths import repository_root

path, clock, problems = sys.argv[1], time.process_time, []
# a tree from before real_spec_files (PYTHONPATH=an older checkout, for a before/after)
walk = getattr(spec_files, "real_spec_files", spec_files.spec_files)
with fewer_collections():
    start = clock()
    root = repository_root([path])
    files = validate.inside(root, walk([path], problems), problems)
    walked = clock()
    documents = validate.load_spec_files(files, problems)
    read = clock()
    specs, declared = [], set()
    for document in validate._let_go(documents):
        declared.update(validate._declared_stream(document))
        specs.append(validate.spec_from_document(document, problems, root=root))
    made = clock()
    found = cross_resource_problems(specs, declared_streams=declared)
    checked = clock()
assert not problems and not found and len(specs) == int(sys.argv[2])
print(json.dumps({"walk": walked - start, "yaml": read - walked, "specs": made - read,
                  "checks": checked - made, "load": checked - start}))
"""

#: libyaml's events of every file, nothing built (the CPU seconds, as JSON on stdout).
SCAN = """
import json, sys, time
from pathlib import Path
import yaml

loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
start = time.process_time()
for path in sorted(Path(sys.argv[1]).iterdir()):
    for _ in yaml.parse(path.read_text(encoding="utf-8"), Loader=loader):
        pass
print(json.dumps({"scan": time.process_time() - start}))
"""


def run(script: str, *args: str, cwd: str) -> dict[str, float]:
    """One process's figures (run in ``cwd``: not a checkout, whose ``reconciler`` folder
    ``-c`` would import before PYTHONPATH's or the installed one)."""
    argv = [sys.executable, "-c", script, *args]
    out = subprocess.run(argv, capture_output=True, check=True, cwd=cwd)
    return dict(json.loads(out.stdout))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--consumers-per-stream", type=int, default=20)
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    total = args.streams * (1 + args.consumers_per_stream)
    with tempfile.TemporaryDirectory() as folder:
        spec = write_repo_specs(Path(folder), args.streams, args.consumers_per_stream)
        took: dict[str, list[float]] = {}
        for turn in range(args.turns):
            runs = [(LOAD, str(spec), str(total)), (SCAN, str(spec))]
            for script, *given in runs if turn % 2 == 0 else runs[::-1]:
                for name, seconds in run(script, *given, cwd=folder).items():
                    took.setdefault(name, []).append(seconds)
    print(f"{total:,} resources in {args.streams} files; {args.turns} turns (CPU seconds)")
    for name, seconds in took.items():
        shown = ", ".join(f"{s:.3f}" for s in seconds)
        print(f"  {name:<7} median {statistics.median(seconds):6.3f} s  ({shown})")
    ratios = [load / scan for load, scan in zip(took["load"], took["scan"], strict=True)]
    print(
        f"load_specs / libyaml's bare event scan: {statistics.median(ratios):.2f}x "
        f"(turns {', '.join(f'{r:.2f}' for r in ratios)}; goal none: the spec side's share "
        "of the re-plan's <= 3x, bench_process.py)"
    )


if __name__ == "__main__":
    main()
