"""KeyValue entries as code (``kind: KeyValueEntry``) on a real server: values written and
read back, compare-and-set against a concurrent writer, secret values never printed,
prune limited to this owner's entries, adoption, drift."""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path

import nats
import pytest
from cli_runner import reconcile
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from servers import NatsServer, options, run

from reconciler.errors import ApplyFailed
from reconciler.execution import run as engine
from reconciler.execution.apply import apply_plan
from reconciler.jetstream import open_client
from reconciler.planning.plan import Ownership
from reconciler.planning.steps import Update

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-Pa55word-do-not-print"
SPECS = f"""
kind: KeyValue
name: config
history: 5
---
kind: KeyValueEntry
bucket: config
key: feature.flags
value: "on"
---
kind: KeyValueEntry
bucket: config
key: db.password
value: {SECRET}
secret: true
---
kind: KeyValueEntry
bucket: config
key: blob
value: AAECAw==
encoding: base64
---
kind: KeyValueEntry
bucket: config
key: greeting
value_file: greeting.txt
"""


def write(tmp_path: Path, text: str = SPECS) -> Path:
    (tmp_path / "greeting.txt").write_bytes("héllo\n".encode())
    path = tmp_path / "specs.yaml"
    path.write_text(textwrap.dedent(text))
    return path


async def values(server: NatsServer, bucket: str = "config") -> dict[str, bytes]:
    """Every key of ``bucket`` not deleted, and its value, read with a raw client. The
    keys come from the stream's subjects: nats-py's ``kv.keys()`` watches the bucket, and
    once said "no keys found" of a bucket just written (CI, under load)."""
    nc = await nats.connect(server.url)
    try:
        kv = await nc.jetstream().key_value(bucket)
        prefix = f"$KV.{bucket}."
        asked = json.dumps({"subjects_filter": f"{prefix}>"}).encode()
        reply = await nc.request(f"$JS.API.STREAM.INFO.KV_{bucket}", asked, timeout=5)
        subjects = json.loads(reply.data)["state"].get("subjects") or {}
        out = {}
        for subject in sorted(subjects):
            key = subject.removeprefix(prefix)
            try:
                out[key] = (await kv.get(key)).value or b""
            except (KeyDeletedError, KeyNotFoundError):
                continue  # its last message a delete or purge marker: no key to kv.keys()
        return out
    finally:
        await nc.close()


