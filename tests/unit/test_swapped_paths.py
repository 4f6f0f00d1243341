"""A spec file judged inside the repository, then swapped for a symlink pointing out of it
before it is read, is not read: the rule holds for the file opened (where the kernel says
it is), not only for the path the walk judged. Each case makes the swap between the walk
and the read, as someone writing the folder during a run could."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from test_parse_ahead import fresh, printed

from reconciler.errors import Problem, SpecError
from reconciler.specs import cache, paths, policy, project
from reconciler.specs.document import Abort
from reconciler.specs.files import feed_bytes, inside, read_bytes, real_spec_files
from reconciler.specs.ignore import read_ignore_file
from reconciler.specs.loader import load_spec_files
from reconciler.specs.paths import repository_root
from reconciler.specs.policy import load_policy
from reconciler.specs.project import load_project

SECRET_SPEC = "kind: Stream\nname: SECRET\nsubjects: [secret.>]\n"
ORDERS_SPEC = "kind: Stream\nname: ORDERS\nsubjects: [orders.>]\n"


def _repository(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A repository (its root marked by ``.git``) with ``specs/sub/orders.yaml``, and a
    folder beside it holding a spec of its own (what a swap would lead to)."""
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    (repo / ".git").mkdir(parents=True)
    (repo / "specs" / "sub").mkdir(parents=True)
    (repo / "specs" / "sub" / "orders.yaml").write_text(ORDERS_SPEC)
    outside.mkdir()
    (outside / "orders.yaml").write_text(SECRET_SPEC)
    return repo, repo / "specs", outside


def _walked(specs: Path, problems: list[Problem]) -> tuple[Path, list[Path]]:
    root = repository_root([specs])
    return root, inside(root, real_spec_files([specs], problems), problems)


def _names(documents: list[object]) -> set[str]:
    return {str(getattr(document, "body", {}).get("name")) for document in documents}


def _swap_file(specs: Path, outside: Path) -> None:
    target = specs / "sub" / "orders.yaml"
    target.unlink()
    target.symlink_to(outside / "orders.yaml")


def _swap_folder(specs: Path, outside: Path) -> None:
    (specs / "sub").rename(specs.parent / "sub-was")
    (specs / "sub").symlink_to(outside, target_is_directory=True)


@pytest.mark.parametrize("swap", [_swap_file, _swap_folder], ids=["the file", "a folder"])
def test_a_spec_swapped_for_a_symlink_out_after_the_walk_is_not_read(
    tmp_path: Path, swap: object
) -> None:
    repo, specs, outside = _repository(tmp_path)
    problems: list[Problem] = []
    root, files = _walked(specs, problems)
    assert root == repo and [f.name for f in files] == ["orders.yaml"] and not problems
    swap(specs, outside)  # type: ignore[operator]

    documents = load_spec_files(files, problems, within=root)

    assert "SECRET" not in _names(documents)
    assert [str(p.location) for p in problems] == [f"{files[0]}:1"]
    assert "out of the repository" in problems[0].message
    # the same read, the rule not asked for, follows the swap: the guard is what stops it
    assert "SECRET" in _names(load_spec_files(files, []))


#: Run in a fresh interpreter (a child is forked only where no other thread runs, and a
#: test worker has threads): the child parses every file first, then the folder is
#: swapped, and the loader takes the child's documents only for a text read again as
#: the child read it.
AHEAD = """
import json, sys
from pathlib import Path
from reconciler.specs import ahead
from reconciler.specs.files import inside, real_spec_files
from reconciler.specs.loader import load_spec_files
from reconciler.specs.paths import repository_root

specs, outside = Path(sys.argv[1]), Path(sys.argv[2])
parsed = ahead.parse_ahead([specs])
assert parsed is not None, "no child forked"
while parsed._reader is not None:
    parsed._drain(block=True)
problems = []
root = repository_root([specs])
files = inside(root, real_spec_files([specs], problems), problems)
(specs / "sub").rename(specs.parent / "sub-was")
(specs / "sub").symlink_to(outside, target_is_directory=True)
documents = load_spec_files(files, problems, parsed.load, within=root)
names = [d.body.get("name") for d in documents]
print(json.dumps({"names": names, "problems": [str(p.location) for p in problems]}))
"""


