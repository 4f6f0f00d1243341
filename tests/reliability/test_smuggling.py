"""Caches and files cannot smuggle changes in (issue 30).

Whatever someone else could write (a cache folder restored from a shared CI cache, a
file a spec names outside the repository) never changes what is planned or applied:
forged spec-cache entries and plan-memo digests, written as an attacker would (every
plain digest recomputed), are ignored, and a ``value_file``, overlay or project path
out of the repository is a FILE:LINE error before anything connects. Messages are
published first and counted after each apply, on a real server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cache_entries import CONFIG, KIND, LOCATIONS, NAME, STREAM, VALUE_FILE, WRITTEN, Entry
from cli_runner import reconcile
from servers import NatsServer, options, run

from reconciler.execution import run as engine
from reconciler.jetstream import open_client
from reconciler.planning.memo import Memo
from reconciler.specs import cache as spec_cache
from reconciler.specs.validate import load_specs

pytestmark = pytest.mark.integration

SPECS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_age: 1h
---
kind: KeyValue
name: CONF
history: 5
"""


def count(server: NatsServer, stream: str) -> int:
    async def go() -> int:
        async with open_client(options(server)) as client:
            return int((await client.stream_info(stream))["state"]["messages"])

    return run(go())


def publish(server: NatsServer, subject: str, messages: int) -> None:
    async def go() -> None:
        async with open_client(options(server)) as client:
            for i in range(messages):
                await client.publish(subject, f"m{i}".encode())

    run(go())


def stream_config(server: NatsServer, stream: str) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with open_client(options(server)) as client:
            return dict((await client.stream_info(stream))["config"])

    return run(go())


def kv_keys(server: NatsServer, bucket: str) -> list[str]:
    async def go() -> list[str]:
        async with open_client(options(server)) as client:
            return sorted(await client.kv_keys(bucket))

    return run(go())


def forge_spec_entry(entry: Path, stolen: Path) -> None:
    """What an attacker who can write the cache folder does: the body's ORDERS sealed
    and a KeyValueEntry added that reads a local file, the entry sealed again under a
    key of their own guess."""
    forged = Entry(entry)
    orders = forged.spec("ORDERS")
    orders[CONFIG] = {**orders[CONFIG], "sealed": True}
    stolen_entry = list(orders)
    stolen_entry[KIND], stolen_entry[NAME], stolen_entry[STREAM] = "KeyValueEntry", "stolen", "CONF"
    stolen_entry[CONFIG], stolen_entry[VALUE_FILE] = {"secret": False}, str(stolen)
    stolen_entry[LOCATIONS], stolen_entry[WRITTEN] = {}, {}
    forged.specs.append(stolen_entry)
    forged.write(mac=forged.guessed_mac(b"attacker's guess"))


def test_a_forged_spec_cache_entry_never_changes_the_plan_or_the_apply(
    clean_server: NatsServer, tmp_path: Path, figures: Any
) -> None:
    """The measured attack: a forged entry sealed a stream and wrote a local file into a
    KV entry. Now it is a miss: the plan equals the plan without a cache, and apply
    leaves the 100 messages, an unsealed stream and no stolen key."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "specs.yaml").write_text(SPECS)
    stolen = tmp_path / "host-secret.txt"
    stolen.write_text("root:x:0:0 not for a server")
    cache = tmp_path / "cache"
    server = ["--server", clean_server.url]
    env = {"RECONCILE_SPEC_CACHE": str(cache), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = reconcile("apply", "specs.yaml", *server, "-y", cwd=repo, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    publish(clean_server, "orders.new", 100)
    [entry] = cache.glob("specs-*.json")

    forge_spec_entry(entry, stolen)
    plain = reconcile("plan", "specs.yaml", *server, "--format", "json", cwd=repo)
    cached = reconcile("plan", "specs.yaml", *server, "--format", "json", cwd=repo, env=env)
    assert plain.returncode == cached.returncode == 0, plain.stderr + cached.stderr
    assert json.loads(cached.stdout) == json.loads(plain.stdout)
    assert json.loads(cached.stdout)["changes"] == []

    forge_spec_entry(next(cache.glob("specs-*.json")), stolen)
    applied = reconcile("apply", "specs.yaml", *server, "-y", cwd=repo, env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert count(clean_server, "ORDERS") == 100
    assert not stream_config(clean_server, "ORDERS").get("sealed")
    assert kv_keys(clean_server, "CONF") == []
    publish(clean_server, "orders.more", 5)  # still takes writes: not sealed
    assert count(clean_server, "ORDERS") == 105
    key_file = tmp_path / "config" / "jetstream-gitops" / "cache.key"
    assert key_file.stat().st_mode & 0o777 == 0o600  # made on first use, outside the cache
    figures.add("security_cases", 2)  # two forged entries, ignored
    figures.add("messages_checked", 105)


def test_without_the_key_a_restored_cache_is_a_miss(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A cache written under one key (another machine, another CI secret) and read under
    another is never used, and what it held never decides the plan."""
    (tmp_path / "specs.yaml").write_text(SPECS)
    cache = tmp_path / "cache"
    server = ["--server", clean_server.url]
    first = {"RECONCILE_SPEC_CACHE": str(cache), "RECONCILE_CACHE_KEY": "k" * 40}
    assert reconcile("apply", "specs.yaml", *server, "-y", cwd=tmp_path, env=first).returncode == 0
    forge_spec_entry(next(cache.glob("specs-*.json")), tmp_path / "specs.yaml")
    # the attacker knew the first key: the entry is valid under it ...
    [entry] = cache.glob("specs-*.json")
    forged = Entry(entry)
    forged.write(b"k" * 40)
    with pytest.MonkeyPatch.context() as patch:  # proof: under the first key it is taken
        patch.setenv("RECONCILE_CACHE_KEY", "k" * 40)
        taken = spec_cache.load(cache, forged.header["key"])
    assert taken is not None and "stolen" in [spec.name for spec in taken[0]]
    # ... and a run under another key misses it
    second = {**first, "RECONCILE_CACHE_KEY": "other-" * 8}
    plan = reconcile("plan", "specs.yaml", *server, "--format", "json", cwd=tmp_path, env=second)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["changes"] == []
    # a key file inside the cache folder is never trusted: no key, nothing read or kept
    inside = {"RECONCILE_SPEC_CACHE": str(cache), "XDG_CONFIG_HOME": str(cache)}
    for path in cache.glob("specs-*.json"):
        path.unlink()
    plan = reconcile("plan", "specs.yaml", *server, "--format", "json", cwd=tmp_path, env=inside)
    assert plan.returncode == 0 and json.loads(plan.stdout)["changes"] == []
    assert list(cache.glob("specs-*.json")) == [] and not (cache / "jetstream-gitops").exists()


