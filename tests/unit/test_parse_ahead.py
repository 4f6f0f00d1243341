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

paths = [Path(p) for p in sys.argv[2:]]
parsed = ahead.parse_ahead(paths)
assert parsed is not None, "no child forked"
if sys.argv[1] == "kill":
    os.kill(parsed._pid, signal.SIGKILL)
problems = []
files = inside(repository_root(paths), real_spec_files(paths, problems), problems)
out = {}
for path in files:
    got = parsed.take(path)
    read = load_file(path, [])
    out[path.name] = None if got is None else plain(got) == plain(read)
    again = parsed.take(path)
    assert again is None, "a file taken twice"
untaken = sorted(parsed._documents)  # parsed by the child, not in the loader's walk
parsed.close()
try:
    os.waitpid(parsed._pid, os.WNOHANG)
    reaped = False
except ChildProcessError:
    reaped = True
print(json.dumps({"files": out, "reaped": reaped, "untaken": untaken}))
"""


def in_a_fresh_process(mode: str, *paths: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", COMPARE, mode, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if k != ahead.ENV},
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


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
    YAML beyond the plainest (an anchor, a syntax error) and a symlink out of the
    repository are left to the loader, and each file is given once. The child is
    reaped."""
    specs = repository(tmp_path / "repo")
    seen = in_a_fresh_process("take", specs)
    files = seen["files"]
    taken = sorted(name for name, same in files.items() if same is not None)
    assert taken == sorted([f"s{i:02}.yaml" for i in range(30)] + ["empty.yaml", "when.yaml"])
    assert all(files[name] is True for name in taken)  # equal to what the loader reads
    assert files["anchor.yaml"] is None
    assert files["plain.json"] is None and files["bad.yaml"] is None
    assert "linked.yaml" not in files  # out of the repository: read by neither
    assert seen["untaken"] == []
    assert seen["reaped"]


def test_a_child_killed_before_it_answers_leaves_every_file_to_the_loader(
    tmp_path: Path,
) -> None:
    specs = repository(tmp_path / "repo")
    seen = in_a_fresh_process("kill", specs)
    assert seen["files"] and all(same is None for same in seen["files"].values())
    assert seen["reaped"]


def test_an_answer_cut_short_or_not_a_frame_is_refused() -> None:
    """What the parent unpacks must be whole frames of (name, list): else nothing of it
    is used (``ParsedAhead._collect`` leaves every file to the loader)."""
    import marshal

    body = marshal.dumps(("a.yaml", [({"kind": "Stream"}, 1, (1, ("kind",), (0,)))]))
    whole = ahead._LENGTH.pack(len(body)) + body
    assert ahead._frames(whole) == [("a.yaml", [({"kind": "Stream"}, 1, (1, ("kind",), (0,)))])]
    with pytest.raises(EOFError):
        ahead._frames(whole[:-1])
    other = marshal.dumps(["a.yaml", "not a list"])
    with pytest.raises(TypeError):
        ahead._frames(ahead._LENGTH.pack(len(other)) + other)
    with pytest.raises((ValueError, EOFError)):
        ahead._frames(ahead._LENGTH.pack(3) + b"\xff\xfe\xfd")


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
    monkeypatch.setenv(ahead.ENV, "0")
    assert ahead.parse_ahead([tmp_path]) is None


WIRED = """
import json, os, sys
from reconciler.specs import ahead
took = []
original = ahead.ParsedAhead.take
def take(self, path):
    got = original(self, path)
    took.append([path.name, got is not None])
    return got
ahead.ParsedAhead.take = take
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
    done = subprocess.run(
        [sys.executable, "-c", WIRED, *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "RECONCILE_"))},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == {"took": [["a.yaml", True], ["b.yaml", True]], "children": False}
    assert "specs/b.yaml:4: storage" in done.stderr
