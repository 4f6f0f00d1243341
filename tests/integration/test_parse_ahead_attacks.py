"""``reconcile plan`` parsing its spec files in a forked child (reconciler.specs.ahead),
attacked as whole processes against a real server: a file changed after the child read
it, a parent killed while its child still parses, a Ctrl-C reaching the child or the
parent as it is forked. Each time the process must say what one parsing alone says
(``RECONCILE_PARSE_AHEAD=0``), and leave nothing running behind it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_lifecycle import _request
from test_plan_apply import raw

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="a child parses ahead on Linux only"
)


def _environ(**extra: str) -> dict[str, str]:
    """The cleaned environment cli_runner.reconcile gives a run, plus ``extra``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))}
    return clean | {"NO_COLOR": "1"} | extra


def _started(argv: list[str], cwd: Path, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *argv],
        cwd=cwd,
        env=_environ(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _state(pid: int) -> str | None:
    """A process's state letter (R, S, T, Z, ...), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def _child_of(parent: subprocess.Popen[str], *, timeout: float = 60.0) -> int:
    """The pid of the first child ``parent`` forks (the one parsing ahead)."""
    listing = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            children = listing.read_text().split()
        except FileNotFoundError:
            children = []
        if children:
            return int(children[0])
        assert parent.poll() is None, "the plan process ended without forking"
    raise AssertionError("no child was forked")


def _read_bytes(pid: int) -> int:
    """The bytes process ``pid`` has read (/proc/PID/io rchar), 0 when unknown."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _running_in(folder: Path) -> list[int]:
    """The processes whose working folder is ``folder`` (a plan's, and its child's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == str(folder):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """A repository root (``.git``) whose processes are all ended after the test."""
    root = (tmp_path / "repo").resolve()
    (root / ".git").mkdir(parents=True)
    (root / "specs").mkdir()
    yield root
    for pid in _running_in(root):
        if _state(pid) not in (None, "Z"):
            os.kill(pid, signal.SIGKILL)


def raw_request(url: str, subject: str) -> Any:
    """The server's answer to one JetStream API request, read raw."""
    return run(_request(url, subject))


def _stream(description: str) -> str:
    return f"kind: Stream\nname: ORDERS\nsubjects: [orders.>]\ndescription: {description}\n"


def test_a_file_changed_after_the_child_read_it_is_planned_and_cached_as_it_reads_now(
    repo: Path, clean_server: NatsServer
) -> None:
    """The child reads the files at once; the parent reaches them after its imports. A
    file rewritten in between (a checkout under way, an editor saving) is planned as it
    reads when the parent reads it, as a process parsing alone plans it, and the spec
    cache keyed by its new bytes never holds the old ones (else every later run, parsing
    ahead or not, would plan, and apply, the old file from the cache)."""
    spec = repo / "specs" / "orders.yaml"
    spec.write_text(_stream("written-first"))
    cache = {"RECONCILE_SPEC_CACHE": str(repo / "cache"), "RECONCILE_CACHE_KEY": "k" * 40}
    argv = ["-m", "reconciler", "plan", "specs", "--format", "json"]
    argv += ["--server", clean_server.url]
    parent = _started(argv, repo, **cache)
    child = _child_of(parent)
    os.kill(parent.pid, signal.SIGSTOP)  # still importing the engine: nothing read yet
    try:
        while _state(child) not in (None, "Z"):  # the child has parsed and answered
            time.sleep(0.001)
        spec.write_text(_stream("rewritten"))
    finally:
        os.kill(parent.pid, signal.SIGCONT)
    out, err = parent.communicate(timeout=120)
    assert parent.returncode == 0, err
    assert "rewritten" in out and "written-first" not in out
    again = reconcile(*argv[2:], cwd=repo, env={**cache, "RECONCILE_PARSE_AHEAD": "0"})
    assert again.returncode == 0, again.stderr
    assert "rewritten" in again.stdout and "written-first" not in again.stdout
    assert raw(clean_server, lambda c: c.stream_names()) == []  # a plan writes nothing


def _big_spec_file(path: Path, megabytes: int) -> None:
    """One valid block-YAML file of about ``megabytes`` MiB (consumers with long
    descriptions): its parse takes the child a while."""
    pad = "x" * 200
    head = _stream("big")
    one = "---\nkind: Consumer\nstream: ORDERS\nname: C{0}\ndescription: {1}{0}\n"
    count = megabytes * 2**20 // (len(one) + len(pad) + 4)
    path.write_text(head + "".join(one.format(i, pad) for i in range(count)))


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_plan_killed_while_its_child_parses_leaves_nothing_running(
    repo: Path, clean_server: NatsServer, signum: int
) -> None:
    """A CI job's timeout, or ``kill``, ends the plan process while its child is still
    parsing (held stopped here, so that it surely is). The child ends with it: whoever
    reads the plan's output sees its end as the plan ends, and no process of it remains
    (a child still parsing went on for as long as one file's parse, up to about a second
    for a 16 MiB file, and before its streams were /dev/null it held that output open;
    a stopped one stayed for ever)."""
    big = repo / "specs" / "big.yaml"
    _big_spec_file(big, 3)
    size = big.stat().st_size
    parent = _started(["-m", "reconciler", "plan", "specs", "--server", clean_server.url], repo)
    child = _child_of(parent)
    while _read_bytes(child) < size:  # it has read the file: it is parsing it now
        assert _state(child) not in (None, "Z"), "the child ended before it read the file"
    os.kill(child, signal.SIGSTOP)
    os.kill(parent.pid, signum)
    parent.communicate(timeout=30)  # the output ends: nobody holds it open any more
    assert parent.returncode == -signum
    deadline = time.monotonic() + 30
    while _state(child) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _state(child) in (None, "Z")  # ended (a zombie only until init reaps it)


#: A fresh interpreter running the CLI after an at-fork hook that raises SIGINT in the
#: child (argv[1] "child") or the parent ("parent") as the fork returns: a Ctrl-C at
#: that very moment, which no timing could hit reliably.
CTRL_C_AT_FORK = """
import ctypes, functools, os, signal, sys
libc = ctypes.CDLL(None)
ctrl_c = functools.partial(libc["raise"], signal.SIGINT)
if sys.argv[1] == "child":
    os.register_at_fork(after_in_child=ctrl_c)
else:
    os.register_at_fork(after_in_parent=ctrl_c)
from reconciler.cli import main
sys.argv = ["reconcile", *sys.argv[2:]]
main()
"""


def test_a_ctrl_c_reaching_the_child_as_it_is_forked_writes_nothing(
    repo: Path, clean_server: NatsServer
) -> None:
    """The child takes the default SIGINT action (ends at once, silently); until it has,
    the parent's handler was there: a Ctrl-C then printed a KeyboardInterrupt traceback
    from the child (an at-fork hook interrupted: 'Exception ignored in ...'), or ran the
    parent's code on in it. Now the plan and its output are those of a process parsing
    alone, and the child wrote nothing."""
    for index in range(5):
        text = _stream("ctrl-c").replace("ORDERS", f"S{index}").replace("orders", f"s{index}")
        (repo / "specs" / f"s{index}.yaml").write_text(text)
    args = ["plan", "specs", "--server", clean_server.url]
    hooked = _started(["-c", CTRL_C_AT_FORK, "child", *args], repo)
    out, err = hooked.communicate(timeout=120)
    alone = reconcile(*args, cwd=repo, env={"RECONCILE_PARSE_AHEAD": "0"})
    assert (hooked.returncode, out, err) == (alone.returncode, alone.stdout, alone.stderr)
    assert "5 to create" in out
    assert raw(clean_server, lambda c: c.stream_names()) == []


def test_a_ctrl_c_reaching_the_parent_as_it_forks_ends_the_child_too(
    repo: Path, clean_server: NatsServer
) -> None:
    """A Ctrl-C the parent takes right after the fork stops the command as any Ctrl-C
    does, and the child it had just forked is ended and reaped before the process ends:
    none of the run's processes remains."""
    _big_spec_file(repo / "specs" / "big.yaml", 3)
    args = ["plan", "specs", "--server", clean_server.url]
    hooked = _started(["-c", CTRL_C_AT_FORK, "parent", *args], repo)
    _, err = hooked.communicate(timeout=120)
    assert hooked.returncode != 0
    assert "Traceback" not in err
    assert _running_in(repo) == []


def test_a_value_file_over_16_mib_is_a_value_as_before_the_spec_file_cap(
    server_factory: Callable[..., NatsServer], repo: Path
) -> None:
    """A KeyValueEntry's ``value_file`` is data, not a spec: the 16 MiB cap of a spec
    file, which came to it with ``files.read_bytes`` (b920321), refused a 17 MiB value a
    server with ``max_payload: 24MiB`` takes, in validation, and left a saved plan's
    digest of it None (a change to it after ``plan --out`` went unseen). Binary bytes
    (not UTF-8), as before: put whole; changed after the plan was saved: refused."""
    mib = 1 << 20
    server = server_factory(
        config={"max_payload": 24 * mib, "jetstream": {"store_dir": str(repo.parent / "js")}}
    )
    value = bytes(range(256)) * (17 * mib // 256)  # 17 MiB, \xff and \xfe: not UTF-8
    (repo / "specs" / "blob.bin").write_bytes(value)
    (repo / "specs" / "cfg.yaml").write_text(
        "kind: KeyValue\nname: cfg\n---\n"
        "kind: KeyValueEntry\nbucket: cfg\nkey: blob\nvalue_file: blob.bin\n"
    )
    saved = repo / "plan.json"

    planned = reconcile("plan", "specs", "--server", server.url, "--out", str(saved), cwd=repo)
    assert planned.returncode in (0, 2), planned.stdout + planned.stderr
    (repo / "specs" / "blob.bin").write_bytes(value[:-1] + b"!")  # changed since saved
    refused = reconcile("apply", str(saved), "--server", server.url, "--yes", cwd=repo)
    assert refused.returncode != 0 and "blob.bin" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "error" in raw_request(server.url, "$JS.API.STREAM.INFO.KV_cfg")  # nothing made

    applied = reconcile("apply", "specs", "--server", server.url, "--yes", cwd=repo)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    info = raw_request(server.url, "$JS.API.STREAM.INFO.KV_cfg")
    assert info["state"]["messages"] == 1
    assert info["state"]["bytes"] > len(value)  # the whole value, stored
