"""Attacks on KeyValue entries (round 18d): buckets reshaped by hand, by someone else or
by the same plan, under the entries a spec declares. Each test failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, options, run, write

from reconciler.errors import ApplyFailed
from reconciler.execution import run as engine
from reconciler.execution.apply import apply_plan
from reconciler.jetstream import open_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # attack runs: .ci/run's second stage

SECRET = "TOPSECRET-hunter2-do-not-store-elsewhere"


async def _api(url: str, subject: str, body: dict[str, object]) -> dict[str, object]:
    nc = await nats.connect(url)
    try:
        reply = await nc.request(f"$JS.API.{subject}", json.dumps(body).encode(), timeout=5)
        answer: dict[str, object] = json.loads(reply.data)
        assert "error" not in answer, answer
        return answer
    finally:
        await nc.close()


def test_an_entry_is_never_written_into_a_stream_that_took_its_buckets_subjects(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Between the plan and its apply, someone moves the bucket's stream KV_cap off its
    subjects and makes a stream of their own take ``$KV.cap.>``. The secret entry's
    write was taken by that stream (its ack named it, and apply said "applied"): the
    value stored where nobody declared it, every later plan creating it again. The
    write must be stored by the bucket's stream or not at all."""
    spec = write(
        tmp_path,
        f"""
        kind: KeyValue
        name: cap
        ---
        kind: KeyValueEntry
        bucket: cap
        key: db.password
        value: {SECRET}
        secret: true
        """,
    )
    assert run(
        engine.apply(
            [write(tmp_path, "kind: KeyValue\nname: cap\n", "b.yaml")], options(clean_server)
        )
    ).ok
    plan = run(engine.plan([spec], options(clean_server)))
    assert [str(s.action) for s in plan.steps] == ["create"]
    url = clean_server.url
    config = run(_api(url, "STREAM.INFO.KV_cap", {}))["config"]
    assert isinstance(config, dict)
    run(_api(url, "STREAM.UPDATE.KV_cap", {**config, "subjects": ["$KV.elsewhere.>"]}))
    run(_api(url, "STREAM.CREATE.THIEF", {"name": "THIEF", "subjects": ["$KV.cap.>"]}))

    async def apply() -> None:
        async with open_client(options(clean_server)) as client:
            await apply_plan(plan, client)

    with pytest.raises(ApplyFailed, match=r"KeyValueEntry cap/db\.password"):
        run(apply())
    thief = run(_api(url, "STREAM.INFO.THIEF", {}))["state"]
    assert isinstance(thief, dict) and thief["messages"] == 0


def test_the_stream_header_of_an_entry_write_is_counted_against_max_value_size(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The server stores and counts every header of a write against the bucket's
    max_value_size, the expected stream's too (``$KV.small.k`` to ``KV_small``: 32
    bytes, 124 with the marker and the compare-and-set header): a value that fits with
    them is applied, one byte more is refused by the plan, not by the server after the
    bucket was made."""
    bucket = "kind: KeyValue\nname: small\nmax_value_size: 400\n---\n"
    entry = "kind: KeyValueEntry\nbucket: small\nkey: k\nvalue: {}\n"
    over = write(tmp_path, bucket + entry.format("y" * 277), "over.yaml")
    done = reconcile("apply", over.name, "--server", clean_server.url, "-y", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "its value (277 bytes) and headers (124 bytes)" in done.stderr
    names = run(_api(clean_server.url, "STREAM.NAMES", {})).get("streams") or []
    assert isinstance(names, list) and "KV_small" not in names
    fits = write(tmp_path, bucket + entry.format("y" * 276), "fits.yaml")
    done = reconcile("apply", fits.name, "--server", clean_server.url, "-y", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_prune_never_deletes_the_bucket_a_declared_entry_is_written_to(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """An entry may name a bucket already on the server, declared nowhere. When that
    bucket is this owner's (an earlier apply made it from a spec since removed, or moved
    to another folder), ``--prune`` planned the entry's update, then the bucket's
    delete: apply wrote the value and deleted it with the bucket, and the next plan
    failed ('neither declared nor on the server'). Now refused at the entry's bucket
    line, naming the bucket, before anything is written or deleted."""
    both = write(
        tmp_path,
        """
        kind: KeyValue
        name: cfg
        ---
        kind: KeyValueEntry
        bucket: cfg
        key: mode
        value: "on"
        """,
    )
    assert run(engine.apply([both], options(clean_server))).ok
    only = write(tmp_path, 'kind: KeyValueEntry\nbucket: cfg\nkey: mode\nvalue: "off"\n', "e.yaml")
    server = ["--server", clean_server.url]

    done = reconcile("apply", only.name, *server, "--prune", "--allow-replace", "-y", cwd=tmp_path)

    assert done.returncode == 1, done.stdout + done.stderr
    assert "e.yaml:2: bucket: bucket 'cfg'" in done.stderr, done.stderr
    assert "--prune" in done.stderr
    info = run(_api(clean_server.url, "STREAM.INFO.KV_cfg", {}))["state"]
    assert isinstance(info, dict) and info["messages"] == 1
    assert reconcile("plan", only.name, *server, cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "live"])
def test_an_entry_of_a_mirror_bucket_is_refused_at_its_line(
    clean_server: NatsServer, tmp_path: Path, declared: bool
) -> None:
    """A bucket mirroring another takes no writes of its own (docs/spec-format.md): its
    stream has no subjects. An entry naming one was planned as a create, the mirror was
    made, and the write failed with 'JetStream is not enabled for this account'. Now
    the plan is refused at the entry's bucket line, naming the bucket it mirrors."""
    buckets = (
        "kind: KeyValue\nname: origin\n---\nkind: KeyValue\nname: mir\nmirror: {name: origin}\n"
    )
    entry = "kind: KeyValueEntry\nbucket: mir\nkey: k\nvalue: v\n"
    if not declared:
        assert run(engine.apply([write(tmp_path, buckets, "b.yaml")], options(clean_server))).ok
    spec = write(tmp_path, (buckets + "---\n" if declared else "") + entry, "e.yaml")
    line = 9 if declared else 2

    done = reconcile("apply", spec.name, "--server", clean_server.url, "-y", cwd=tmp_path)

    assert done.returncode == 1, done.stdout + done.stderr
    assert f"e.yaml:{line}: bucket: bucket 'mir' mirrors 'origin'" in done.stderr, done.stderr
    names = run(_api(clean_server.url, "STREAM.NAMES", {})).get("streams") or []
    assert isinstance(names, list) and ("KV_mir" in names) == (not declared)