def test_a_forged_plan_memo_never_hides_a_change(
    clean_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, figures: Any
) -> None:
    """The memo says "these inputs planned unchanged". An attacker computes that digest
    for the spec and the live config someone changed behind the tool's back, and writes
    it into every memo file: the change still shows and apply puts the spec back."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("RECONCILE_SPEC_CACHE", str(cache))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("RECONCILE_CACHE_KEY", raising=False)
    specs = tmp_path / "specs.yaml"
    specs.write_text(SPECS)
    engine_options = options(clean_server)
    run(engine.apply([specs], engine_options))
    publish(clean_server, "orders.new", 100)
    assert not run(engine.plan([specs], engine_options)).has_changes

    async def drift_and_forge() -> bytes:
        async with open_client(engine_options) as client:
            config = (await client.stream_info("ORDERS"))["config"]
            await client.update_stream({**config, "description": "changed behind your back"})
            live = await client.fetch_live()  # what the planner reads, as it reads it
        [spec] = [s for s in load_specs([specs]) if s.name == "ORDERS"]
        return Memo.for_plan(live.server, "default").key(spec, live.streams["ORDERS"])

    forged = run(drift_and_forge())
    salt = Memo.for_plan(run(_server_info(clean_server)), "default").salt
    files = {*cache.glob("plans-*.bin"), cache / f"plans-{salt.hex()}.bin"}
    for path in files:
        kept = path.read_bytes() if path.exists() else b""
        path.write_bytes(kept + forged + (1).to_bytes(4, "big"))

    with_cache = run(engine.plan([specs], engine_options))
    monkeypatch.delenv("RECONCILE_SPEC_CACHE")
    without = run(engine.plan([specs], engine_options))
    assert with_cache.to_json() == without.to_json()
    assert [(s.action, [f.path for f in s.fields]) for s in with_cache.steps] == [
        ("update", ["description"])
    ]
    monkeypatch.setenv("RECONCILE_SPEC_CACHE", str(cache))
    run(engine.apply([specs], engine_options))
    assert "description" not in stream_config(clean_server, "ORDERS")
    assert count(clean_server, "ORDERS") == 100
    figures.add("security_cases")
    figures.add("messages_checked", 100)


async def _server_info(server: NatsServer) -> Any:
    async with open_client(options(server)) as client:
        return await client.server_info()


ENTRIES = """\
kind: KeyValue
name: CONF
---
kind: KeyValueEntry
bucket: CONF
key: passwd
value_file: /etc/passwd
---
kind: KeyValueEntry
bucket: CONF
key: up
value_file: ../../secret.txt
---
kind: KeyValueEntry
bucket: CONF
key: link
value_file: link.txt
---
kind: KeyValueEntry
bucket: CONF
key: git
value_file: ../.git/config
"""


def repository(tmp_path: Path) -> Path:
    """A checkout (``.git``) with its specs in ``specs/``, and a secret next to it."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text("extraheader = AUTHORIZATION: basic c2VjcmV0\n")
    (repo / "specs").mkdir()
    (tmp_path / "secret.txt").write_text("the neighbour's secret")
    (repo / "specs" / "link.txt").symlink_to(tmp_path / "secret.txt")
    return repo


