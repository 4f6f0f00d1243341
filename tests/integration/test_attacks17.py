"""Attacks on the importers and the export (round 17): hostile or careless files given to
``reconcile import``, and names read from a server by ``reconcile export``. Each test
failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, run

from reconciler.specs.loader import load_spec_files

DATA = Path(__file__).resolve().parents[1] / "data"
SECRET = "TOPSECRET-hunter2-do-not-print"


def _state_with_sensitive(tmp_path: Path, *marks: tuple[str, str]) -> Path:
    """The test data's ``terraform.tfstate`` with the KV entry's value set to SECRET and
    marked sensitive, as Terraform records a value made from a ``sensitive`` variable:
    each of ``marks`` is (resource type, attribute) put in ``sensitive_attributes``."""
    state = json.loads((DATA / "terraform" / "terraform.tfstate").read_text())
    for resource in state["resources"]:
        instance = resource["instances"][0]
        if resource["type"] == "jetstream_kv_entry":
            instance["attributes"]["value"] = SECRET
        if resource["type"] == "jetstream_stream":
            instance["attributes"]["description"] = SECRET
        instance["sensitive_attributes"] = [
            [{"type": "get_attr", "value": attr}]
            for kind, attr in marks
            if kind == resource["type"]
        ]
    path = tmp_path / "terraform.tfstate"
    path.write_text(json.dumps(state, indent=2))
    return path


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("out", [True, False], ids=["out", "stdout"])
def test_a_sensitive_value_of_a_terraform_state_is_never_copied_nor_shown(
    tmp_path: Path, out: bool
) -> None:
    """Decision (as for a ``sensitive = true`` variable of a ``.tf`` file): a value the
    state lists in ``sensitive_attributes`` (a KV entry's value made from a sensitive
    variable) is not copied into a spec nor printed; the import stops at its line,
    naming the attribute. It was written in clear to kv-CFG.yaml (and to stdout), with no
    ``secret: true``, so every plan and pull-request comment showed it."""
    state = _state_with_sensitive(
        tmp_path, ("jetstream_kv_entry", "value"), ("jetstream_stream", "description")
    )
    where = ["--out", "specs"] if out else []
    done = reconcile("import", "--from", "terraform", state.name, *where, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    value_line = _line_of(state, f'"value": "{SECRET}"')
    description_line = _line_of(state, f'"description": "{SECRET}"')
    assert f"terraform.tfstate:{value_line}: value: " in done.stderr, done.stderr
    assert f"terraform.tfstate:{description_line}: description: " in done.stderr, done.stderr
    assert "sensitive" in done.stderr
    assert not (tmp_path / "specs").exists() and done.stdout == ""


def test_a_state_with_nothing_sensitive_imports_as_before(tmp_path: Path) -> None:
    """Marks on attributes of other resources, or none, change nothing of the import."""
    state = _state_with_sensitive(tmp_path, ("jetstream_consumer", "description"))
    done = reconcile("import", "--from", "terraform", state.name, "--out", "specs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert SECRET in (tmp_path / "specs" / "kv-CFG.yaml").read_text()


_NACK_ACCOUNT = """\
apiVersion: jetstream.nats.io/v1beta2
kind: Account
metadata:
  name: team-a
spec:
  servers: {servers}
  token: {secret}
  nkey: {secret}
  user:
    user: alice
    secret: {secret}
---
apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata:
  name: orders
spec:
  account: team-a
  name: ORDERS
  subjects: ["orders.>"]
