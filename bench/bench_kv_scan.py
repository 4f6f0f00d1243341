"""A declared bucket that an application filled: a cold `reconcile plan` process against
a raw nats-py process listing the bucket's keys, in the same run.

    python bench/bench_kv_scan.py [--keys 100000] [--orphans 100] [--turns 3]
                                  [--declared 5000] [--before PATH]

The bucket ``sessions`` is declared (``kind: KeyValue``) with three entries; an
application wrote ``--keys`` keys of its own into it (40-byte values, no headers), and
``--orphans`` entries of this owner that no spec declares any more are there too (the
plan lists them as orphans: what it reads the bucket for). Each turn runs, in a
rotating order: the plan (this tree: `reconcile plan` as installed), the plan of
``--before`` (a checkout, on PYTHONPATH: a before/after), and the raw process (nats-py
only: STREAM.INFO with ``subjects_filter``, paged, the listing every plan starts from).
Cold: no spec cache. The bare interpreter's start-up (``python -c pass``) is subtracted
from each before the ratios; each process's CPU seconds (from ``wait4``) are printed too,
and each plan's peak RSS (VmHWM), and the two plans' outputs must be the same. Medians
of the turns. Figures only: nothing here asserts a time.

``--declared`` (0: left out): a second bucket, ``config``, whose ``--declared`` entries a
project declares (``declared.yaml``), each applied already (the plan finds them
unchanged). Its plan is timed in the same turns against a raw nats-py process reading the
same keys as cheaply as the server allows: the listing, then ``multi_last`` batched
direct gets of 1,024 keys, every message taken (nats-py's own parsing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_process import COLD, CPU, PEAK_RSS, RECONCILE, compile_bytecode, process_seconds

from reconciler.jetstream import EmbeddedServer

BUCKET = "sessions"
SPECS = f"""kind: KeyValue
name: {BUCKET}
---
kind: KeyValueEntry
bucket: {BUCKET}
key: feature.a
value: "on"
---
kind: KeyValueEntry
bucket: {BUCKET}
key: feature.b
value: "off"
---
kind: KeyValueEntry
bucket: {BUCKET}
key: limits.rate
value: "100"
"""

#: The raw listing (nats-py, asyncio and json only): the bucket's keys, page by page.
RAW_KEYS = """
import asyncio, json, sys
import nats

async def main(url, bucket):
    nc = await nats.connect(url)
    keys, offset, total = [], 0, 1
    while offset < total:
        body = json.dumps({"subjects_filter": f"$KV.{bucket}.>", "offset": offset}).encode()
        info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.KV_{bucket}", body,
                                            timeout=60)).data)
        subjects = (info.get("state") or {}).get("subjects") or {}
        keys += [s.removeprefix(f"$KV.{bucket}.") for s in subjects]
        total, offset = int(info.get("total") or 0), offset + len(subjects)
        if not subjects:
            break
    assert len(keys) >= int(sys.argv[3]), len(keys)
    await nc.close()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


CONFIG = "config"

