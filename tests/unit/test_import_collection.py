"""``reconcile import`` runs with the cyclic garbage collector's thresholds raised
(importers.bulk_collection) and puts them back after, on success and on error."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from reconciler import importers
from reconciler.cli.import_cmd import import_

TF = 'resource "jetstream_stream" "S" {\n  name     = "S"\n  subjects = ["s.>"]\n}\n'


@pytest.mark.parametrize("text", [TF, TF.replace('"S"\n', "var.missing\n", 1)])
def test_an_import_collects_less_often_and_restores_the_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    (tmp_path / "main.tf").write_text(text, encoding="utf-8")
    seen: list[tuple[int, ...]] = []
    read = importers.read

    def recording(name: str, paths: Any, *, strict: bool = False) -> Any:
        seen.append(gc.get_threshold())
        return read(name, paths, strict=strict)

    monkeypatch.setattr(importers, "read", recording)
    before = gc.get_threshold()
    arguments = ["--from", "terraform", str(tmp_path / "main.tf"), "--out", str(tmp_path / "o")]
    done = CliRunner().invoke(import_, arguments, standalone_mode=False)
    assert seen == [importers.BULK_GC_THRESHOLD]
    assert gc.get_threshold() == before
    assert (done.exception is None) == (text == TF)
    assert (tmp_path / "o" / "stream-S.yaml").exists() == (text == TF)
