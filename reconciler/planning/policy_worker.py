"""The process policy rules are evaluated in, and the budget each evaluation gets
(docs/policy.md#budgets).

The CEL library has no cost limit and holds the GIL while it evaluates: a costly rule
in the planning process stopped everything else in it (the agent's endpoints, its
SIGTERM handler) until it ended, minutes later. So rules are evaluated in a worker
process (``python -m reconciler.planning.policy_worker``), in batches of resources,
and the planner waits for it without blocking its event loop. Before each evaluation
the worker writes its number to a shared page; an evaluation that keeps that number
for more than :data:`EVALUATION_SECONDS`, or a worker that ends (out of memory:
:data:`MEMORY_LIMIT`), is stopped: the worker is killed, the evaluation is a finding
naming the rule, the rule is not evaluated again in this run (each resource it applies
to is a finding saying so), and a new worker takes up the rest. The whole run has a
budget too (:func:`run_budget`): what is not evaluated when it is spent is a finding
per rule and resource. A cancelled evaluation (the agent stopping) kills its worker.

Pickle carries the batches: both ends are this package, the worker a child of the
planner, over its own pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import pickle
import struct
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from reconciler.errors import ReconcileError

#: CPU seconds one rule's evaluation on one resource may take; and the wall-clock
#: seconds, whatever the CPU time (a worker starved of CPU by a busy machine).
EVALUATION_SECONDS = 2.0
EVALUATION_WALL_SECONDS = 30.0
#: The worker's address space (bytes): a rule building huge lists ends it, not the host.
MEMORY_LIMIT = 2 << 30
#: Seconds the worker may take to start (import the library, compile the rules).
START_SECONDS = 60.0
#: How often the planner looks at the worker's progress while it waits.
_TICK = 0.05
_FRAME = struct.Struct("<Q")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROGRESS = struct.Struct("<q")

#: An evaluation's outcome: None (the rule holds or does not apply), ``""`` (false) or
#: why it could not be evaluated.
Outcome = str | None
#: One resource of a batch: its CEL variables and the indexes of the rules to evaluate.
Job = tuple[dict[str, Any], tuple[int, ...]]


def run_budget(evaluations: int) -> float:
    """Seconds a whole run's evaluations may take: a minute and 1 ms more for each, at
    most ten minutes (21,000 resources and 4 rules take about 5 s: 144 s)."""
    return min(60.0 + 0.001 * evaluations, 600.0)


class OverBudget(Exception):
    """The evaluation numbered ``index`` in its batch was stopped (``why``)."""

    def __init__(self, index: int, why: str) -> None:
        super().__init__(why)
        self.index, self.why = index, why


class WorkerGone(Exception):
    """The worker had ended before it was handed a batch: no evaluation is to blame."""


class Worker:
    """One worker process evaluating ``rules`` (their ``(when, expr)`` sources)."""

    def __init__(self, rules: Sequence[tuple[str, str]]) -> None:
        self.rules = tuple(rules)
        self.process: asyncio.subprocess.Process | None = None
        self._page: mmap.mmap | None = None
        self._file: IO[bytes] | None = None

    async def start(self) -> None:
        """Start the worker and hand it the rules; a :class:`ReconcileError` when it
        cannot start."""
        try:
            await self._start()
        except (OSError, TimeoutError, EOFError, asyncio.IncompleteReadError) as err:
            await self.stop()
            reason = f": {err.strerror or err}" if isinstance(err, OSError) else ""
            raise ReconcileError(f"the policy evaluator process did not start{reason}") from None
        except BaseException:  # cancelled: no worker left behind
            await self.stop()
            raise

    async def _start(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self._file.write(b"\0" * mmap.PAGESIZE)
        self._file.flush()
        self._page = mmap.mmap(self._file.fileno(), mmap.PAGESIZE)
        fd = self._file.fileno()
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "reconciler.planning.policy_worker",
            str(fd),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            pass_fds=(fd,),
            env=_importable(),
        )
        _widen(self.process.stdin)
        await self._send(self.rules)
        await asyncio.wait_for(self._receive(), START_SECONDS)

    async def evaluate(self, jobs: Sequence[Job], deadline: float) -> list[Outcome]:
        """Every rule of every job, in order; :class:`OverBudget` when one evaluation
        goes over its budget or the worker ends (the worker is then stopped), or when
        ``deadline`` (``time.monotonic()``) passes."""
        assert self._page is not None
        _PROGRESS.pack_into(self._page, 0, -1)
        try:
            await self._send(list(jobs))
        except (ConnectionError, RuntimeError):  # it ended while idle (killed by someone)
            code = self.process.returncode if self.process is not None else None
            await self.stop()
            raise WorkerGone(f"the evaluator process had ended (exit status {code})") from None
        reply = asyncio.ensure_future(self._receive())
        seen, since, spent = -1, time.monotonic(), self._cpu()
        try:
            while True:
                done, _ = await asyncio.wait({reply}, timeout=_TICK)
                if done:
                    try:
                        return list(reply.result())
                    except (asyncio.IncompleteReadError, EOFError, pickle.PickleError):
                        at = max(_PROGRESS.unpack_from(self._page, 0)[0], 0)
                        raise OverBudget(at, self._ended()) from None
                now, cpu = time.monotonic(), self._cpu()
                at = _PROGRESS.unpack_from(self._page, 0)[0]
                if at != seen:
                    seen, since, spent = at, now, cpu
                elif cpu - spent > EVALUATION_SECONDS or now - since > EVALUATION_WALL_SECONDS:
                    raise OverBudget(max(at, 0), _over(EVALUATION_SECONDS))
                if now > deadline:
                    raise OverBudget(max(at, 0), "")
        except BaseException:
            reply.cancel()
            await self.stop()
            raise

    def _cpu(self) -> float:
        """The CPU seconds the worker has used (Linux ``/proc``); elsewhere, or when it
        cannot be read, the wall clock's seconds: a budget of CPU time is not spent by a
        worker waiting for a core on a busy machine."""
        pid = self.process.pid if self.process is not None else None
        try:
            fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
        except (OSError, IndexError, ValueError):
            return time.monotonic()

    def _ended(self) -> str:
        code = self.process.returncode if self.process is not None else None
        how = f" (exit status {code})" if code is not None else ""
        return f"the evaluation ended the evaluator process{how}: out of memory?"

    async def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.wait(), 10)
        if self._page is not None:
            self._page.close()
            self._page = None
        if self._file is not None:
            self._file.close()
            self._file = None

    async def _send(self, value: object) -> None:
        assert self.process is not None and self.process.stdin is not None
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.write(_FRAME.pack(len(data)) + data)
        await self.process.stdin.drain()

    async def _receive(self) -> Any:
        assert self.process is not None and self.process.stdout is not None
        size = _FRAME.unpack(await self.process.stdout.readexactly(_FRAME.size))[0]
        return pickle.loads(await self.process.stdout.readexactly(size))


def _widen(stdin: asyncio.StreamWriter | None) -> None:
    """The pipe to the worker made 1 MiB (Linux; 64 KiB else): a batch is written
    whole while the planner works out the next one."""
    pipe = stdin.transport.get_extra_info("pipe") if stdin is not None else None
    with contextlib.suppress(ImportError, AttributeError, OSError, ValueError):
        import fcntl

        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)  # type: ignore[union-attr]


def _importable() -> dict[str, str]:
    """The environment the worker starts with: this one, with the folder this package
    is in first on ``PYTHONPATH`` (the planner may have found it by ``sys.path``)."""
    root = str(Path(__file__).resolve().parents[2])
    paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def _over(seconds: float) -> str:
    return f"over its evaluation budget ({seconds:g} s)"


# -- the worker's side ---------------------------------------------------------------------


def outcome(condition: Any, program: Any, context: Any) -> Outcome:
    """One rule on one resource: None when it holds (or ``when`` is false), ``""`` when
    it is false, why when it cannot be evaluated (docs/policy.md)."""
    try:
        if condition is not None:
            applies = condition.execute(context)
            if applies is not True:
                return None if applies is False else f"when gave {_brief(applies)}, not a bool"
        result = program.execute(context)
    except Exception as err:  # the CEL library's evaluation errors (KeyError, TypeError...)
        return why(err)
    if result is True:
        return None
    return "" if result is False else f"the expression gave {_brief(result)}, not a bool"


def why(err: Exception) -> str:
    """An evaluation error as one line."""
    if isinstance(err, KeyError):
        return f"no such key: {err}"
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _brief(value: object) -> str:
    from reconciler.errors import brief

    return brief(value)


def _read(stream: IO[bytes]) -> Any:
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None
    return pickle.loads(stream.read(_FRAME.unpack(head)[0]))


def _write(stream: IO[bytes], value: object) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_FRAME.pack(len(data)) + data)
    stream.flush()


def _limit_memory() -> None:
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        wanted = MEMORY_LIMIT if hard == resource.RLIM_INFINITY else min(MEMORY_LIMIT, hard)
        resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))


def main(argv: Sequence[str]) -> int:
    """The worker: read the rules, then batches of jobs until the input ends."""
    from reconciler.specs.policy_bounds import load_cel

    _limit_memory()
    fd = int(argv[0])
    page = mmap.mmap(fd, mmap.PAGESIZE)
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    cel = load_cel()
    rules = _read(source)
    programs = [(cel.compile(when) if when else None, cel.compile(expr)) for when, expr in rules]
    _write(sink, "ready")
    while (jobs := _read(source)) is not None:
        outcomes: list[Outcome] = []
        for variables, indexes in jobs:
            try:
                context, failed = cel.Context(variables), None
            except Exception as err:  # a value CEL cannot hold (an integer over 64 bits)
                context, failed = None, why(err)
            for index in indexes:
                _PROGRESS.pack_into(page, 0, len(outcomes))
                if failed is not None:
                    outcomes.append(failed)
                else:
                    condition, program = programs[index]
                    outcomes.append(outcome(condition, program, context))
        _write(sink, outcomes)
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))