def test_entries_are_written_read_back_and_replan_empty(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    spec = write(tmp_path)
    assert run(engine.apply([spec], options(clean_server))).ok
    assert run(values(clean_server)) == {
        "feature.flags": b"on",
        "db.password": SECRET.encode(),
        "blob": bytes([0, 1, 2, 3]),
        "greeting": "héllo\n".encode(),
    }
    assert not run(engine.plan([spec], options(clean_server))).has_changes
    spec.write_text(spec.read_text().replace('value: "on"', 'value: "off"'))
    (step,) = run(engine.plan([spec], options(clean_server))).steps
    assert isinstance(step, Update) and step.label == "KeyValueEntry config/feature.flags"
    assert [(f.before, f.after) for f in step.fields] == [("on", "off")]
    assert run(engine.apply([spec], options(clean_server))).ok
    assert run(values(clean_server))["feature.flags"] == b"off"


def test_a_concurrent_writer_is_detected_not_overwritten(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    spec = write(tmp_path)
    assert run(engine.apply([spec], options(clean_server))).ok
    spec.write_text(spec.read_text().replace('value: "on"', 'value: "off"'))

    async def race() -> None:
        plan = await engine.plan([spec], options(clean_server))
        nc = await nats.connect(clean_server.url)
        kv = await nc.jetstream().key_value("config")
        await kv.put("feature.flags", b"theirs")  # after the plan read the key
        await nc.close()
        async with open_client(options(clean_server)) as client:
            await apply_plan(plan, client)

    with pytest.raises(ApplyFailed, match="changed on the server since it was planned"):
        run(race())
    assert run(values(clean_server))["feature.flags"] == b"theirs"


def test_secret_values_never_appear_in_any_output(clean_server: NatsServer, tmp_path: Path) -> None:
    write(tmp_path)
    server = ["--server", clean_server.url]
    outputs = [
        reconcile("plan", "specs.yaml", *server, cwd=tmp_path),
        reconcile("plan", "specs.yaml", *server, "--format", "json", cwd=tmp_path),
        reconcile("plan", "specs.yaml", *server, "--format", "markdown", cwd=tmp_path),
        reconcile("apply", "specs.yaml", *server, "-y", cwd=tmp_path),
    ]
    (tmp_path / "specs.yaml").write_text(
        (tmp_path / "specs.yaml").read_text().replace(SECRET, SECRET + "-rotated")
    )
    outputs += [
        reconcile("plan", "specs.yaml", *server, cwd=tmp_path),
        reconcile("drift", "specs.yaml", *server, cwd=tmp_path),
        reconcile("drift", "specs.yaml", *server, "--format", "json", cwd=tmp_path),
        reconcile(
            "drift", "specs.yaml", *server, "--format", "html", "--out", "d.html", cwd=tmp_path
        ),
        reconcile("apply", "specs.yaml", *server, "-y", cwd=tmp_path),
    ]
    (tmp_path / "bad.yaml").write_text(
        f"kind: KeyValueEntry\nbucket: config\nkey: x\nvalue: [{SECRET}]\nsecret: true\n"
    )
    outputs.append(reconcile("validate", "bad.yaml", cwd=tmp_path))
    assert outputs[-1].returncode == 1 and "bad.yaml:4: value: invalid" in outputs[-1].stderr
    assert "(secret)" in outputs[4].stdout
    for done in outputs:
        assert SECRET not in done.stdout + done.stderr, done.args
    assert SECRET not in (tmp_path / "d.html").read_text()
    assert run(values(clean_server))["db.password"] == (SECRET + "-rotated").encode()


def test_the_spec_cache_reads_value_files_again_and_keeps_no_secret(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """With RECONCILE_SPEC_CACHE kept between runs (as in CI), a value file changed
    since the last run is planned and applied as changed (not the cached old value), and
    no secret value, from a file or inline, is ever written into the cache folder."""
    cache = tmp_path / "cache"
    env = {"RECONCILE_SPEC_CACHE": str(cache)}
    server = ["--server", clean_server.url]
    from_file = SPECS.replace(f"value: {SECRET}", "value_file: password.txt")
    (tmp_path / "password.txt").write_text(SECRET)
    write(tmp_path, from_file)
    assert reconcile("apply", "specs.yaml", *server, "-y", cwd=tmp_path, env=env).returncode == 0
    again = reconcile("plan", "specs.yaml", *server, "--detailed-exitcode", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert list(cache.glob("specs-*.json"))  # the run was cached

    (tmp_path / "password.txt").write_text(SECRET + "-rotated")
    (tmp_path / "greeting.txt").write_text("hello again")
    changed = reconcile("plan", "specs.yaml", *server, "--format", "json", cwd=tmp_path, env=env)
    assert changed.returncode == 0, changed.stderr
    steps = json.loads(changed.stdout)["changes"]
    assert sorted(step["name"] for step in steps) == ["db.password", "greeting"]
    assert reconcile("apply", "specs.yaml", *server, "-y", cwd=tmp_path, env=env).returncode == 0
    found = run(values(clean_server))
    assert found["db.password"] == (SECRET + "-rotated").encode()
    assert found["greeting"] == b"hello again"

    (tmp_path / "password.txt").unlink()
    gone = reconcile("plan", "specs.yaml", *server, cwd=tmp_path, env=env)
    assert gone.returncode == 1 and "specs.yaml:" in gone.stderr and "password.txt" in gone.stderr

    write(tmp_path)  # the secret inline: a run that is not cached
    before = set(cache.glob("specs-*.json"))
    assert reconcile("apply", "specs.yaml", *server, "-y", cwd=tmp_path, env=env).returncode == 0
    assert set(cache.glob("specs-*.json")) == before
    assert run(values(clean_server))["db.password"] == SECRET.encode()
    kept = b"".join(path.read_bytes() for path in cache.iterdir())
    for value in (SECRET, SECRET + "-rotated"):
        for form in (value.encode(), base64.b64encode(value.encode())):
            assert form not in kept


def test_prune_deletes_only_this_owners_entries(clean_server: NatsServer, tmp_path: Path) -> None:
    spec = write(tmp_path)
    assert run(engine.apply([spec], options(clean_server))).ok
    other = tmp_path / "other"
    other.mkdir()
    theirs = other / "theirs.yaml"
    theirs.write_text("kind: KeyValueEntry\nbucket: config\nkey: team.b\nvalue: b\n")
    team_b = Ownership("team-b")
    assert run(engine.apply([theirs], options(clean_server), ownership=team_b)).ok

    async def app_write() -> None:
        nc = await nats.connect(clean_server.url)
        kv = await nc.jetstream().key_value("config")
        await kv.put("app.state", b"written by an application")
        await nc.close()

    run(app_write())
    blob = (
        "---\nkind: KeyValueEntry\nbucket: config\nkey: blob\nvalue: AAECAw==\nencoding: base64\n"
    )
    assert blob in SPECS
    spec.write_text(SPECS.replace(blob, ""))
    plan = run(engine.plan([spec], options(clean_server)))
    assert [o.label for o in plan.orphans] == ["KeyValueEntry config/blob"]
    assert [f.label for f in plan.foreign] == ["KeyValueEntry config/team.b"]
    pruned = run(engine.plan([spec], options(clean_server), prune=True))
    assert [s.label for s in pruned.steps] == ["KeyValueEntry config/blob"]
    assert pruned.steps[0].action == "delete" and pruned.steps[0].destructive
    assert run(engine.apply([spec], options(clean_server), prune=True, allow_replace=True)).ok
    left = run(values(clean_server))
    assert "blob" not in left
    assert left["team.b"] == b"b" and left["app.state"] == b"written by an application"
    assert left["feature.flags"] == b"on"


def test_an_existing_value_is_adopted_and_another_owners_is_refused(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    bucket = tmp_path / "bucket.yaml"
    bucket.write_text("kind: KeyValue\nname: config\n")
    assert run(engine.apply([bucket], options(clean_server))).ok

    async def put(key: str, value: bytes) -> None:
        nc = await nats.connect(clean_server.url)
        kv = await nc.jetstream().key_value("config")
        await kv.put(key, value)
        await nc.close()

    run(put("feature.flags", b"on"))
    spec = tmp_path / "entry.yaml"
    spec.write_text(
        bucket.read_text()
        + '---\nkind: KeyValueEntry\nbucket: config\nkey: feature.flags\nvalue: "on"\n'
    )
    (step,) = run(engine.plan([spec], options(clean_server))).steps
    assert isinstance(step, Update) and step.fields == () and "adopt" in step.reasons[0]
    assert run(engine.apply([spec], options(clean_server))).ok
    assert not run(engine.plan([spec], options(clean_server))).has_changes
    refused = reconcile(
        "plan", str(spec), "--server", clean_server.url, "--owner", "team-b", cwd=tmp_path
    )
    assert refused.returncode == 1
    assert "managed by owner 'default', not 'team-b'" in refused.stderr


def test_drift_reports_a_value_changed_out_of_band(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    spec = write(tmp_path)
    assert run(engine.apply([spec], options(clean_server))).ok

    async def tamper() -> None:
        nc = await nats.connect(clean_server.url)
        kv = await nc.jetstream().key_value("config")
        entry = await kv.get("feature.flags")
        await kv.update("feature.flags", b"tampered", last=entry.revision)
        await nc.close()

    run(tamper())
    done = reconcile(
        "drift", "specs.yaml", "--server", clean_server.url, "--format", "json", cwd=tmp_path
    )
    assert done.returncode == 2, done.stderr
    report = json.loads(done.stdout)
    (drifted,) = [r for r in report["resources"] if r["status"] == "drifted"]
    assert drifted["kind"] == "KeyValueEntry" and drifted["name"] == "feature.flags"


def test_an_entry_of_a_bucket_that_does_not_exist_is_refused_at_its_line(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    spec = tmp_path / "x.yaml"
    spec.write_text("kind: KeyValueEntry\nbucket: nowhere\nkey: k\nvalue: v\n")
    done = reconcile("plan", "x.yaml", "--server", clean_server.url, cwd=tmp_path)
    assert done.returncode == 1
    assert "x.yaml:2: bucket: bucket 'nowhere' is neither declared" in done.stderr


def test_entries_ride_with_their_bucket_when_it_is_replaced(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    spec = write(tmp_path)
    assert run(engine.apply([spec], options(clean_server))).ok
    spec.write_text(spec.read_text().replace("history: 5", "history: 5\nstorage: memory"))
    plan = run(engine.plan([spec], options(clean_server)))
    assert [s.action for s in plan.steps] == ["replace", "create", "create", "create", "create"]
    assert run(engine.apply([spec], options(clean_server), allow_replace=True)).ok
    assert run(values(clean_server))["feature.flags"] == b"on"
    assert not run(engine.plan([spec], options(clean_server))).has_changes
