"""Plan and apply as whole processes against raw nats-py processes, in the same run.

    python bench/bench_process.py [--streams 1000] [--consumers-per-stream 20] [--turns 5]
                                  [--replan-only | --apply-only | --create-bodies]
                                  [--server URL]

21,000 resources is the default (1000 x 20); 101,000 is ``--consumers-per-stream 100``.
The specs are shaped like a real repository (:func:`write_repo_specs`): one file per
stream holding the stream and its consumers, ``max_age`` and ``filter_subject`` set.

`bench_plan_apply.py` times the engine in-process; this times what a CI job pays: a
`reconcile plan` / `reconcile apply` process from exec to exit, imports and spec loading
included, against a small nats-py process doing the raw requests (paged STREAM.LIST and
CONSUMER.LIST; the same creates with 64 in flight). The bare interpreter's start-up
(`python -c pass`, the same for both) is subtracted from each before the ratio; the whole
ratio is printed too. Each turn runs every figure once, in a rotating order, and the
medians of the turns are printed: this machine's two cores are shared, one run moves by a
third. Each apply and its raw baseline run on an empty server of their own. `reconcile
export --out` (a file per stream written) is timed in the plan's turns, against the
re-plan of the same turn. The apply turns print each side's CPU seconds and its server's
beside the wall clock. ``--create-bodies``: the apply's creates sent raw, with the whole
desired configs and as the executor sends them (``apply.sent_on_create``), turn about,
each on an empty server: what the bytes left out save the server. The project's modules
are compiled to bytecode first, as an install leaves them. Figures only: nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import DEVNULL

from reconciler.jetstream import EmbeddedServer
from reconciler.specs.cache import CACHE_ENV, KEY_ENV

#: The raw read of an account (nats-py, asyncio and json only, nothing of this project):
#: paged STREAM.LIST, then every stream's paged CONSUMER.LIST, 32 streams at a time, on
#: a connection ``nc``. The raw list process below runs it; bench_agent.py runs it in
#: process.
RAW_READ = """
import asyncio, json

async def read(nc):
    names, offset, total = [], 0, 1
    while offset < total:
        page = json.loads((await nc.request(
            "$JS.API.STREAM.LIST", json.dumps({"offset": offset}).encode(), timeout=60)).data)
        total, streams = page["total"], page.get("streams") or []
        names += [s["config"]["name"] for s in streams]
        offset += len(streams)
        if not streams:
            break
    limit = asyncio.Semaphore(32)

    async def consumers(stream):
        async with limit:
            off, tot = 0, 1
            while off < tot:
                body = json.loads((await nc.request(
                    f"$JS.API.CONSUMER.LIST.{stream}", json.dumps({"offset": off}).encode(),
                    timeout=60)).data)
                tot, got = body["total"], body.get("consumers") or []
                off += len(got)
                if not got:
                    break

    await asyncio.gather(*(consumers(n) for n in names))
"""

#: The raw processes: nats-py, asyncio and json only (nothing of this project).
RAW_LIST = (
    RAW_READ
    + """
import sys
import nats

async def main(url):
    nc = await nats.connect(url)
    await read(nc)
    await nc.close()

asyncio.run(main(sys.argv[1]))
"""
)

RAW_CREATES = """
import asyncio, json, sys
import nats

async def main(url, streams, per):
    nc = await nats.connect(url)
    limit = asyncio.Semaphore(64)

    async def req(subject, body):
        async with limit:
            msg = await nc.request(subject, json.dumps(body).encode(), timeout=60)
            if b'"error"' in msg.data:
                raise RuntimeError(msg.data.decode())

    await asyncio.gather(*(
        req(f"$JS.API.STREAM.CREATE.B{i:05d}",
            {"name": f"B{i:05d}", "description": f"orders of shop {i}", "subjects": [f"b{i}.>"],
             "storage": "memory", "max_age": 7 * 86400 * 10**9})
        for i in range(streams)))
    await asyncio.gather(*(
        req(f"$JS.API.CONSUMER.CREATE.B{i:05d}.C{c}",
            {"stream_name": f"B{i:05d}", "action": "create",
             "config": {"durable_name": f"C{c}", "name": f"C{c}", "ack_policy": "explicit",
                        "filter_subject": f"b{i}.c{c}", "max_deliver": 5}})
        for i in range(streams) for c in range(per)))
    await nc.close()

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""

