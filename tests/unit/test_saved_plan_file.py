"""Saved plans, the pure parts: the file's digest, its steps read back, the comparison
with a plan made again, the server's identity, the git commit read without git."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import subprocess
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from reconciler.errors import SavedPlanRefused
from reconciler.identity import ResourceRef
from reconciler.model.diff import FieldChange
from reconciler.model.server_identity import ServerIdentity
from reconciler.model.state import ServerInfo
from reconciler.planning.review import differences
from reconciler.planning.saved import SavedPlan, SavedRequest, integrity
from reconciler.planning.steps import Create, Plan, Update
from reconciler.specs.fingerprint import SpecDigest, digest_files, git_commit

SERVER = ServerInfo(version="2.15.1", api_level=5)
ORDERS = ResourceRef("Stream", "ORDERS")
ENTRY = ResourceRef("KeyValueEntry", "db.password", "cfg")


def a_plan(max_age: int = 3600, revision: int = 1) -> Plan:
    live = {"name": "ORDERS", "max_age": max_age, "max_msgs": -1}
    return Plan(
        server=SERVER,
        changes=(
            Update(
                ref=ORDERS,
                fields=(FieldChange("max_msgs", -1, 10),),
                config={**live, "max_msgs": 10},
                live=live,
            ),
            Update(
                ref=ENTRY,
                fields=(FieldChange("value", "(secret)", "(secret)"),),
                config={"value": "bmV3", "secret": True},
                live={"value": "b2xkLXNlY3JldA==", "revision": revision},
            ),
            Create(ref=ResourceRef("Stream", "AUDIT"), config={"name": "AUDIT"}),
        ),
    )


def saved(the_plan: Plan | None = None) -> SavedPlan:
    return SavedPlan.of(
        the_plan or a_plan(),
        SavedRequest(paths=("specs",)),
        SpecDigest("00" * 16, ()),
        ServerIdentity(name="test", account="$G"),
    )


def test_a_saved_plan_reads_back_as_the_plan_it_saved() -> None:
    text = saved().text()
    again = SavedPlan.parse(text, source="plan.json")
    assert again.differences(a_plan()) == []
    assert [step.ref for step in again.steps().changes] == [
        ORDERS,
        ENTRY,
        ResourceRef("Stream", "AUDIT"),
    ]


def test_the_file_keeps_an_entrys_revision_never_its_value() -> None:
    text = saved().text()
    assert "b2xkLXNlY3JldA==" not in text and "bmV3" not in text
    live = json.loads(text)["live"][1]
    assert live["config"] == {"revision": 1}


def test_an_edited_file_is_refused_by_its_digest() -> None:
    text = saved().text().replace('"max_msgs"', '"max_bytes"', 1)
    with pytest.raises(SavedPlanRefused, match="edited or corrupted"):
        SavedPlan.parse(text, source="plan.json")


def test_a_misshapen_file_with_a_fixed_up_digest_is_refused_not_a_crash() -> None:
    document = saved().to_json()
    document["live"] = document["live"][:1]  # one live config fewer than steps
    body = {k: v for k, v in document.items() if k != "digest"}
    document["digest"] = integrity(body)
    with pytest.raises(SavedPlanRefused, match="cannot read"):
        SavedPlan.parse(json.dumps(document), source="plan.json")


def test_not_a_saved_plan_nor_another_version() -> None:
    with pytest.raises(SavedPlanRefused, match="not a saved plan"):
        SavedPlan.parse('{"kind": "Stream"}', source="s.json")
    document = saved().to_json() | {"format_version": 99}
    with pytest.raises(SavedPlanRefused, match="format version 99"):
        SavedPlan.parse(json.dumps(document), source="plan.json")


def test_another_live_config_under_the_same_steps_differs() -> None:
    kept = saved()
    changed = kept.differences(a_plan(max_age=7200))
    assert changed == [
        "Stream ORDERS: its live config changed since the plan was made (max_age: 3600 -> 7200)"
    ]
    written = kept.differences(a_plan(revision=2))
    assert written == [
        "KeyValueEntry cfg/db.password: its live config changed since the plan was made "
        "(revision: 1 -> 2)"
    ]


def test_the_prompt_still_compares_steps_only() -> None:
    """After 'yes' the plans are seconds apart: the live configs are not compared there
    (unchanged behaviour); only a saved plan asks for them."""
    assert differences(a_plan(), a_plan(max_age=7200)) == []


def test_the_server_identity_compares_cluster_or_name_domain_and_account() -> None:
    node_a = ServerIdentity(
        name="n1", server_id="A", cluster="east", account="$G", version="2.12.1"
    )
    node_b = ServerIdentity(
        name="n2", server_id="B", cluster="east", account="$G", version="2.14.0"
    )
    assert node_a.differences(node_b) == []  # another node, another version: same cluster
    west = ServerIdentity(name="n1", cluster="west", account="$G")
    assert node_a.differences(west) == ["cluster: 'east', now 'west'"]
    alone = ServerIdentity(name="test", account="$G")
    assert alone.differences(ServerIdentity(name="test", account="TEAM")) == [
        "account: '$G', now 'TEAM'"
    ]
    assert alone.differences(node_a) == ["clustered: server 'test', now: cluster 'east'"]


def test_file_digests_are_keyed_and_name_what_changed(tmp_path: Path) -> None:
    spec = tmp_path / "specs" / "a.yaml"
    spec.parent.mkdir()
    spec.write_text("kind: Stream\nname: A\n")
    first = digest_files({"spec": [tmp_path / "specs"]}, root=tmp_path)
    other_salt = digest_files({"spec": [tmp_path / "specs"]}, root=tmp_path)
    assert first.files[0].path == "specs/a.yaml"
    assert first.files[0].digest != other_salt.files[0].digest  # a fresh salt each plan
    spec.write_text("kind: Stream\nname: B\n")
    (tmp_path / "specs" / "b.yaml").write_text("kind: Stream\nname: C\n")
    now = digest_files({"spec": [tmp_path / "specs"]}, root=tmp_path, salt=first.salt)
    assert first.changes(now) == [
        "specs/a.yaml: changed since the plan was saved",
        "specs/b.yaml: new since the plan was saved",
    ]


def test_a_huge_file_beside_the_specs_is_digested_a_chunk_at_a_time(tmp_path: Path) -> None:
    """A file of any size (a value file, or a huge one dropped into the spec folder
    between ``plan --out`` and ``apply``) is digested whole, holding one chunk of it at
    a time, never the file; a change at its very end is seen; a pipe is not waited on."""
    specs = tmp_path / "specs"
    specs.mkdir()
    huge = specs / "huge.yaml"
    with huge.open("wb") as out:  # 256 MiB, sparse: no disk used
        out.truncate(256 * 2**20)
    small = specs / "small.yaml"
    small.write_bytes(b"kind: Stream\nname: A\n")
    os.mkfifo(specs / "pipe.yaml")
    tracemalloc.start()
    try:
        first = digest_files({"spec": [specs]}, root=tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20  # the file is 256 MiB
    digests = {f.path: f.digest for f in first.files}
    assert digests["specs/pipe.yaml"] is None  # refused, not waited on
    key = bytes.fromhex(first.salt)
    whole = hmac.new(key, b"specs/small.yaml\0" + small.read_bytes(), hashlib.sha256)
    assert digests["specs/small.yaml"] == whole.hexdigest()  # the same digest as read whole
    with huge.open("r+b") as out:
        out.seek(256 * 2**20 - 1)
        out.write(b"x")
    now = digest_files({"spec": [specs]}, root=tmp_path, salt=first.salt)
    assert first.changes(now) == ["specs/huge.yaml: changed since the plan was saved"]


def _fake_git(root: Path, head: str, files: dict[str, str]) -> None:
    dot_git = root / ".git"
    dot_git.mkdir(parents=True)
    (dot_git / "HEAD").write_text(head)
    for name, text in files.items():
        (dot_git / name).parent.mkdir(parents=True, exist_ok=True)
        (dot_git / name).write_text(text)


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_the_commit_is_read_from_dot_git_without_git(tmp_path: Path) -> None:
    loose, packed, detached, none = (tmp_path / n for n in ("loose", "packed", "detached", "none"))
    _fake_git(loose, "ref: refs/heads/main\n", {"refs/heads/main": COMMIT + "\n"})
    _fake_git(
        packed, "ref: refs/heads/main\n", {"packed-refs": f"# pack\n{COMMIT} refs/heads/main\n"}
    )
    _fake_git(detached, COMMIT + "\n", {})
    none.mkdir()
    (loose / "sub").mkdir()
    assert git_commit(loose / "sub") == COMMIT  # from a folder inside the work tree
    assert git_commit(packed) == COMMIT
    assert git_commit(detached) == COMMIT
    assert git_commit(none) is None


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_commit_read_is_the_one_git_names(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    git("init", "-q")
    (tmp_path / "a").write_text("a")
    git("add", "a")
    git("commit", "-q", "-m", "a")
    git("pack-refs", "--all")
    assert git_commit(tmp_path) == git("rev-parse", "HEAD")


def test_the_file_follows_its_schema() -> None:
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    schemas = Path(__file__).resolve().parents[2] / "schemas"
    plan_schema = json.loads((schemas / "plan.schema.json").read_text())
    saved_schema = json.loads((schemas / "saved-plan.schema.json").read_text())
    Draft202012Validator.check_schema(saved_schema)
    registry: Registry[object] = Registry().with_resource(
        "plan.schema.json", Resource.from_contents(plan_schema)
    )
    validator = Draft202012Validator(saved_schema, registry=registry)
    errors = [e.message for e in validator.iter_errors(json.loads(saved().text()))]
    assert errors == []


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["plan"]["changes"][0].update(kind="Bogus"),
        lambda d: d["plan"]["changes"][0].update(stream=["x"]),
        lambda d: d["plan"]["changes"][0].update(action="explode"),
        lambda d: d["plan"]["changes"][0].update(fields="not a list"),
        lambda d: d["plan"]["changes"][0]["fields"][0].pop("path"),
        lambda d: d["live"][0].update(name="OTHER"),
        lambda d: d["request"].update(paths="specs"),
        lambda d: d["specs"]["files"].append({"path": "x"}),
        lambda d: d.update(server=None),
        lambda d: d.update(plan=[]),
    ],
)
def test_a_forged_file_with_its_digest_fixed_is_refused_never_a_crash(mutate: Any) -> None:
    document = saved().to_json()
    mutate(document)
    body = {k: v for k, v in document.items() if k != "digest"}
    document["digest"] = integrity(body)
    with pytest.raises(SavedPlanRefused, match="cannot read"):
        SavedPlan.parse(json.dumps(document), source="plan.json")
