"""Configs published by other projects (tests/data/corpus, each file names its origin)
round-trip on every matrix server: validate → apply → empty re-plan → export → empty
re-plan → drift clean."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from servers import SERVER_MATRIX, NatsServer, run

from reconciler.cli.export_cmd import _dump
from reconciler.execution import run as engine
from reconciler.jetstream import ConnectionOptions
from reconciler.planning.drift import from_plan
from reconciler.planning.export import export_state
from reconciler.specs.validate import load_specs

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
FILES = sorted(p for p in CORPUS.iterdir() if p.suffix in (".yaml", ".json"))


def test_the_corpus_holds_at_least_thirty_configs_each_with_its_origin() -> None:
    specs = load_specs(FILES)
    assert len(specs) >= 30
    for path in FILES:
        assert "origin:" in path.read_text()[:400], path


@pytest.fixture(scope="module", params=[*SERVER_MATRIX, None], ids=lambda v: v or "newest")
def matrix_server(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Any:
    server = NatsServer(tmp_path_factory.mktemp("corpus"), version=request.param).start()
    yield server
    server.stop()


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_published_config_round_trips(
    matrix_server: NatsServer, path: Path, tmp_path: Path
) -> None:
    from servers import delete_all_streams

    options = ConnectionOptions(servers=matrix_server.url)
    run(delete_all_streams(matrix_server.url))
    run(engine.apply([path], options, lock_timeout=None))
    replan = run(engine.plan([path], options))
    assert not replan.has_changes, replan.to_json()["changes"]
    folder = tmp_path / "export"
    folder.mkdir()
    for item in export_state(run(engine.fetch_live(options))):
        (folder / item.name).write_text(_dump(item.documents))
    again = run(engine.plan([folder], options))
    assert not again.has_changes, again.to_json()["changes"]
    report = from_plan(run(engine.plan([path], options)))
    assert not report.has_drift, [r.to_json() for r in report.resources if r.status != "in_sync"]
