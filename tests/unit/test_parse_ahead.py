"""Spec files parsed ahead in a forked child (``reconciler.specs.ahead``): the loader gets
from it exactly what it reads itself, or reads the file itself.

A fork copies one thread, and this suite's workers run several, so each test that forks
does it in a fresh interpreter (:func:`in_a_fresh_process`), as ``reconcile plan`` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from reconciler.specs import ahead

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="a child parses ahead on Linux only"
)

#: Run in a fresh interpreter: parse_ahead over argv[1:], then for every file of the
#: loader's own walk what the child gave and what the loader reads, compared.
COMPARE = """
import json, os, signal, sys
from pathlib import Path
from reconciler.specs import ahead
from reconciler.specs.files import inside, real_spec_files
from reconciler.specs.loader import load_file
from reconciler.specs.paths import repository_root

def plain(documents):
    return [[d.body, str(d.source), sorted((k, str(v)) for k, v in d.locations.items())]
            for d in documents]

mode, paths = sys.argv[1], [Path(p) for p in sys.argv[2:]]
parsed = ahead.parse_ahead(paths)
assert parsed is not None, "no child forked"
sent = {}
if mode == "kill":
    os.kill(parsed._pid, signal.SIGKILL)
elif mode in ("whole", "rewrite"):  # the child's whole answer first: certain shares
    while parsed._reader is not None:
        parsed._drain(block=True)
    sent = {name: docs is not None for name, docs in parsed._seen.items()}
    if mode == "rewrite":
        first = paths[0] / "a.yaml"
        first.write_text(first.read_text().replace("OLD", "NEW"))
problems = []
files = inside(repository_root(paths), real_spec_files(paths, problems), problems)
here = []
def read_file(path, found):
    here.append(path.name)
    return load_file(path, found)
loaded = parsed.load(files, read_file)
out = {p.name: plain(docs) == plain(load_file(p, [])) for p, (docs, _) in zip(files, loaded)}
try:
    os.waitpid(parsed._pid or -1, os.WNOHANG)
    reaped = False
except ChildProcessError:
    reaped = True
walked = {str(p) for p in files}
outside = sorted(name for name in sent if name not in walked)
names = [d.body.get("name") for docs, _ in loaded for d in docs]
print(json.dumps(
    {"equal": out, "here": sorted(here), "reaped": reaped, "outside": outside, "names": names}
))
"""


def fresh(script: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``script`` run with ``args`` in a fresh interpreter (no thread: a child can be
    forked), none of the run's NATS_/RECONCILE_ variables set; it must end with 0."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))},
    )
    assert done.returncode == 0, done.stderr
    return done


def printed(done: subprocess.CompletedProcess[str]) -> Any:
    """The JSON a fresh run printed last."""
    return json.loads(done.stdout.splitlines()[-1])


def in_a_fresh_process(mode: str, *paths: Path) -> dict[str, Any]:
    return dict(printed(fresh(COMPARE, mode, *map(str, paths))))


def repository(root: Path) -> Path:
    """Spec files of every sort the loader meets, in a repository root (``.git``)."""
    (root / ".git").mkdir(parents=True)
    specs = root / "specs"
    (specs / "nested").mkdir(parents=True)
    for index in range(30):
        consumers = "".join(
            f"---\nkind: Consumer\nstream: S{index}\nname: C{c}\nfilter_subject: s{index}.c{c}\n"
            "ack_policy: explicit  # a comment\nmax_deliver: 5\n"
            for c in range(4)
        )
        text = (
            f"kind: Stream\nname: S{index}\ndescription: 'orders of shop {index}'\n"
            f'subjects: [s{index}.>, "t{index}.*"]\nmax_age: 7d\nmetadata:\n  team: a b\n'
            + consumers
        )
        (specs / "nested" if index % 3 else specs).joinpath(f"s{index:02}.yaml").write_text(text)
    (specs / "anchor.yaml").write_text(
        "kind: Stream\nname: A\nsubjects: &s [a.>]\n---\nkind: Stream\nname: B\nsubjects: *s\n"
    )
    (specs / "when.yaml").write_text("kind: Stream\nname: W\nsubjects: [w]\nseen: 2024-01-01\n")
    (specs / "plain.json").write_text('{"kind": "Stream", "name": "J", "subjects": ["j"]}')
    (specs / "empty.yaml").write_text("")
    (specs / "bad.yaml").write_text("kind: Stream\nname: [unclosed\n")
    outside = root.parent / f"{root.name}-outside.yaml"
    outside.write_text("kind: Stream\nname: OUT\nsubjects: [out]\n")
    (specs / "linked.yaml").symlink_to(outside)
    return specs


def test_a_child_parses_exactly_what_the_loader_reads_and_leaves_it_the_rest(
    tmp_path: Path,
) -> None:
    """Block YAML comes from the child, equal to the loader's own documents (values,
    lines, the file; a date stays the string it is written as, there as here); JSON,
    YAML beyond the plainest (an anchor, a syntax error) are read by the loader itself,
    and the child reads no file out of the repository. The child is reaped."""
    specs = repository(tmp_path / "repo")
    seen = in_a_fresh_process("whole", specs)
    assert all(seen["equal"].values()) and "linked.yaml" not in seen["equal"]
    assert seen["here"] == ["anchor.yaml", "bad.yaml", "plain.json"]
    assert seen["outside"] == []  # the child parsed nothing the loader's walk leaves out
    assert seen["reaped"]


def test_a_child_killed_at_once_leaves_the_files_to_the_loader(tmp_path: Path) -> None:
    """Whatever the child sent before it died is whole frames or nothing: every file's
    documents are the loader's own."""
    specs = repository(tmp_path / "repo")
    seen = in_a_fresh_process("kill", specs)
    assert len(seen["equal"]) == 35 and all(seen["equal"].values())
    assert {"anchor.yaml", "bad.yaml", "plain.json"} <= set(seen["here"])
    assert seen["reaped"]