"""


def test_a_nack_account_s_misplaced_secret_is_never_quoted(tmp_path: Path) -> None:
    """An Account's token, nkey seed or user Secret written as the value itself (NACK
    wants ``{secret: {name: ...}}``), or its servers as one URL with a password, is an
    error at its line that says what was expected, never the value: each was quoted
    (``spec.token: expected an object, got 'TOPSECRET...'``), as schema errors under a
    secret-looking name no longer are (specs.schema)."""
    (tmp_path / "k8s").mkdir()
    manifest = _NACK_ACCOUNT.format(servers=f"nats://alice:{SECRET}@nats:4222", secret=SECRET)
    (tmp_path / "k8s" / "account.yaml").write_text(manifest)
    done = reconcile("import", "--from", "nack", "k8s", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert SECRET not in done.stdout + done.stderr
    for line, path in [(6, "spec.servers"), (7, "spec.token"), (8, "spec.nkey")]:
        assert f"account.yaml:{line}: {path}: expected " in done.stderr, done.stderr
    assert "account.yaml:11: spec.user.secret: expected an object, got a string" in done.stderr
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["account.yaml"]


@pytest.mark.parametrize(
    "block",
    [
        f'provider "jetstream" {{\n  servers  = "nats://127.0.0.1:4222"\n'
        f'  password = "{SECRET}" "{SECRET}"\n}}\n',
        f'variable "db_password" {{\n  sensitive = true\n  default = "{SECRET}" "x"\n}}\n',
        f'provider "jetstream" {{\n  servers  = "nats://alice:{SECRET}@127.0.0.1:4222" "x"\n}}\n',
    ],
    ids=["provider-password", "sensitive-variable", "url-credentials"],
)
def test_a_terraform_syntax_error_beside_a_secret_never_quotes_it(
    tmp_path: Path, block: str
) -> None:
    """A syntax error in a ``.tf`` block naming a secret (a provider's password, a
    sensitive variable, a server URL with credentials) is said at its line and column,
    without the text there: 'invalid HCL: unexpected '"TOPSECRET..."'' quoted the
    password, where a YAML spec's syntax error in a file naming a secret never quotes
    its line (specs.yaml_lines)."""
    text = 'resource "jetstream_stream" "S" {\n  name     = "S"\n  subjects = ["s.>"]\n}\n' + block
    (tmp_path / "main.tf").write_text(text)
    done = reconcile("import", "--from", "terraform", "main.tf", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert "main.tf:" in done.stderr and "invalid HCL" in done.stderr, done.stderr
    assert not (tmp_path / "specs").exists()


def test_a_terraform_syntax_error_with_no_secret_near_still_shows_its_text(
    tmp_path: Path,
) -> None:
    """The text is still quoted where the block names no secret: it says what is wrong."""
    text = 'resource "jetstream_stream" "S" {\n  name     = "S" "T"\n  subjects = ["s.>"]\n}\n'
    (tmp_path / "main.tf").write_text(text)
    done = reconcile("import", "--from", "terraform", "main.tf", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1
    assert "main.tf:2: invalid HCL: unexpected '\"S\"'" in done.stderr, done.stderr


@pytest.mark.parametrize("project", [False, True], ids=["no-project", "project"])
@pytest.mark.parametrize(
    "url",
    [f"nats://alice:{SECRET}@nats:4222", f"nats://{SECRET}@nats:4222", f"alice:{SECRET}@nats"],
    ids=["user-password", "token", "no-scheme"],
)
def test_a_nack_account_s_server_url_with_credentials_is_refused_unshown(
    tmp_path: Path, url: str, project: bool
) -> None:
    """An Account whose servers carry credentials (``nats://alice:pw@nats:4222``) is
    refused at that line, before anything is written, the URL not shown. Without a
    project file the environment was printed with the password; with one, the specs
    were written, then the project file refused the URL (reconcile.yaml holds no
    secret)."""
    (tmp_path / "k8s").mkdir()
    manifest = _NACK_ACCOUNT.format(servers=f'["nats://ok:4222", "{url}"]', secret="{}")
    manifest = manifest.replace("  token: {}\n  nkey: {}\n", "").replace("    secret: {}\n", "")
    (tmp_path / "k8s" / "account.yaml").write_text(manifest)
    text = "specs: [specs]\nenvironments:\n  dev:\n    servers: nats://127.0.0.1:4222\n"
    if project:
        (tmp_path / "reconcile.yaml").write_text(text)
    done = reconcile("import", "--from", "nack", "k8s", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert "account.yaml:6: spec.servers.1: " in done.stderr, done.stderr
    assert "credentials" in done.stderr
    written = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["account.yaml", *(["reconcile.yaml"] if project else [])]
    if project:
        assert (tmp_path / "reconcile.yaml").read_text() == text


async def _twins(url: str) -> None:
    """Streams and buckets whose names differ only in case, each holding a message."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for index, name in enumerate(["ORDERS", "Orders", "orders"]):
            await js.add_stream(name=name, subjects=[f"twins.{index}.>"])
            await js.publish(f"twins.{index}.m", b"kept")
        for name in ["cfg", "CFG"]:
            await (await js.create_key_value(bucket=name)).put("k", b"v")
    finally:
        await nc.close()


@pytest.mark.integration
def test_names_differing_only_in_case_export_to_files_a_case_insensitive_disk_keeps_apart(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Streams ORDERS, Orders and orders were written to stream-ORDERS.yaml,
    stream-Orders.yaml and stream-orders.yaml: one file on a case-insensitive disk
    (macOS, Windows), where each replaced the one before, 'exported 5 file(s)' was said,
    and apply --prune of the folder would delete the streams whose files were lost. A
    name met again in other case gains a hash of its name (as a long name does); each
    file still declares its own resource, and the export plans no create nor delete."""
    run(_twins(clean_server.url))
    out = tmp_path / "out"
    done = reconcile("export", "--out", str(out), "--server", clean_server.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 5 and len({n.lower() for n in names}) == 5, names
    assert "stream-ORDERS.yaml" in names and "kv-CFG.yaml" in names
    declared = {
        (d.body["kind"], d.body["name"]) for d in load_spec_files(sorted(out.iterdir()), [])
    }
    streams = {("Stream", n) for n in ["ORDERS", "Orders", "orders"]}
    assert declared == streams | {("KeyValue", "cfg"), ("KeyValue", "CFG")}
    plan = reconcile("plan", str(out), "--server", clean_server.url, "--format", "json",
                     cwd=tmp_path)  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    changes = json.loads(plan.stdout)["changes"]
    assert {c["action"] for c in changes} <= {"update"}, changes


#: A secret whose text says nothing of one (SECRET's 'SECRET' alone hides a file's lines).
PLAIN_SECRET = "hunter2-XYZZY-do-not-print"
_KV = 'resource "jetstream_kv_entry" "db" {{\n  bucket = "C"\n  key = "k"\n  value = {value}\n}}\n'


@pytest.mark.parametrize(
    "text",
    [
        f'variable "api_key" {{\n  sensitive = true\n  default   = "{PLAIN_SECRET}" "x"\n}}\n',
        _KV.format(value=f'sensitive("{PLAIN_SECRET}" "x")'),
        _KV.format(value=f'sensitive("{PLAIN_SECRET}")'),
        _KV.format(value=f'"db-${{sensitive("{PLAIN_SECRET}")}}"'),
        _KV.format(value="local.pw") + f'locals {{\n  pw = sensitive("{PLAIN_SECRET}")\n}}\n',
    ],
    ids=["syntax-sensitive-variable", "syntax-sensitive-call", "call", "in-a-string", "local"],
)
def test_a_value_terraform_marks_sensitive_is_never_quoted(tmp_path: Path, text: str) -> None:
    """Terraform marks a value sensitive two ways: a ``sensitive = true`` variable, and
    the ``sensitive()`` function. Whatever the names around it, such a value is never
    quoted: a syntax error in a sensitive variable named api_key quoted its default
    (only a secret-looking word hid the text: 'db_password' did, 'api_key' did not), and
    ``value = sensitive("...")``, which the importer cannot resolve, was quoted whole in
    the problem ('the expression 'sensitive("hunter2...")' is not resolved'), with the
    advice to import terraform.tfstate, which refuses it."""
    (tmp_path / "main.tf").write_text(text)
    done = reconcile("import", "--from", "terraform", "main.tf", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert PLAIN_SECRET not in done.stdout + done.stderr, done.stderr
    assert "main.tf:" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "terraform.tfstate" not in done.stderr, done.stderr
    assert not (tmp_path / "specs").exists()


#: Persian's "orders" (its plural suffix after a ZWNJ) and an emoji ZWJ sequence: names
#: the server takes and a spec must declare; ORDERS followed by tag characters (U+E0041:
#: an invisible 'A') reads 'ORDERS' in any diff.
PERSIAN = "\u0633\u0641\u0627\u0631\u0634\u200c\u0647\u0627"
CODER = "\U0001f469\u200d\U0001f4bb"
TAGGED = "ORDERS\U000e0041\U000e0042"


async def _scripts(url: str) -> None:
    from reconciler.model.normalize import ownership_marker
    from reconciler.specs.spec import DEFAULT_OWNER

    nc = await nats.connect(url)
    try:
        marked = {"metadata": ownership_marker(DEFAULT_OWNER)}
        for index, name in enumerate([PERSIAN, CODER, TAGGED]):
            subject = f"scripts.{index}.>"
            body = {"name": name, "subjects": [subject], **marked}
            reply = await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(body).encode())
            assert b'"error"' not in reply.data, reply.data
            # the server's acknowledgement quotes a tag character as Go does (\U000e0041,
            # no JSON): not read
            await nc.request(f"scripts.{index}.m", b"kept")
    finally:
        await nc.close()


@pytest.mark.integration
def test_a_joiner_of_another_script_or_emoji_exports_and_a_tag_character_does_not(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A ZWNJ or ZWJ between two visible characters of another script or emoji changes
    what is drawn (Persian's word for orders, a Devanagari conjunct, an emoji sequence):
    the schemas refused every ZWNJ and ZWJ, so export left such managed streams out, and
    apply --prune of the exported folder deleted them with their messages. Tag
    characters (U+E0000-U+E007F, invisible format characters: 'ORDERS' + tags reads
    'ORDERS') passed. Now the joined names export and plan nothing; the tagged one is
    left out, said escaped."""
    run(_scripts(clean_server.url))
    out = tmp_path / "out"
    server = ["--server", clean_server.url]
    done = reconcile("export", "--out", str(out), *server, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "skipped Stream ORDERS\\" in done.stderr and "U+E0041" in done.stderr, done.stderr
    declared = {d.body["name"] for d in load_spec_files(sorted(out.iterdir()), [])}
    assert declared == {PERSIAN, CODER}
    plan = reconcile("plan", str(out), "--prune", *server, "--format", "json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    changes = json.loads(plan.stdout)["changes"]
    assert {c["name"] for c in changes if c["action"] == "delete"} == {TAGGED}, changes
