"""Attacks on what other tools made round-tripping (issue 35): each test failed before
its fix."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from cli_runner import reconcile
from servers import NatsServer, run

from reconciler.cli.export_cmd import _dump
from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions
from reconciler.planning.export import export_state

_ACCOUNT = """\
apiVersion: jetstream.nats.io/v1beta2
kind: Account
metadata:
  name: {name!r}
spec:
  servers: ["nats://127.0.0.1:4222"]
---
apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata:
  name: orders
spec:
  account: {name!r}
  name: ORDERS
  subjects: ["a.>"]
"""


@pytest.mark.parametrize("name", ["../../evil", "a/b", "Team", "tëam", "..", "a..b", ""])
def test_a_nack_account_name_kubernetes_refuses_is_refused_before_writing(
    tmp_path: Path, name: str
) -> None:
    """An Account's name becomes a folder (``OUT-<name>``) and an environment: a name
    Kubernetes never stores (not an RFC 1123 subdomain) wrote ``../../evil`` outside
    ``--out``'s folder; uppercase and unicode names collide on case-insensitive disks."""
    work = tmp_path / "work"
    (work / "k8s").mkdir(parents=True)
    (work / "k8s" / "a.yaml").write_text(_ACCOUNT.format(name=name))
    done = reconcile("import", "--from", "nack", "k8s", "--out", "specs", cwd=work)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "a.yaml:4: metadata.name:" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["a.yaml"]


_KV_LIKE = {
    "storage": "file",
    "allow_rollup_hdrs": True,
    "deny_delete": True,
    "discard": "new",
    "allow_direct": True,
}


async def _kv_like_streams(url: str, configs: list[dict[str, Any]]) -> None:
    nc = await nats.connect(url)
    try:
        for config in configs:
            created = await nc.request(
                f"$JS.API.STREAM.CREATE.{config['name']}", json.dumps(config).encode()
            )
            assert "error" not in json.loads(created.data), created.data
            for n in range(3):
                subject = config["subjects"][0].replace(">", f"k{n}")
                await nc.request(subject, b"v", timeout=2)
    finally:
        await nc.close()


async def _streams(url: str) -> dict[str, Any]:
    """Each stream's config (less metadata) and message count."""
    nc = await nats.connect(url)
    try:
        names = json.loads((await nc.request("$JS.API.STREAM.NAMES", b"{}")).data)["streams"]
        found: dict[str, Any] = {}
        for name in sorted(names or []):
            info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"")).data)
            config = {k: v for k, v in info["config"].items() if k != "metadata"}
            found[name] = (config, info["state"]["messages"])
        return found
    finally:
        await nc.close()


