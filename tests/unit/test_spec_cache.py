"""The optional cache of validated specs: same result, never stale, never code."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from reconciler.errors import SpecError
from reconciler.specs import cache as spec_cache
from reconciler.specs.validate import load_specs

SPECS = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
max_age: 14d
metadata: {team: shop}
---
kind: Consumer
stream: ORDERS
name: ship
ack_policy: explicit
ack_wait: 30s
backoff: [1s, 5s]
"""


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("specs-*.json"))


def test_a_cached_run_gives_exactly_the_specs_and_warnings_of_a_fresh_one(
    tmp_path: Path,
) -> None:
    (tmp_path / "s.yaml").write_text(SPECS)
    cache = tmp_path / "cache"
    fresh_warnings: list = []
    fresh = load_specs([tmp_path / "s.yaml"], warnings=fresh_warnings)
    first_warnings: list = []
    first = load_specs([tmp_path / "s.yaml"], warnings=first_warnings, cache=cache)
    [entry] = entries(cache)
    header, tables, specs = entry.read_text().splitlines()  # JSON, never pickle
    assert json.loads(header)["key"] and json.loads(tables)["specs"] == len(json.loads(specs))
    cached_warnings: list = []
    cached = load_specs([tmp_path / "s.yaml"], warnings=cached_warnings, cache=cache)
    assert cached == first == fresh
    # identity is made again on a cached load, not compared by ``==``: checked apart
    identities = [(s.ref, s.stream_name) for s in cached]
    assert identities == [(s.ref, s.stream_name) for s in fresh]
    assert [name for _, name in identities] == ["ORDERS", "ORDERS"]
    assert [str(w) for w in cached_warnings] == [str(w) for w in fresh_warnings] != []
    assert cached[0].written["max_age"] == "14d"
    assert str(cached[1].where("backoff")).endswith("s.yaml:12")


def test_any_change_of_a_file_or_of_strict_is_a_different_entry(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPECS)
    cache = tmp_path / "cache"
    load_specs([spec], cache=cache)
    spec.write_text(SPECS.replace("14d", "15d"))
    changed = load_specs([spec], cache=cache)
    assert changed[0].config["max_age"] == 15 * 86_400 * 10**9
    assert len(entries(cache)) == 2
    with pytest.raises(SpecError):  # strict: the backoff warning is an error, not cached
        load_specs([spec], cache=cache, strict=True)
    assert len(entries(cache)) == 2


def test_invalid_specs_are_never_cached_and_always_reported(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("kind: Stream\nname: X\nmax_age: 10 parsecs\n")
    cache = tmp_path / "cache"
    for _ in range(2):
        with pytest.raises(SpecError, match=r"s\.yaml:3"):
            load_specs([spec], cache=cache)
    assert entries(cache) == []


def test_a_corrupt_entry_is_ignored_and_rewritten(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPECS)
    cache = tmp_path / "cache"
    good = load_specs([spec], cache=cache)
    [entry] = entries(cache)
    entry.write_text('{"format": 1, "key": "wrong"')
    assert load_specs([spec], cache=cache) == good
    assert json.loads(entry.read_text().splitlines()[1])["specs"]


def test_an_edited_entry_is_never_trusted(tmp_path: Path) -> None:
    """The header is intact, the body was changed (a line number, a config value) after
    it was written: the checksum no longer matches, the files are validated again."""
    spec = tmp_path / "s.yaml"
    spec.write_text(SPECS)
    cache = tmp_path / "cache"
    good = load_specs([spec], cache=cache)
    [entry] = entries(cache)
    header, body = entry.read_text().split("\n", 1)
    assert "1209600000000000" in body  # 14d in nanoseconds
    entry.write_text(f"{header}\n{body.replace('1209600000000000', '1')}")
    again = load_specs([spec], cache=cache)
    assert again == good
    assert again[0].config["max_age"] == 14 * 86_400 * 10**9
    entry.write_text(f"{header}\n{body.rsplit(chr(10), 1)[0]}")  # its last line cut off
    assert [str(s.where("backoff")) for s in load_specs([spec], cache=cache)][1].endswith(":12")


@pytest.mark.parametrize(
    "mangle",
    [
        lambda lines: lines[:-1],  # the specs' line lost
        lambda lines: [lines[0], "[]"],  # no specs where the tables count two
        lambda lines: [lines[0], lines[1].replace("[[", "[[[", 1)],  # a spec misshapen
        lambda lines: [lines[0].replace('"shapes":[[', '"shapes":[["extra",', 1), lines[1]],
        lambda lines: [lines[0], lines[1].replace('"Consumer"', '"Trojan"', 1)],
    ],
    ids=["specs-line-lost", "no-specs", "misshapen-spec", "lines-of-other-fields", "no-kind"],
)
def test_a_sealed_entry_cut_short_or_misshapen_is_a_miss_never_a_crash(
    tmp_path: Path, mangle: Any
) -> None:
    """The entry's MAC says who wrote it, not that its writing ended well: a body sealed
    under the right key whose lines are cut short, or whose specs or tables do not fit
    together, is validated again (a miss), never half taken, never a traceback."""
    spec = tmp_path / "s.yaml"
    spec.write_text(SPECS)
    cache = tmp_path / "cache"
    good = load_specs([spec], cache=cache)
    [entry] = entries(cache)
    header, body = entry.read_bytes().split(b"\n", 1)
    key = json.loads(header)["key"]
    secret = spec_cache.cache_secret(cache)
    assert secret is not None
    forged = "\n".join(mangle(body.decode().split("\n"))).encode()
    assert forged != body
    sealed = {**json.loads(header), "mac": spec_cache.seal(secret, key, forged)}
    entry.write_bytes(json.dumps(sealed).encode() + b"\n" + forged)
    assert spec_cache.load(cache, key) is None
    assert load_specs([spec], cache=cache) == good


def test_new_validating_code_never_reads_an_old_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPECS)
    cache = tmp_path / "cache"
    load_specs([spec], cache=cache)
    monkeypatch.setattr(spec_cache, "code_digest", lambda packages=(): "another version")
    load_specs([spec], cache=cache)
    assert len(entries(cache)) == 2