#: Sends the requests of a file (``subject<TAB>body`` lines; a ``--`` line waits for
#: everything before it), 64 in flight: the creates of `--create-bodies`.
RAW_BODIES = """
import asyncio, sys
import nats

async def main(url, path):
    nc = await nats.connect(url)
    limit = asyncio.Semaphore(64)

    async def req(subject, body):
        async with limit:
            msg = await nc.request(subject, body, timeout=60)
            if b'"error"' in msg.data:
                raise RuntimeError(msg.data.decode())

    with open(path, "rb") as lines:
        waves = lines.read().split(b"\\n--\\n")
    for wave in waves:
        pairs = [line.split(b"\\t", 1) for line in wave.splitlines() if line]
        await asyncio.gather(*(req(subject.decode(), body) for subject, body in pairs))
    await nc.close()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""

RECONCILE = [sys.executable, "-m", "reconciler"]

#: Runs `reconcile` in this interpreter and writes its peak RSS (VmHWM, KiB) to the file
#: named by BENCH_HWM when it exits: the plan process's own high-water mark (ru_maxrss
#: would carry the benchmark's across fork and exec).
PEAK_RSS = """
import atexit, os, runpy, sys

def peak():
    with open("/proc/self/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["BENCH_HWM"], "w") as out:
        out.write(kib)

atexit.register(peak)
sys.argv = ["reconcile", *sys.argv[1:]]
runpy.run_module("reconciler", run_name="__main__", alter_sys=True)
"""


def write_repo_specs(folder: Path, streams: int, per_stream: int) -> Path:
    """Specs shaped like a real repository: one file per stream holding the stream
    (``max_age`` set) and its ``per_stream`` consumers (each with a ``filter_subject``)."""
    target = folder / "specs"
    target.mkdir(exist_ok=True)
    for i in range(streams):
        docs = [
            f"kind: Stream\nname: B{i:05d}\ndescription: orders of shop {i}\n"
            f"subjects:\n  - b{i}.>\nstorage: memory\nmax_age: 7d\n"
        ]
        docs += [
            f"kind: Consumer\nstream: B{i:05d}\nname: C{c}\nfilter_subject: b{i}.c{c}\n"
            f"ack_policy: explicit\nmax_deliver: 5\n"
            for c in range(per_stream)
        ]
        (target / f"b{i:05d}.yaml").write_text("---\n".join(docs), encoding="utf-8")
    return target


def compile_bytecode() -> None:
    """The project's modules compiled once, as a pip install leaves them (and nats-py,
    the raw side's one import, already is): with PYTHONDONTWRITEBYTECODE set (this
    machine's environment) every `reconcile` process compiled all of its modules from
    source again, 0.1-0.15 s of CPU the raw processes never paid."""
    import compileall

    import reconciler

    compileall.compile_dir(Path(reconciler.__file__).parent, quiet=1)


#: CPU seconds (user and system) of the processes timed, the last one last: a second
#: figure that a loaded machine moves less than the wall clock (waiting for a core is
#: not in it; the server's work is in neither side's).
CPU: list[float] = []


def process_seconds(argv: list[str], env: dict[str, str] | None = None) -> float:
    """Seconds one process takes from exec to exit (its output discarded; it must
    succeed); its CPU seconds are added to ``CPU``."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=DEVNULL, stderr=DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    took = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise subprocess.CalledProcessError(child.returncode, argv)
    CPU.append(usage.ru_utime + usage.ru_stime)
    return took


def peak_rss_mib(argv: list[str], env: dict[str, str]) -> float:
    """Peak RSS (MiB) of one ``reconcile`` process run with ``argv`` (VmHWM at its exit)."""
    with tempfile.NamedTemporaryFile() as out:
        run = [sys.executable, "-c", PEAK_RSS, *argv]
        subprocess.run(
            run, env={**env, "BENCH_HWM": out.name}, stdout=subprocess.DEVNULL, check=True
        )
        return int(Path(out.name).read_text()) / 1024


def median_of(argv: list[str], runs: int = 7) -> float:
    return statistics.median(process_seconds(argv) for _ in range(runs))


def server_cpu(server: EmbeddedServer) -> float:
    """CPU seconds (user and system) the embedded server has used so far."""
    assert server.running is not None
    stat = Path(f"/proc/{server.running.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def apply_turn(tmp: Path, spec: Path, streams: int, per: int, turn: int) -> dict[str, float]:
    """Seconds of reconcile apply from nothing and of the raw creates, each on an empty
    server, with the CPU seconds of each process and of its server (", CPU", ", server")."""
    took: dict[str, float] = {}

    def timed(name: str, server: EmbeddedServer, argv: list[str]) -> None:
        before = server_cpu(server)
        took[name] = process_seconds(argv)
        took[f"{name}, CPU"] = CPU[-1]
        took[f"{name}, server"] = server_cpu(server) - before

    def ours() -> None:
        with EmbeddedServer(tmp / f"apply-{turn}") as server:
            argv = [*RECONCILE, "apply", str(spec), "--server", server.url, "--yes"]
            timed("apply", server, [*argv, "--concurrency", "64"])

    def raw() -> None:
        with EmbeddedServer(tmp / f"raw-{turn}") as server:
            argv = [sys.executable, "-c", RAW_CREATES, server.url, str(streams), str(per)]
            timed("raw", server, argv)

    for run in [ours, raw] if turn % 2 == 0 else [raw, ours]:
        run()
    return took


def apply_turns(
    tmp: Path, spec: Path, streams: int, per: int, turns: int, start: float, cpu_start: float
) -> None:
    """The apply turns, interleaved (which of the two goes first alternates), and their
    ratios: wall and CPU seconds, bare interpreter start-up subtracted, and the servers'
    CPU seconds (what the requests cost the server)."""
    took: dict[str, list[float]] = {}
    for turn in range(turns):
        this = apply_turn(tmp, spec, streams, per, turn)
        for name, seconds in this.items():
            took.setdefault(name, []).append(seconds)
        print(
            f"  turn {turn}: reconcile apply {this['apply']:7.3f} s ({this['apply, CPU']:6.3f} s "
            f"CPU, server {this['apply, server']:6.3f} s)   raw creates {this['raw']:7.3f} s "
            f"({this['raw, CPU']:6.3f} s CPU, server {this['raw, server']:6.3f} s)"
        )
    print(f"  python -c pass        median {start:7.3f} s, {cpu_start:.3f} s CPU (subtracted)")
    print(f"  load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    ratio_line("apply from nothing / raw creates", took["apply"], took["raw"], start, "<= 1.3x")
    ratio_line(
        "  the same in CPU seconds",
        took["apply, CPU"],
        took["raw, CPU"],
        cpu_start,
        "none: the loaded machine's view",
    )
    ratio_line(
        "  the servers' CPU seconds",
        took["apply, server"],
        took["raw, server"],
        0.0,
        "none: what the requests cost",
    )


def write_create_bodies(tmp: Path, spec: Path) -> dict[str, Path]:
    """The create requests of the plan from nothing of ``spec`` (planned against an
    empty server), as the executor sends them (``sent``: ``apply.sent_on_create``) and
    with the whole desired config (``whole``: what it sent before), one file each."""
    import asyncio

    import orjson

    from reconciler.execution import run as engine
    from reconciler.execution.apply import CONSUMER_SCALARS, STREAM_SCALARS, sent_on_create
    from reconciler.jetstream import ConnectionOptions
    from reconciler.planning.steps import Create

    with EmbeddedServer(tmp / "bodies") as server:
        plan = asyncio.run(engine.plan([spec], ConnectionOptions(servers=server.url)))
    files: dict[str, Path] = {}
    for name in ("whole", "sent"):
        waves = []
        for wave in plan.waves():
            lines = []
            for step in wave:
                assert isinstance(step, Create)  # a plan from nothing
                config = dict(step.config)
                if step.ref.kind == "Consumer":
                    if name == "sent":
                        config = sent_on_create(CONSUMER_SCALARS, config)
                    stream = step.ref.stream_name
                    subject = f"$JS.API.CONSUMER.CREATE.{stream}.{step.name}"
                    body = {"stream_name": stream, "config": config, "action": "create"}
                else:
                    config = sent_on_create(STREAM_SCALARS, config) if name == "sent" else config
                    subject, body = f"$JS.API.STREAM.CREATE.{step.name}", config
                lines.append(subject.encode() + b"\t" + orjson.dumps(body))
            waves.append(b"\n".join(lines))
        files[name] = tmp / f"{name}.bodies"
        files[name].write_bytes(b"\n--\n".join(waves))
    return files


def body_turns(tmp: Path, spec: Path, turns: int) -> None:
    """The same creates sent raw with the whole desired configs and with the configs the
    executor sends, each on an empty server, turn about: what the bytes left out save
    the server (its CPU seconds) and the client."""
    files = write_create_bodies(tmp, spec)
    took: dict[str, list[tuple[float, float, float]]] = {"whole": [], "sent": []}
    for turn in range(turns):
        for name in ["whole", "sent"] if turn % 2 == 0 else ["sent", "whole"]:
            with EmbeddedServer(tmp / f"bodies-{name}-{turn}") as server:
                before = server_cpu(server)
                argv = [sys.executable, "-c", RAW_BODIES, server.url, str(files[name])]
                wall = process_seconds(argv)
                took[name].append((wall, CPU[-1], server_cpu(server) - before))
        whole, sent = took["whole"][-1], took["sent"][-1]
        print(
            f"  turn {turn}: whole configs {whole[0]:7.3f} s (server {whole[2]:6.3f} s CPU)   "
            f"as sent {sent[0]:7.3f} s (server {sent[2]:6.3f} s CPU)"
        )
    sizes = {name: path.stat().st_size for name, path in files.items()}
    print(f"  request bytes: whole {sizes['whole']:,}, as sent {sizes['sent']:,}")
    print(f"  load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for index, what in enumerate(["wall", "client CPU", "server CPU"]):
        ratios = [s[index] / w[index] for s, w in zip(took["sent"], took["whole"], strict=True)]
        shown = ", ".join(f"{r:.2f}" for r in ratios)
        print(
            f"{'creates as sent / whole: ' + what:<34}: {statistics.median(ratios):5.2f}x  "
            f"(goal < 1x: fewer bytes to parse; turns {shown})"
        )


#: The environment of a cold plan: no spec cache (a CI job's first plan).
COLD = {k: v for k, v in os.environ.items() if k not in (CACHE_ENV, KEY_ENV)}


def plan_turns(spec: Path, url: str, cache: Path, turns: int) -> dict[str, list[float]]:
    """Seconds of the raw list, the plan without a spec cache (cold) and with a warm
    one, and export, per turn, each turn in a rotating order (and each one's CPU
    seconds, under the name and ", CPU")."""
    plain = COLD
    warm = {**plain, CACHE_ENV: str(cache), KEY_ENV: secrets.token_hex(24)}
    plan = [*RECONCILE, "plan", str(spec), "--server", url]
    process_seconds(plan, warm)  # fills the cache
    raw = [sys.executable, "-c", RAW_LIST, url]
    runs: dict[str, Callable[[], float]] = {
        "raw list": lambda: process_seconds(raw),
        "plan": lambda: process_seconds(plan, plain),
        "plan, cache warm": lambda: process_seconds(plan, warm),
        "export": lambda: process_seconds(
            [*RECONCILE, "export", "--server", url, "--out", tempfile.mkdtemp(dir=cache.parent)],
            plain,
        ),
    }
    took: dict[str, list[float]] = {name: [] for name in [*runs, *(f"{n}, CPU" for n in runs)]}
    for turn in range(turns):
        order = [*runs][turn % len(runs) :] + [*runs][: turn % len(runs)]
        for name in order:
            took[name].append(runs[name]())
            took[f"{name}, CPU"].append(CPU[-1])
    return took


def _ratio(ours: float, raw: float) -> float:
    """``ours / raw``; inf where the raw side took no time (a tiny run: no more than the
    bare start-up, or no server CPU tick), not a crash."""
    return ours / raw if raw > 0 else float("inf")


def ratio_line(label: str, ours: list[float], raw: list[float], start: float, goal: str) -> None:
    net = [_ratio(o - start, r - start) for o, r in zip(ours, raw, strict=True)]
    whole = [_ratio(o, r) for o, r in zip(ours, raw, strict=True)]
    print(
        f"{label:<34}: {statistics.median(net):5.2f}x  (goal {goal}; turns "
        f"{', '.join(f'{r:.2f}' for r in net)}; whole processes {statistics.median(whole):.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--consumers-per-stream", type=int, default=20)
    parser.add_argument("--turns", type=int, default=5)
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--replan-only", action="store_true", help="skip the apply turns")
    only.add_argument(
        "--apply-only", action="store_true", help="only the apply turns (and python -c pass)"
    )
    only.add_argument(
        "--create-bodies",
        action="store_true",
        help="only the creates sent raw with whole configs and as apply sends them",
    )
    parser.add_argument(
        "--server",
        help="plan against this server, which already holds these specs applied (a run "
        "before: 101,000 take minutes to create); its plans must find no change",
    )
    args = parser.parse_args()
    streams, per, turns = args.streams, args.consumers_per_stream, args.turns
    compile_bytecode()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        spec = write_repo_specs(tmp, streams, per)
        total = streams * (1 + per)
        print(f"{streams} streams, {streams * per} consumers ({total:,} resources); {turns} turns")
        start = median_of([sys.executable, "-c", "pass"])
        cpu_start = statistics.median(CPU[-7:])
        if args.create_bodies:
            body_turns(tmp, spec, turns)
            return
        if args.apply_only:
            apply_turns(tmp, spec, streams, per, turns, start, cpu_start)
            return
        help_time = median_of([*RECONCILE, "--help"])
        version_time = median_of([*RECONCILE, "--version"])
        if not args.replan_only:
            apply_turns(tmp, spec, streams, per, turns, start, cpu_start)
        with contextlib.ExitStack() as stack:
            url = args.server
            if url is None:
                url = stack.enter_context(EmbeddedServer(tmp / "plan")).url
                apply = [*RECONCILE, "apply", str(spec), "--server", url, "--yes"]
                process_seconds([*apply, "--concurrency", "64"])
            took = plan_turns(spec, url, tmp / "spec-cache", turns)
            rss = peak_rss_mib(["plan", str(spec), "--server", url], COLD)
        for name, seconds in took.items():
            shown = ", ".join(f"{s:.3f}" for s in seconds)
            print(f"  {name:<21} median {statistics.median(seconds):7.3f} s  ({shown})")
        print(f"  python -c pass        median {start:7.3f} s, {cpu_start:.3f} s CPU (subtracted)")
        print()
        ratio_line(
            "re-plan (cold) / raw paged list", took["plan"], took["raw list"], start, "<= 3x"
        )
        ratio_line(
            "  the same in CPU seconds",
            took["plan, CPU"],
            took["raw list, CPU"],
            cpu_start,
            "none: the loaded machine's view",
        )
        ratio_line(
            "re-plan, cache warm / raw list",
            took["plan, cache warm"],
            took["raw list"],
            start,
            "<= 3x",
        )
        ratio_line("export / re-plan", took["export"], took["plan"], start, "<= 1.5x")
        print(f"{'plan peak RSS (VmHWM), cold':<34}: {rss:5.0f} MiB  (goal <= 300 MiB at 101k)")
        print(f"{'reconcile --help':<34}: {help_time:5.3f} s  (goal < 0.3 s; median of 7)")
        print(f"{'reconcile --version':<34}: {version_time:5.3f} s  (goal < 0.3 s; median of 7)")


if __name__ == "__main__":
    main()
