"""``reconcile import`` runs without the cyclic garbage collector (the runs' rule,
``stages.fewer_collections``) and switches it back on after, on success and on error."""

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
    seen: list[bool] = []
    read = importers.read

    def recording(name: str, paths: Any, *, strict: bool = False) -> Any:
        seen.append(gc.isenabled())
        return read(name, paths, strict=strict)

    monkeypatch.setattr(importers, "read", recording)
    assert gc.isenabled()
    arguments = ["--from", "terraform", str(tmp_path / "main.tf"), "--out", str(tmp_path / "o")]
    done = CliRunner().invoke(import_, arguments, standalone_mode=False)
    assert seen == [False]
    assert gc.isenabled()
    assert (done.exception is None) == (text == TF)
    assert (tmp_path / "o" / "stream-S.yaml").exists() == (text == TF)