def test_another_version_of_a_validating_library_never_reads_an_old_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PyYAML, jsonschema, jsonschema-rs, referencing and Python itself decide what a
    file loads to: each one's version is part of every key."""
    real = spec_cache.metadata.version
    before = spec_cache.code_digest()
    for library in spec_cache.LIBRARIES:
        monkeypatch.setattr(
            spec_cache.metadata,
            "version",
            lambda name, lib=library: "99.0" if name == lib else real(name),
        )
        spec_cache.code_digest.cache_clear()
        assert spec_cache.code_digest() != before, library
    monkeypatch.undo()
    monkeypatch.setattr(spec_cache.sys, "version_info", (3, 99, 0))
    spec_cache.code_digest.cache_clear()
    assert spec_cache.code_digest() != before
    monkeypatch.undo()
    spec_cache.code_digest.cache_clear()
    assert spec_cache.code_digest() == before


def test_the_folder_keeps_the_most_recently_used_entries_within_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "s.yaml"
    cache = tmp_path / "cache"
    for i in range(20):  # far more than one repository's runs, all kept
        spec.write_text(SPECS.replace("14d", f"{i + 1}d"))
        load_specs([spec], cache=cache)
    assert len(entries(cache)) == 20
    size = max(path.stat().st_size for path in entries(cache))
    monkeypatch.setattr(spec_cache, "BUDGET_BYTES", 3 * size)
    spec.write_text(SPECS.replace("14d", "1d"))  # the oldest entry, used again: renewed
    load_specs([spec], cache=cache, warnings=[])
    spec.write_text(SPECS.replace("14d", "99d"))  # a new entry: the folder is pruned
    load_specs([spec], cache=cache)
    kept = {
        json.loads(path.read_text().splitlines()[2])[0][2]["max_age"]  # the first's config
        for path in entries(cache)
    }
    assert len(kept) == 3
    day = 86_400 * 10**9
    assert {99 * day, 1 * day} <= kept  # the new one and the one just used; not the other 18


def test_a_fleet_of_many_environments_is_all_cached(tmp_path: Path) -> None:
    """A fleet loads one entry per environment: with 30 environments (more than a count
    limit of eight would keep), a second load reads every one from the cache."""
    from reconciler.fleet.desired import load_fleet

    fleet = tmp_path / "fleet"
    for i in range(30):
        (fleet / f"env{i:02d}").mkdir(parents=True)
        (fleet / f"env{i:02d}" / "s.yaml").write_text(SPECS.replace("14d", f"{i + 1}d"))
    cache = tmp_path / "cache"
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv(spec_cache.CACHE_ENV, str(cache))
    try:
        first = load_fleet(fleet)
        assert len(entries(cache)) == 30
        stored = {path: path.stat().st_mtime_ns for path in entries(cache)}
        misses: list[str] = []
        real_store = spec_cache.store
        monkeypatch.setattr(
            spec_cache, "store", lambda *a, **k: misses.append("x") or real_store(*a, **k)
        )
        second = load_fleet(fleet)
    finally:
        monkeypatch.undo()
    assert misses == []  # nothing validated again
    assert [e.specs for e in second] == [e.specs for e in first]
    assert set(stored) == set(entries(cache))


ENTRIES = """\
kind: KeyValue
name: config
---
kind: KeyValueEntry
bucket: config
key: password
value_file: password.txt
secret: true
---
kind: KeyValueEntry
bucket: config
key: greeting
value: hello
"""