def test_a_file_the_parse_ahead_child_read_before_a_swap_is_not_read_after_it(
    tmp_path: Path,
) -> None:
    _, specs, outside = _repository(tmp_path)

    said = printed(fresh(AHEAD, str(specs), str(outside)))

    assert said["names"] == []
    assert said["problems"] == [f"{specs / 'sub' / 'orders.yaml'}:1"]


def test_a_data_file_whose_folder_is_swapped_after_it_was_judged_is_not_read(
    tmp_path: Path,
) -> None:
    repo, specs, outside = _repository(tmp_path)
    (specs / "sub" / "flags.json").write_text('{"on": true}')
    (outside / "flags.json").write_text('{"token": "s3cr3t"}')
    judged = Path(os.path.realpath(specs / "sub" / "flags.json"))
    assert read_bytes(judged, capped=False, within=repo) == b'{"on": true}'
    _swap_folder(specs, outside)

    with pytest.raises(Abort) as refused:
        read_bytes(judged, capped=False, within=repo)
    assert "s3cr3t" not in str(refused.value.problem)
    with pytest.raises(Abort):
        feed_bytes(judged, lambda chunk: None, within=repo)
    assert read_bytes(judged, capped=False) == b'{"token": "s3cr3t"}'  # the guard's doing


def test_a_file_swapped_for_a_link_into_git_is_not_read(tmp_path: Path) -> None:
    repo, specs, _ = _repository(tmp_path)
    (repo / ".git" / "config").write_text("kind: Stream\nname: TOKEN\nsubjects: [t.>]\n")
    problems: list[Problem] = []
    root, files = _walked(specs, problems)
    (specs / "sub" / "orders.yaml").unlink()
    (specs / "sub" / "orders.yaml").symlink_to(repo / ".git" / "config")

    documents = load_spec_files(files, problems, within=root)

    assert "TOKEN" not in _names(documents)
    assert [str(p.location) for p in problems] == [f"{files[0]}:1"]


def test_a_symlink_that_stays_inside_the_repository_is_read(tmp_path: Path) -> None:
    repo, specs, _ = _repository(tmp_path)
    (repo / "shared").mkdir()
    (repo / "shared" / "payments.yaml").write_text(ORDERS_SPEC.replace("ORDERS", "PAYMENTS"))
    (specs / "payments.yaml").symlink_to(repo / "shared" / "payments.yaml")
    problems: list[Problem] = []
    root, files = _walked(specs, problems)

    documents = load_spec_files(files, problems, within=root)

    assert _names(documents) == {"ORDERS", "PAYMENTS"} and not problems


# --- the files read beside the specs: judged by a path rule, then read (the same race) ----

TOKEN = "NATS_PASSWORD=hunter2-never-printed"


def _swapped_after(check: Any, swap: Any) -> Any:
    """``check`` (a path rule), then the swap: someone writing the folder in between."""

    def judged(*args: Any) -> Any:
        found = check(*args)
        swap()
        return found

    return judged


def _to_outside(target: Path, outside: Path) -> Any:
    def swap() -> None:
        target.unlink()
        target.symlink_to(outside)

    return swap