#: The raw read of the declared keys: the listing, then batched direct gets of them.
RAW_DECLARED = """
import asyncio, json, sys
import nats

async def main(url, bucket, count):
    nc = await nats.connect(url)
    body = json.dumps({"subjects_filter": f"$KV.{bucket}.>"}).encode()
    info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.KV_{bucket}", body,
                                        timeout=60)).data)
    subjects = sorted((info.get("state") or {}).get("subjects") or {})
    got = 0
    for start in range(0, len(subjects), 1024):
        batch = subjects[start : start + 1024]
        sub = await nc.subscribe(nc.new_inbox())
        ask = json.dumps({"multi_last": batch, "max_bytes": 1 << 20}).encode()
        await nc.publish(f"$JS.API.DIRECT.GET.KV_{bucket}", ask, reply=sub.subject)
        while True:
            msg = await sub.next_msg(timeout=30)
            if msg.headers and msg.headers.get("Status") == "204":
                break
            got += 1
        await sub.unsubscribe()
    assert got >= count, got
    await nc.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def declared_specs(count: int) -> str:
    entries = (
        f"kind: KeyValueEntry\nbucket: {CONFIG}\nkey: cfg.{i:05d}\nvalue: v{i}\n"
        for i in range(count)
    )
    return "---\n".join([f"kind: KeyValue\nname: {CONFIG}\n", *entries])


async def fill_declared(url: str, count: int) -> None:
    """The declared entries as an apply left them (their values, with the marker)."""
    import nats

    from reconciler.planning.entries import marker_headers
    from reconciler.specs.spec import DEFAULT_OWNER

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        managed = marker_headers(DEFAULT_OWNER)
        for start in range(0, count, 256):
            await asyncio.gather(
                *(
                    js.publish(f"$KV.{CONFIG}.cfg.{i:05d}", f"v{i}".encode(), headers=managed)
                    for i in range(start, min(count, start + 256))
                )
            )
    finally:
        await nc.close()


async def fill(url: str, keys: int, orphans: int) -> int:
    """The application's keys and this owner's undeclared entries; how many keys."""
    import nats

    from reconciler.planning.entries import marker_headers
    from reconciler.specs.spec import DEFAULT_OWNER

    nc = await nats.connect(url)
    try:
        for i in range(keys):
            await nc.publish(f"$KV.{BUCKET}.session.{i:07d}", b"s" * 40)
        managed = marker_headers(DEFAULT_OWNER)
        for i in range(orphans):
            await nc.publish(f"$KV.{BUCKET}.old.{i:05d}", b"was declared", headers=managed)
        await nc.flush()
        expected = keys + orphans + 3
        while True:  # the stream has taken them all (core publishes: no acks)
            reply = await nc.request(f"$JS.API.STREAM.INFO.KV_{BUCKET}", b"", timeout=30)
            if json.loads(reply.data)["state"]["messages"] >= expected:
                return expected
            await asyncio.sleep(0.2)
    finally:
        await nc.close()


def declared_runs(tmp: Path, url: str, count: int) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The ``config`` bucket made, its ``count`` entries written as applied: the declared
    plan and its raw read."""
    (tmp / "config.yaml").write_text(f"kind: KeyValue\nname: {CONFIG}\n")
    subprocess.run(
        [*RECONCILE, "apply", "-y", "config.yaml", "--server", url],
        cwd=tmp,
        env=COLD,
        check=True,
        capture_output=True,
    )
    (tmp / "declared.yaml").write_text(declared_specs(count))
    asyncio.run(fill_declared(url, count))
    return {
        "plan declared": ([*RECONCILE, "plan", "declared.yaml", "--server", url], COLD),
        "raw declared": ([sys.executable, "-c", RAW_DECLARED, url, CONFIG, str(count)], COLD),
    }


def same_plan(
    runs: dict[str, tuple[list[str], dict[str, str]]], tmp: Path, ours: str, theirs: str
) -> None:
    """The two trees print the same plan."""
    said = [
        subprocess.run(
            runs[name][0], env=runs[name][1], cwd=tmp, capture_output=True, check=True
        ).stdout
        for name in (ours, theirs)
    ]
    assert said[0] == said[1], f"{ours} and {theirs} plan differently"