def test_a_kv_stream_keeping_more_history_than_a_bucket_may_exports_as_a_stream(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A ``KV_`` stream with 70 values per key (more than a bucket's ``history`` 1-64)
    exported as a KeyValue document that validation refuses: export, then plan, failed
    with 'history: 70 is greater than the maximum of 64'. A bucket document is written
    only when, read back as a user's file, it means the live stream exactly."""
    config = {**_KV_LIKE, "name": "KV_deep", "subjects": ["$KV.deep.>"], "max_msgs_per_subject": 70}
    # and a name the server takes but a bucket's may not hold ('=')
    odd = {**_KV_LIKE, "name": "KV_a=b", "subjects": ["$KV.a=b.>"], "max_msgs_per_subject": 1}
    run(_kv_like_streams(clean_server.url, [config, odd]))
    options = ConnectionOptions(servers=clean_server.url)
    before = run(_streams(clean_server.url))
    files = export_state(run(engine.fetch_live(options)))
    kinds = [(f.name, f.documents[0]["kind"]) for f in files]
    assert kinds == [("stream-KV_a%3Db.yaml", "Stream"), ("stream-KV_deep.yaml", "Stream")]
    folder = tmp_path / "export"
    folder.mkdir()
    for file in files:
        (folder / file.name).write_text(_dump(file.documents))
    plan = run(engine.plan([folder], options))
    assert [c.reasons for c in plan.changes] == [("adopt: add the managed-by marker",)] * 2
    run(engine.apply([folder], options, lock_timeout=None))
    assert not run(engine.plan([folder], options)).has_changes
    assert run(_streams(clean_server.url)) == before  # every setting, all 3 messages


def _import_terraform(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    module = tmp_path / "module"
    module.mkdir()
    (module / "main.tf").write_text(text)
    return reconcile("import", "--from", "terraform", "module", "--out", "specs", cwd=tmp_path)


def test_a_terraform_resource_with_count_0_is_not_imported(tmp_path: Path) -> None:
    """``count = 0`` (the usual off switch) makes no instance: it was imported as a spec,
    with a warning only, and apply would have created a stream Terraform never made."""
    done = _import_terraform(
        tmp_path,
        'variable "enabled" {\n  default = 0\n}\n'
        'resource "jetstream_stream" "off" {\n  count    = var.enabled\n'
        '  name     = "OFF"\n  subjects = ["off.>"]\n}\n'
        'resource "jetstream_stream" "on" {\n  count    = "${var.enabled + 1}"\n'
        '  name     = "ON"\n  subjects = ["on.>"]\n}\n',
    )
    assert done.returncode == 0, done.stderr
    assert "main.tf:5: warning: count: jetstream_stream.off has count = 0" in done.stderr
    assert sorted(p.name for p in (tmp_path / "specs").iterdir()) == ["stream-ON.yaml"]


@pytest.mark.parametrize(
    "meta", ["count = 3", 'for_each = { a = "A", b = "B" }', "count = length(var.x)"]
)
def test_a_terraform_resource_of_several_instances_is_an_error(tmp_path: Path, meta: str) -> None:
    done = _import_terraform(
        tmp_path,
        f'resource "jetstream_stream" "many" {{\n  {meta}\n  name     = "MANY"\n'
        '  subjects = ["many.>"]\n}\n',
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "main.tf:2:" in done.stderr and "terraform.tfstate" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "specs").exists()


def test_terraform_meta_arguments_are_no_settings(tmp_path: Path) -> None:
    """``depends_on`` and ``provider`` were read as settings: 'the expression
    jetstream_stream.t is not resolved', an error on a module Terraform applies."""
    done = _import_terraform(
        tmp_path,
        'resource "jetstream_stream" "t" {\n  name     = "T"\n  subjects = ["t.>"]\n}\n'
        'resource "jetstream_stream" "s" {\n  name       = "S"\n  subjects   = ["s.>"]\n'
        "  depends_on = [jetstream_stream.t]\n  provider   = jetstream.other\n"
        "  lifecycle {\n    prevent_destroy = true\n  }\n}\n",
    )
    assert done.returncode == 0, done.stderr
    assert "main.tf:9: warning: provider:" in done.stderr
    assert "main.tf:10: warning: lifecycle:" in done.stderr
    document = yaml.safe_load((tmp_path / "specs" / "stream-S.yaml").read_text())
    assert document["name"] == "S" and document["subjects"] == ["s.>"]
    assert not {"depends_on", "provider", "lifecycle"} & set(document)


def test_a_sensitive_terraform_variable_is_never_shown_nor_copied(tmp_path: Path) -> None:
    """Decision: a ``sensitive = true`` variable's value is not copied into a spec (files
    for git) and never printed: its default reached the error 'name: 'hunter2 secret' is
    not a valid stream name' and would have been written in clear."""
    done = _import_terraform(
        tmp_path,
        'variable "pw" {\n  type      = string\n  sensitive = true\n'
        '  default   = "hunter2 secret"\n}\n'
        'resource "jetstream_stream" "s" {\n  name     = var.pw\n  subjects = ["s.>"]\n}\n'
        'resource "jetstream_kv_bucket" "b" {\n  name = "b"\n}\n'
        'resource "jetstream_kv_entry" "e" {\n  bucket = "b"\n  key    = "k"\n'
        '  value  = "token=${var.pw}"\n}\n',
    )
    assert done.returncode == 1
    assert "hunter2" not in done.stdout + done.stderr
    assert "main.tf:7: name:" in done.stderr and "main.tf:16: value:" in done.stderr
    assert "'pw' is sensitive" in done.stderr and not (tmp_path / "specs").exists()
    # the state marks the same value sensitive and is refused too: no hint points there
    assert "terraform.tfstate" not in done.stderr and "by hand" in done.stderr


@pytest.mark.parametrize("named", ["orders.yaml", "kv.yaml"])
def test_a_value_file_that_is_a_spec_stays_a_spec(
    clean_server: NatsServer, tmp_path: Path, named: str
) -> None:
    """A ``value_file`` naming a spec file (another stream's, or its own file) hid that
    file's specs: 'validate' passed with the stream gone, and ``apply --prune`` deleted
    ORDERS and its 3 messages. A file named as data is left out only when it holds no
    spec."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "orders.yaml").write_text("kind: Stream\nname: ORDERS\nsubjects: [orders.>]\n")
    server = ["--server", clean_server.url]
    assert reconcile("apply", "specs", *server, "--yes", cwd=tmp_path).returncode == 0
    run(_publish(clean_server.url, "orders.new", 3))
    (specs / "kv.yaml").write_text(
        "kind: KeyValue\nname: cfg\n---\nkind: KeyValueEntry\nbucket: cfg\nkey: copy\n"
        f"value_file: {named}\n"
    )
    applied = reconcile("apply", "specs", *server, "--prune", "--yes", cwd=tmp_path)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    streams = run(_streams(clean_server.url))
    assert streams["ORDERS"][1] == 3 and "KV_cfg" in streams
    again = reconcile("plan", "specs", *server, "--prune", "--detailed-exitcode", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr


async def _publish(url: str, subject: str, count: int) -> None:
    nc = await nats.connect(url)
    try:
        for n in range(count):
            await nc.request(subject, str(n).encode(), timeout=2)
    finally:
        await nc.close()


def test_a_nack_account_named_like_an_environment_elsewhere_is_refused(tmp_path: Path) -> None:
    """An Account ``prod`` imported into a project whose environment ``prod`` connects to
    another server: its streams were written to specs-prod (overwriting the file of the
    same name there) and the import said to add that folder to ``prod``, which would
    apply them to prod's server. A second import of the same manifests still works."""
    work = tmp_path / "work"
    (work / "k8s").mkdir(parents=True)
    manifest = _ACCOUNT.format(name="prod").replace("127.0.0.1:4222", "127.0.0.1:4333")
    (work / "k8s" / "a.yaml").write_text(manifest)
    args = ("import", "--from", "nack", "k8s", "--out", "specs")
    project = "specs: [specs]\nenvironments:\n  prod:\n    servers: nats://127.0.0.1:4222\n"
    (work / "reconcile.yaml").write_text(project)
    (work / "specs-prod").mkdir()
    (work / "specs-prod" / "stream-ORDERS.yaml").write_text("kind: Stream\nname: ORDERS\n")
    done = reconcile(*args, cwd=work)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "already has an environment prod that connects to other servers" in done.stderr
    assert "Traceback" not in done.stderr
    assert (work / "specs-prod" / "stream-ORDERS.yaml").read_text().endswith("name: ORDERS\n")
    assert (work / "reconcile.yaml").read_text() == project
    (work / "reconcile.yaml").write_text(project.replace("prod", "dev"))
    hand_written = reconcile(*args, cwd=work)  # specs-prod's file is not an import's
    assert hand_written.returncode == 1 and "stream-ORDERS.yaml" in hand_written.stderr
    assert reconcile(*args, "--overwrite", cwd=work).returncode == 0  # adds environment prod
    again = reconcile(*args, cwd=work)
    assert again.returncode == 0, again.stderr


def test_a_terraform_json_file_of_the_module_is_not_skipped_silently(tmp_path: Path) -> None:
    """``streams.tf.json`` belongs to the module as much as ``main.tf``: it was skipped
    without a word, and the import was a module less its resources."""
    module = tmp_path / "module"
    module.mkdir()
    (module / "main.tf").write_text(
        'resource "jetstream_stream" "a" {\n  name     = "A"\n  subjects = ["a.>"]\n}\n'
    )
    stream = {"name": "B", "subjects": ["b.>"]}
    (module / "more.tf.json").write_text(
        json.dumps({"resource": {"jetstream_stream": {"b": stream}}})
    )
    done = reconcile("import", "--from", "terraform", "module", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "more.tf.json:1: Terraform's JSON syntax is not read" in done.stderr
    assert not (tmp_path / "specs").exists()


@pytest.mark.parametrize(
    "again",
    [
        'resource "jetstream_stream" "s" {\n  name     = "B"\n  subjects = ["b.>"]\n}\n',
        'variable "env" {\n  default = "b"\n}\n',
        'locals {\n  prefix = "b"\n}\n',
    ],
    ids=["resource", "variable", "local"],
)
def test_a_terraform_name_declared_twice_is_an_error(tmp_path: Path, again: str) -> None:
    """Terraform refuses a module declaring a resource, variable or local twice; the
    import took one of them (the last file's) and wrote specs Terraform never applies."""
    module = tmp_path / "module"
    module.mkdir()
    (module / "a.tf").write_text(
        'variable "env" {\n  default = "a"\n}\nlocals {\n  prefix = "a"\n}\n'
        'resource "jetstream_stream" "s" {\n  name        = "A"\n'
        '  subjects    = ["${local.prefix}.>"]\n  description = var.env\n}\n'
    )
    (module / "b.tf").write_text(again)
    done = reconcile("import", "--from", "terraform", "module", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "b.tf:" in done.stderr and "is declared twice (the first at" in done.stderr
    assert not (tmp_path / "specs").exists()


def test_a_terraform_override_file_is_named_not_merged_wrongly(tmp_path: Path) -> None:
    """Terraform merges ``override.tf`` into the block it names (here max_age 1h over
    60 s); the import read it as a second resource: 'jetstream_stream.s.name: not set'."""
    module = tmp_path / "module"
    module.mkdir()
    (module / "main.tf").write_text(
        'resource "jetstream_stream" "s" {\n  name     = "S"\n  subjects = ["s.>"]\n'
        "  max_age  = 600\n}\n"
    )
    (module / "override.tf").write_text('resource "jetstream_stream" "s" {\n  max_age = 3600\n}\n')
    done = reconcile("import", "--from", "terraform", "module", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "override.tf:1: an override file" in done.stderr, done.stderr
    assert "not set" not in done.stderr and not (tmp_path / "specs").exists()


def test_a_terraform_file_given_twice_is_read_once(tmp_path: Path) -> None:
    """``import module module/main.tf``: the file was read twice, its resources twice."""
    module = tmp_path / "module"
    module.mkdir()
    (module / "main.tf").write_text(
        'resource "jetstream_stream" "s" {\n  name     = "S"\n  subjects = ["s.>"]\n}\n'
    )
    args = ("import", "--from", "terraform", "module", "module/main.tf", "--out", "specs")
    done = reconcile(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in (tmp_path / "specs").iterdir()] == ["stream-S.yaml"]
