"""The optional cache of validated specs: same result, never stale, never code."""

from __future__ import annotations

import json
from pathlib import Path

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
    header, body = entry.read_text().splitlines()  # JSON, never pickle
    assert json.loads(header)["key"] and json.loads(body)["specs"]
    cached_warnings: list = []
    cached = load_specs([tmp_path / "s.yaml"], warnings=cached_warnings, cache=cache)
    assert cached == first == fresh
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
    header, body = entry.read_text().splitlines()
    assert "1209600000000000" in body  # 14d in nanoseconds
    entry.write_text(f"{header}\n{body.replace('1209600000000000', '1')}")
    again = load_specs([spec], cache=cache)
    assert again == good
    assert again[0].config["max_age"] == 14 * 86_400 * 10**9
    assert body.count(",12]") == 3  # backoff and its two items, at line 12
    entry.write_text(f"{header}\n{body.replace(',12]', ',[12]]')}")  # malformed locations
    assert [str(s.where("backoff")) for s in load_specs([spec], cache=cache)][1].endswith(":12")


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
        json.loads(path.read_text().splitlines()[1])["specs"][0]["config"]["max_age"]
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