def test_a_value_file_is_read_again_on_every_cached_load_and_never_kept(
    tmp_path: Path,
) -> None:
    (tmp_path / "s.yaml").write_text(ENTRIES)
    (tmp_path / "password.txt").write_bytes(b"first\x00secret")
    cache = tmp_path / "cache"
    first = load_specs([tmp_path / "s.yaml"], cache=cache)
    [entry] = entries(cache)
    kept = entry.read_bytes()
    assert b"first" not in kept and base64.b64encode(b"first\x00secret") not in kept
    assert base64.b64encode(b"hello") in kept  # inline and not secret: it is in git
    (tmp_path / "password.txt").write_bytes(b"second")
    cached = load_specs([tmp_path / "s.yaml"], cache=cache)
    assert entries(cache) == [entry]  # a hit, not a new entry
    value = {s.name: base64.b64decode(s.config["value"]) for s in cached if s.kind != "KeyValue"}
    assert value == {"password": b"second", "greeting": b"hello"}
    assert cached == load_specs([tmp_path / "s.yaml"])  # the same as a fresh load
    assert cached[1].config["secret"] is True and first[1].value_file == cached[1].value_file


def test_a_value_file_gone_since_the_cached_run_is_reported_at_its_line(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(ENTRIES)
    (tmp_path / "password.txt").write_text("secret")
    cache = tmp_path / "cache"
    load_specs([tmp_path / "s.yaml"], cache=cache)
    (tmp_path / "password.txt").unlink()
    with pytest.raises(SpecError) as err:
        load_specs([tmp_path / "s.yaml"], cache=cache)
    assert "s.yaml:7: value_file: cannot read 'password.txt'" in str(err.value)


def test_a_run_with_a_secret_value_written_inline_is_not_cached(tmp_path: Path) -> None:
    inline = ENTRIES.replace("value_file: password.txt", "value: hunter2")
    (tmp_path / "s.yaml").write_text(inline)
    cache = tmp_path / "cache"
    specs = load_specs([tmp_path / "s.yaml"], cache=cache)
    assert base64.b64decode(specs[1].config["value"]) == b"hunter2"
    assert entries(cache) == []
    (tmp_path / "s.yaml").write_text(inline.replace("secret: true", "secret: false"))
    load_specs([tmp_path / "s.yaml"], cache=cache)
    assert len(entries(cache)) == 1  # not secret: cached like any other value


def test_entries_an_earlier_release_wrote_are_removed(tmp_path: Path) -> None:
    """Before format 4 an entry kept secret values: the first store of this release
    removes them (an entry of a newer format, or one being written, is left alone)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    older = cache / ("specs-" + "a" * 64 + ".json")
    older.write_bytes(b'{"format": 3, "key": "x", "sha256": "y"}\n{"specs": []}')
    newer = cache / ("specs-" + "b" * 64 + ".json")
    newer.write_bytes(b'{"format": 99, "key": "x", "sha256": "y"}\n{}')
    torn = cache / ("specs-" + "c" * 64 + ".json")
    torn.write_bytes(b'{"form')
    (tmp_path / "s.yaml").write_text(ENTRIES.replace("value_file: password.txt", "value: x"))
    load_specs([tmp_path / "s.yaml"], cache=cache)  # an inline secret: not stored, but
    assert not older.exists() and newer.exists() and torn.exists()  # the old ones go
    assert len(entries(cache)) == 2
    older.write_bytes(b'{"format": 3, "key": "x", "sha256": "y"}\n{"specs": []}')
    (tmp_path / "s.yaml").write_text(SPECS)
    load_specs([tmp_path / "s.yaml"], cache=cache)
    assert not older.exists() and len(entries(cache)) == 3


def test_a_cached_run_with_an_overlay_keeps_each_fields_file_and_line(tmp_path: Path) -> None:
    """A spec merged with an overlay has fields from two files: the cached specs point
    every field where the fresh ones do (the overlay's field into the overlay)."""
    (tmp_path / "s.yaml").write_text(SPECS)
    overlay = tmp_path / "prod" / "o.yaml"
    overlay.parent.mkdir()
    overlay.write_text("kind: Stream\nname: ORDERS\n\nmax_age: 30d\n")
    paths, overlays = [tmp_path / "s.yaml"], [overlay]
    fresh = load_specs(paths, overlays=overlays, warnings=[])
    first = load_specs(paths, overlays=overlays, warnings=[], cache=tmp_path / "cache")
    [entry] = entries(tmp_path / "cache")
    hit = spec_cache.load(tmp_path / "cache", entry.stem.removeprefix("specs-"))
    assert hit is not None
    cached = hit[0]
    assert cached == first == fresh
    assert str(cached[0].where("max_age")) == f"{overlay}:4"
    for got, want in zip(cached, fresh, strict=True):
        assert {p: str(got.where(p)) for p in want.locations} == {
            p: str(want.where(p)) for p in want.locations
        }
        assert str(got.source) == str(want.source)