def test_an_entry_of_a_stream_that_is_no_bucket_any_more_is_refused_at_its_line(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A ``KV_<bucket>`` stream moved off ``$KV.<bucket>.>`` by hand is no bucket (the
    plan lists it as a Stream): an entry naming it was planned as a create every time,
    and its write went nowhere (or, since the stream header, failed). Now refused at
    the entry's bucket line."""
    assert run(
        engine.apply(
            [write(tmp_path, "kind: KeyValue\nname: cap\n", "b.yaml")], options(clean_server)
        )
    ).ok
    config = run(_api(clean_server.url, "STREAM.INFO.KV_cap", {}))["config"]
    assert isinstance(config, dict)
    run(_api(clean_server.url, "STREAM.UPDATE.KV_cap", {**config, "subjects": ["elsewhere.>"]}))
    spec = write(tmp_path, "kind: KeyValueEntry\nbucket: cap\nkey: k\nvalue: v\n", "e.yaml")

    done = reconcile("plan", spec.name, "--server", clean_server.url, cwd=tmp_path)

    assert done.returncode == 1, done.stdout + done.stderr
    assert "e.yaml:2: bucket: bucket 'cap'" in done.stderr, done.stderr
    assert "KV_cap" in done.stderr


def test_the_value_of_a_key_named_like_a_secret_is_never_shown(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A metadata value under a secret-looking name (``db_password``) is redacted in
    every plan, and no error quotes one; a KeyValue entry whose key says the same
    (``db.password``), written without ``secret: true``, was printed in clear by the
    plan (text, JSON, Markdown: the pull request's comment), before and after a change,
    and by the drift report. Now shown as ``(secret)``, as a secret entry is."""
    entry = "kind: KeyValue\nname: cfg\n---\nkind: KeyValueEntry\nbucket: cfg\nkey: db.password\n"
    spec = write(tmp_path, entry + f"value: {SECRET}\n")
    server = ["--server", clean_server.url]
    outputs = [
        reconcile("plan", spec.name, *server, "--format", form, cwd=tmp_path)
        for form in ("text", "json", "markdown")
    ]
    assert reconcile("apply", spec.name, *server, "-y", cwd=tmp_path).returncode == 0
    spec.write_text(entry + f"value: {SECRET}-rotated\n")
    outputs += [
        reconcile("plan", spec.name, *server, "--format", form, cwd=tmp_path)
        for form in ("text", "json", "markdown")
    ]
    outputs.append(reconcile("drift", spec.name, *server, cwd=tmp_path))
    assert "(secret)" in outputs[3].stdout, outputs[3].stdout
    for done in outputs:
        assert SECRET not in done.stdout + done.stderr, done.args