def peak_rss(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Peak RSS (MiB) of one ``reconcile`` process (VmHWM at its exit)."""
    with tempfile.NamedTemporaryFile() as out:
        run = [sys.executable, "-c", PEAK_RSS, *argv]
        subprocess.run(
            run, env={**env, "BENCH_HWM": out.name}, cwd=cwd, stdout=subprocess.DEVNULL, check=True
        )
        return int(Path(out.name).read_text()) / 1024


def report(
    args: argparse.Namespace,
    names: list[str],
    took: dict[str, list[float]],
    cpu: dict[str, list[float]],
    rss: dict[str, float],
    bare: tuple[float, float],
) -> None:
    """The medians, peaks and ratios of the turns (``bare``: the interpreter's start-up,
    wall and CPU, subtracted)."""
    start, cpu_start = bare
    print(
        f"{args.keys:,} keys an application wrote and {args.orphans} orphans in a declared "
        f"bucket; {args.turns} turns; load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(f"  python -c pass: {start:.3f} s, {cpu_start:.3f} s CPU (subtracted)")
    for name in names:
        wall, used = statistics.median(took[name]), statistics.median(cpu[name])
        print(f"  {name:<15} median {wall:7.3f} s, {used:6.3f} s CPU")
    for name, mib in rss.items():
        print(f"  {name:<15} peak RSS {mib:6.0f} MiB")

    def ratio(a: str, b: str) -> str:
        walls = [
            (x - start) / (y - start) for x, y in zip(took[a], took[b], strict=True) if y > start
        ]
        cpus = [
            (x - cpu_start) / (y - cpu_start)
            for x, y in zip(cpu[a], cpu[b], strict=True)
            if y > cpu_start
        ]
        return (
            f"{a} / {b}: {statistics.median(walls):.2f}x "
            f"(turns {', '.join(f'{w:.2f}' for w in walls)}), CPU {statistics.median(cpus):.2f}x"
        )

    print(ratio("plan", "raw keys"))
    if "plan before" in took:
        print(ratio("plan before", "raw keys"))
        print(ratio("plan", "plan before"))
    if "plan declared" in took:
        print(f"{args.declared:,} declared entries, applied (bucket {CONFIG}):")
        print(ratio("plan declared", "raw declared"))
        if "declared before" in took:
            print(ratio("declared before", "raw declared"))
            print(ratio("plan declared", "declared before"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--orphans", type=int, default=100)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--declared", type=int, default=5000)
    parser.add_argument("--before", type=Path, help="a checkout to time beside this tree")
    args = parser.parse_args()
    compile_bytecode()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        (tmp / "specs.yaml").write_text(SPECS, encoding="utf-8")
        with EmbeddedServer(tmp / "server") as server:
            plan = ["plan", "specs.yaml", "--server", server.url]
            subprocess.run(
                [*RECONCILE, "apply", "-y", *plan[1:]],
                cwd=tmp,
                env=COLD,
                check=True,
                capture_output=True,
            )
            total = asyncio.run(fill(server.url, args.keys, args.orphans))
            runs: dict[str, tuple[list[str], dict[str, str]]] = {
                "plan": ([*RECONCILE, *plan], COLD),
                "raw keys": (
                    [sys.executable, "-c", RAW_KEYS, server.url, BUCKET, str(total)],
                    COLD,
                ),
            }
            declared = ["plan", "declared.yaml", "--server", server.url]
            if args.declared:
                runs.update(declared_runs(tmp, server.url, args.declared))
            if args.before is not None:
                before = {**COLD, "PYTHONPATH": str(args.before.resolve())}
                runs["plan before"] = ([*RECONCILE, *plan], before)
                pairs = [("plan", "plan before")]
                if args.declared:
                    runs["declared before"] = ([*RECONCILE, *declared], before)
                    pairs.append(("plan declared", "declared before"))
                for ours, theirs in pairs:
                    same_plan(runs, tmp, ours, theirs)
            start = statistics.median(
                process_seconds([sys.executable, "-c", "pass"]) for _ in range(7)
            )
            cpu_start = statistics.median(CPU[-7:])
            took: dict[str, list[float]] = {}
            cpu: dict[str, list[float]] = {}
            names = list(runs)
            here = Path.cwd()
            os.chdir(tmp)  # the plans read specs.yaml here (never a checkout's reconciler/)
            for turn in range(args.turns):
                order = names[turn % len(names) :] + names[: turn % len(names)]
                for name in order:
                    argv, env = runs[name]
                    took.setdefault(name, []).append(process_seconds(argv, env))
                    cpu.setdefault(name, []).append(CPU[-1])
                line = "   ".join(
                    f"{n} {took[n][-1]:6.3f} s ({cpu[n][-1]:5.2f} CPU)" for n in names
                )
                print(f"  turn {turn}: {line}")
            os.chdir(here)
            rss = {
                name: peak_rss(argv[3:], env, tmp)
                for name, (argv, env) in runs.items()
                if name.startswith("plan") or name == "declared before"
            }
    report(args, names, took, cpu, rss, (start, cpu_start))


if __name__ == "__main__":
    main()