def test_the_loader_and_the_child_meet_in_the_middle(tmp_path: Path) -> None:
    """A child that has sent nothing yet costs the loader no wait: it reads the files
    from the last one back and takes the child's frames for the first ones as they
    come, each file once, every one equal to its own reading."""
    specs = repository(tmp_path / "repo")
    seen = in_a_fresh_process("meet", specs)
    assert len(seen["equal"]) == 35 and all(seen["equal"].values())
    assert len(seen["here"]) == len(set(seen["here"]))
    assert seen["reaped"]


def test_an_answer_that_is_not_whole_frames_is_not_used() -> None:
    """A frame must be (file name, digest, a list of documents or None): a cut one waits
    for its end, anything else leaves every file to the loader (``ParsedAhead._drain``)."""
    import marshal

    packed = [({"kind": "Stream"}, 1, (1, ("kind",), (0,)))]
    body = marshal.dumps(("a.yaml", b"d", packed))
    assert ahead._frame(body) == ("a.yaml", b"d", packed)
    assert ahead._frame(marshal.dumps(("b.json", b"", None))) == ("b.json", b"", None)
    for foreign in (["a.yaml", b"d", "not a list"], ("a.yaml", "not bytes", packed)):
        with pytest.raises(TypeError):
            ahead._frame(marshal.dumps(foreign))
    with pytest.raises((ValueError, EOFError)):
        ahead._frame(b"\xff\xfe\xfd")
    parsed = ahead.ParsedAhead(0, -1)
    parsed._pid, parsed._reader = None, None  # no child: nothing to stop
    parsed._buffer += ahead._LENGTH.pack(len(body)) + body[:-1]
    parsed._take_frames()  # cut: kept until the rest comes
    assert parsed._seen == {} and len(parsed._buffer) == ahead._LENGTH.size + len(body) - 1
    parsed._buffer += body[-1:]
    parsed._take_frames()
    assert list(parsed._seen) == ["a.yaml"] and not parsed._buffer


def test_a_file_rewritten_after_the_child_parsed_it_is_read_as_it_is_now(
    tmp_path: Path,
) -> None:
    """The child's documents are used only for the text the loader reads when it gets to
    the file: one rewritten since (a checkout under way) is read again, as it is now."""
    specs = tmp_path / "specs"
    specs.mkdir()
    old = "kind: Stream\nname: OLD\nsubjects: [a.>]\n"
    (specs / "a.yaml").write_text(old)
    (specs / "b.yaml").write_text("kind: Stream\nname: B\nsubjects: [b.>]\n")
    seen = in_a_fresh_process("rewrite", specs)
    assert seen["here"] == ["a.yaml"] and all(seen["equal"].values())
    assert seen["names"] == ["NEW", "B"]


def test_no_child_is_forked_beside_another_thread_or_when_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork copies one thread: a lock another one holds would stay held in the child."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert ahead.parse_ahead([tmp_path]) is None
    finally:
        stop.set()
        other.join()
    forked: list[object] = []
    monkeypatch.setattr(ahead, "_fork", forked.append)  # no fork in this test's process
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    for off in ("0", "false", "No", " off "):
        monkeypatch.setenv(ahead.ENV, off)
        ahead.parse_ahead([tmp_path])
    assert forked == []
    monkeypatch.setenv(ahead.ENV, "1")
    ahead.parse_ahead([tmp_path])
    assert forked == [[tmp_path]]


WIRED = """
import json, os, sys
from reconciler.specs import ahead
took = []
original = ahead.ParsedAhead.load
def load(self, files, read_file):
    while self._reader is not None:  # the child's whole answer first: certain shares
        self._drain(block=True)
    here = []
    def tracked(path, found):
        here.append(path.name)
        return read_file(path, found)
    out = original(self, files, tracked)
    took.append({"files": [p.name for p in files], "here": here})
    return out
ahead.ParsedAhead.load = load
from reconciler.cli import cli
from reconciler.errors import SpecError
try:
    cli.main(args=[*sys.argv[1:], "specs"], prog_name="reconcile", standalone_mode=False)
except SpecError as err:
    print(str(err), file=sys.stderr)
try:
    os.waitpid(-1, os.WNOHANG)
    children = True
except ChildProcessError:
    children = False
print(json.dumps({"took": took, "children": children}))
"""