def test_an_ignore_file_swapped_after_its_check_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad ``.reconcileignore`` line is quoted in its error (a PR comment): swapped for
    a symlink to a runner's file between its path check and its read, that file's line
    came back in the error."""
    _, specs, outside = _repository(tmp_path)
    (outside / "environ").write_text(TOKEN + "\n")
    ignore = specs / ".reconcileignore"
    ignore.write_text("Stream ORDERS\n")
    assert read_ignore_file(ignore).rules  # read as it is
    swap = _to_outside(ignore, outside / "environ")
    monkeypatch.setattr(paths, "outside_problem", _swapped_after(paths.outside_problem, swap))

    with pytest.raises(SpecError) as refused:
        read_ignore_file(ignore)

    assert "hunter2" not in str(refused.value)
    assert [str(p.location) for p in refused.value.problems] == [f"{ignore}:1"]


def test_a_project_file_swapped_after_its_check_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The project file's bad line is quoted under its error too."""
    repo, _, outside = _repository(tmp_path)
    (outside / "environ.yaml").write_text(f"x: 1\n{TOKEN}: [unclosed\n")
    project_file = repo / "reconcile.yaml"
    project_file.write_text("owner: shop\nspecs: [specs]\nenvironments:\n  dev: {embedded: true}\n")
    assert load_project(project_file).owner == "shop"
    swap = _to_outside(project_file, outside / "environ.yaml")
    monkeypatch.setattr(project, "outside_problem", _swapped_after(project.outside_problem, swap))

    with pytest.raises(SpecError) as refused:
        load_project(project_file)

    assert "hunter2" not in str(refused.value)
    assert "out of the repository" in str(refused.value)


def test_a_cached_value_file_swapped_after_its_check_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached KeyValueEntry's ``value_file`` is read again (its bytes go to the
    server): its realpath compared with the one validated, then opened: a swap in
    between was followed out of the repository."""
    _, specs, outside = _repository(tmp_path)
    (specs / "sub" / "flags.json").write_text('{"on": true}')
    (outside / "flags.json").write_text('{"token": "s3cr3t"}')
    judged = os.path.realpath(specs / "sub" / "flags.json")
    assert cache._read_again(judged) == b'{"on": true}'
    swap = _to_outside(Path(judged), outside / "flags.json")
    monkeypatch.setattr(os.path, "realpath", _swapped_after(os.path.realpath, swap))

    with pytest.raises(OSError) as refused:  # a miss: the normal path judges it again
        cache._read_again(judged)

    assert "s3cr3t" not in str(refused.value)


def test_a_policy_file_of_the_repository_linked_out_is_not_read(tmp_path: Path) -> None:
    """A policy file is named on the command line (``--policy``, the Action's ``policy:``
    input) as well as by the project file, which judged only its own: a policy file in
    the checkout that a pull request made a symlink to a runner's file was read, its
    bad line quoted under the error (a PR comment). A file of the repository is now
    judged by the repository's rule, however it is named; one outside any repository
    is read as given."""
    repo, _, outside = _repository(tmp_path)
    (outside / "environ.yaml").write_text(f"x: 1\n{TOKEN}: [unclosed\n")
    (repo / "policies").mkdir()
    linked = repo / "policies" / "p.yaml"
    linked.symlink_to(outside / "environ.yaml")

    with pytest.raises(SpecError) as refused:
        load_policy([linked])

    assert "hunter2" not in str(refused.value)
    assert [str(p.location) for p in refused.value.problems] == [f"{linked}:1"]
    with pytest.raises(SpecError) as read:  # outside any repository: read as given
        load_policy([outside / "environ.yaml"])
    assert [str(p.location) for p in read.value.problems] == [f"{outside / 'environ.yaml'}:2"]
    assert "hunter2" not in str(read.value)  # read: its bad line names a secret, not quoted


def test_a_policy_file_swapped_after_its_check_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _, outside = _repository(tmp_path)
    (outside / "environ.yaml").write_text(f"x: 1\n{TOKEN}: [unclosed\n")
    (repo / "policies").mkdir()
    named = repo / "policies" / "p.yaml"
    named.write_text("rules: []\n")
    swap = _to_outside(named, outside / "environ.yaml")
    monkeypatch.setattr(policy, "outside_problem", _swapped_after(policy.outside_problem, swap))

    with pytest.raises(SpecError) as refused:
        load_policy([named])

    assert "hunter2" not in str(refused.value)
    assert "out of the repository" in str(refused.value)
