"""Spec files are written into the folder named, by rename, never through a link: the
folder is opened once and every file is named in it (``export_cmd.write_files``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from reconciler.cli import export_cmd
from reconciler.planning.export import ExportedFile


def _files(count: int) -> list[ExportedFile]:
    return [
        ExportedFile(f"stream-S{i}.yaml", ({"kind": "Stream", "name": f"S{i}"},))
        for i in range(count)
    ]


def test_a_folder_swapped_for_a_link_while_writing_gets_nothing_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process renames the output folder away and puts a link to another folder
    in its place after the first file: the other files still go where the first went,
    none through the link (a path joined again for each file followed it)."""
    out, moved, outside = tmp_path / "out", tmp_path / "moved", tmp_path / "outside"
    outside.mkdir()
    replace = os.replace

    def swapped_after_the_first(*args: Any, **kwargs: Any) -> None:
        replace(*args, **kwargs)
        if not moved.exists():
            out.rename(moved)
            out.symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(os, "replace", swapped_after_the_first)
    assert export_cmd.write_files(_files(3), out, command="import") == 0
    assert list(outside.iterdir()) == []
    names = sorted(p.name for p in moved.iterdir())
    assert names == ["stream-S0.yaml", "stream-S1.yaml", "stream-S2.yaml"]
    assert "name: S2" in (moved / "stream-S2.yaml").read_text()


def test_files_are_new_files_renamed_over_what_stands_there(tmp_path: Path) -> None:
    """A link or a file at a spec file's name is replaced, never written through; no
    temporary file stays; the files are the owner's alone (0600, as mkstemp made them)."""
    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    out.mkdir()
    outside.write_text("do not touch")
    (out / "stream-S0.yaml").symlink_to(outside)
    (out / "stream-S1.yaml").write_text("old")
    export_cmd.write_files(_files(2), out, command="export")
    assert outside.read_text() == "do not touch"
    for name in ("stream-S0.yaml", "stream-S1.yaml"):
        written = out / name
        assert not written.is_symlink()
        assert written.read_text().startswith("# yaml-language-server: $schema=")
        assert written.stat().st_mode & 0o777 == 0o600 & ~_umask()
    assert sorted(p.name for p in out.iterdir()) == ["stream-S0.yaml", "stream-S1.yaml"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