@pytest.mark.parametrize("command", [("plan",), ("apply", "--yes"), ("apply", "--dry-run")])
def test_reconcile_plan_and_apply_take_their_files_from_the_child_and_reap_it(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    """The CLI's plan and apply fork the child before they import the engine, the load
    takes every file from it, and an error is still said at its FILE:LINE (no server is
    asked: the files are invalid)."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.yaml").write_text("kind: Stream\nname: A\nsubjects: [a.>]\n")
    (specs / "b.yaml").write_text("kind: Stream\nname: B\nsubjects: [b.>]\nstorage: disc\n")
    done = fresh(WIRED, *command, cwd=tmp_path)
    seen = printed(done)
    assert seen == {"took": [{"files": ["a.yaml", "b.yaml"], "here": []}], "children": False}
    assert "specs/b.yaml:4: storage" in done.stderr


STREAMS = """
import json, os, sys, time
from pathlib import Path
from reconciler.specs import ahead
parsed = ahead.parse_ahead([Path(sys.argv[1])])
seen = []
for _ in range(5000):  # until the child has let go, or has ended (then: nothing seen)
    try:
        seen = [os.readlink(f"/proc/{parsed._pid}/fd/{fd}") for fd in (0, 1, 2)]
    except FileNotFoundError:
        break
    if seen == [os.devnull] * 3:
        break
    time.sleep(0.001)
parsed.close()
print(json.dumps(seen))
"""


def test_the_child_keeps_none_of_the_parent_s_standard_streams(tmp_path: Path) -> None:
    """The child writes nothing to the terminal and never holds the parent's output open
    (``reconcile plan | ...`` ends when the parent does): its streams are /dev/null."""
    specs = tmp_path / "specs"
    specs.mkdir()
    big = "".join(f"---\nkind: Stream\nname: S{i}\nsubjects: [s{i}.>]\n" for i in range(40_000))
    (specs / "big.yaml").write_text(big)  # a parse long enough to look at the child
    assert printed(fresh(STREAMS, str(specs))) == [os.devnull] * 3


CTRL_C_AT_FORK = """
import ctypes, functools, json, os, sys
from pathlib import Path
from reconciler.specs import ahead

# a Ctrl-C reaching the parent as its fork returns (C raise(): no handler runs in it)
os.register_at_fork(after_in_parent=functools.partial(ctypes.CDLL(None)["raise"], 2))
try:
    parsed = ahead.parse_ahead([Path(sys.argv[1])])
    interrupted = False
except KeyboardInterrupt:
    parsed, interrupted = None, True
try:
    os.waitpid(-1, os.WNOHANG)
    left = True
except ChildProcessError:
    left = False
if parsed is not None:
    parsed.close()
print(json.dumps({"interrupted": interrupted, "left": left}))
"""


def test_a_ctrl_c_as_the_parent_forks_is_raised_and_the_child_ended(tmp_path: Path) -> None:
    """Signals are blocked while the process forks: a Ctrl-C the parent takes then is
    raised from parse_ahead once the child is known, which is ended and reaped first
    (without the block it was swallowed by an at-fork hook, 'Exception ignored', the
    command ran on, and a host process kept the child)."""
    specs = repository(tmp_path / "repo")
    assert printed(fresh(CTRL_C_AT_FORK, str(specs))) == {"interrupted": True, "left": False}


def test_a_file_the_child_went_past_is_read_here_not_waited_for(tmp_path: Path) -> None:
    """A file the child's walk lacked (added after it walked) while the child still runs:
    once a later file's frame has come, the loader reads that one itself instead of
    waiting for a frame that will never come. Fed by hand, through a pipe kept open."""
    import marshal

    from reconciler.specs.loader import load_file

    names = ["a.yaml", "b.yaml", "c.yaml"]
    files = [tmp_path / name for name in names]
    for path in files:
        path.write_text(f"kind: Stream\nname: {path.stem.upper()}\nsubjects: [{path.stem}]\n")
    reader, writer = os.pipe()
    parsed = ahead.ParsedAhead(0, reader)
    parsed._pid = None  # no child to stop: the pipe stands for it
    for path in (files[0], files[2]):  # b.yaml was not in its walk
        text = path.read_text()
        body = {"kind": "Stream", "name": path.stem.upper(), "subjects": [path.stem]}
        lines = (1, ("kind", "name", "subjects"), (0, 1, 2))
        data = marshal.dumps((str(path), ahead._digest(text), [(body, 1, lines)]))
        os.write(writer, ahead._LENGTH.pack(len(data)) + data)
    here: list[str] = []

    def read_file(path: Path, found: list[Any]) -> Any:
        here.append(path.name)
        return load_file(path, found)

    result: list[Any] = []
    loading = threading.Thread(target=lambda: result.append(parsed.load(files, read_file)))
    loading.start()
    loading.join(60)
    still = loading.is_alive()
    os.close(writer)  # lets a waiting load go, so that the test ends either way
    loading.join(60)
    assert not still, "the loader waited for a frame that never comes"
    assert "b.yaml" in here and [d.body["name"] for docs, _ in result[0] for d in docs] == [
        "A",
        "B",
        "C",
    ]