def test_a_value_file_out_of_the_repository_is_an_error_at_its_line_and_nothing_applies(
    clean_server: NatsServer, tmp_path: Path, figures: Any
) -> None:
    """An absolute path, ``..`` out of the root, a symlink pointing out, git's config:
    each a FILE:LINE error; nothing reaches the server, not even the bucket."""
    repo = repository(tmp_path)
    (repo / "specs" / "entries.yaml").write_text(ENTRIES)
    server = ["--server", clean_server.url]
    done = reconcile("apply", "specs", *server, "-y", cwd=repo)
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stdout + done.stderr
    for line in (7, 12, 17, 22):
        assert f"entries.yaml:{line}: value_file" in said, said
    assert "absolute path" in said and "symlink" in said and ".git" in said
    assert "the neighbour's secret" not in said and "c2VjcmV0" not in said
    assert "Traceback" not in said

    async def streams() -> list[str]:
        async with open_client(options(clean_server)) as client:
            return await client.stream_names()

    assert [s for s in run(streams()) if not s.startswith("KV_reconcile")] == []

    # the same value inside the repository applies: the rule is where, not what
    (repo / "values").mkdir()
    (repo / "values" / "ok.txt").write_text("fine")
    (repo / "specs" / "entries.yaml").write_text(
        "kind: KeyValue\nname: CONF\n---\nkind: KeyValueEntry\nbucket: CONF\nkey: ok\n"
        "value_file: ../values/ok.txt\n"
    )
    done = reconcile("apply", "specs", *server, "-y", cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert kv_keys(clean_server, "CONF") == ["ok"]
    figures.add("security_cases", 4)  # absolute, .., symlink out, .git


def test_a_spec_file_reached_through_a_symlink_out_of_the_folder_is_not_read(
    tmp_path: Path,
) -> None:
    repo = repository(tmp_path)
    (tmp_path / "elsewhere.yaml").write_text("kind: Stream\nname: SMUGGLED\n")
    (repo / "specs" / "orders.yaml").write_text("kind: Stream\nname: ORDERS\n")
    (repo / "specs" / "more.yaml").symlink_to(tmp_path / "elsewhere.yaml")
    done = reconcile("validate", "specs", cwd=repo)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "more.yaml:1: a symlink pointing out of the repository" in done.stdout + done.stderr


PROJECT = """\
owner: shop
specs: [specs]
environments:
  prod:
    servers: nats://127.0.0.1:1
    creds: /etc/passwd
    overlays: [../outside]
    resources: [specs, ../../etc]
    tls: {ca: ../secret.txt}
"""


def test_paths_a_project_file_names_stay_inside_the_repository(tmp_path: Path) -> None:
    """Every path of the project file, each an error naming its line; nothing connects
    (the server named does not exist: a connection attempt would say so)."""
    repo = repository(tmp_path)
    (repo / "reconcile.yaml").write_text(PROJECT)
    (repo / "specs" / "orders.yaml").write_text("kind: Stream\nname: ORDERS\n")
    done = reconcile("plan", "--env", "prod", cwd=repo)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    for where in (
        "reconcile.yaml:6: environments.prod.creds",
        "reconcile.yaml:7: environments.prod.overlays.0",
        "reconcile.yaml:8: environments.prod.resources.1",
        "reconcile.yaml:9: environments.prod.tls.ca",
    ):
        assert where in said, said
    assert "resources.0" not in said and "Traceback" not in said


def test_a_key_file_others_can_read_or_write_is_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key someone else could have read (or written) authenticates nothing: the cache
    is then neither read nor written, and the specs are validated from the files."""
    from reconciler.specs import cache as spec_cache

    monkeypatch.delenv("RECONCILE_CACHE_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    spec = tmp_path / "specs.yaml"
    spec.write_text(SPECS)
    cache = tmp_path / "cache"
    assert load_specs([spec], cache=cache) and list(cache.glob("specs-*.json"))
    key = spec_cache.key_file()
    assert key.stat().st_mode & 0o777 == 0o600
    for path in cache.glob("specs-*.json"):
        path.unlink()
    key.chmod(0o644)
    assert spec_cache.cache_secret(cache) is None
    assert [s.name for s in load_specs([spec], cache=cache)] == ["ORDERS", "CONF"]
    assert list(cache.glob("specs-*.json")) == []
    key.unlink()
    key.symlink_to(tmp_path / "planted.key")
    (tmp_path / "planted.key").write_text("k" * 64)
    (tmp_path / "planted.key").chmod(0o600)
    assert spec_cache.cache_secret(cache) is None  # a link is never followed
