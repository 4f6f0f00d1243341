"""Spec files are written into the folder named, by rename, never through a link: the
folder is opened once and every file is named in it (``export_cmd.write_files``). A file
of the same name that export or import did not write is refused before anything is
written, unless ``overwrite`` (``export_cmd.refuse_foreign``)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from reconciler.cli import export_cmd
from reconciler.errors import ReconcileError
from reconciler.planning.export import ExportedFile
from reconciler.planning.export_text import written_by_tool


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
    link = os.link  # a new file takes its name by a hard link

    def swapped_after_the_first(*args: Any, **kwargs: Any) -> None:
        link(*args, **kwargs)
        if not moved.exists():
            out.rename(moved)
            out.symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(os, "link", swapped_after_the_first)
    assert export_cmd.write_files(_files(3), out, command="import") == 0
    assert list(outside.iterdir()) == []
    names = sorted(p.name for p in moved.iterdir())
    assert names == ["stream-S0.yaml", "stream-S1.yaml", "stream-S2.yaml"]
    assert "name: S2" in (moved / "stream-S2.yaml").read_text()


def test_files_are_new_files_renamed_over_what_stands_there(tmp_path: Path) -> None:
    """With ``overwrite``, a link or a file at a spec file's name is replaced, never
    written through; no temporary file stays; the files are the owner's alone (0600, as
    mkstemp made them)."""
    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    out.mkdir()
    outside.write_text("do not touch")
    (out / "stream-S0.yaml").symlink_to(outside)
    (out / "stream-S1.yaml").write_text("old")
    export_cmd.write_files(_files(2), out, command="export", overwrite=True)
    assert outside.read_text() == "do not touch"
    for name in ("stream-S0.yaml", "stream-S1.yaml"):
        written = out / name
        assert not written.is_symlink()
        assert written.read_text().startswith("# yaml-language-server: $schema=")
        assert written.stat().st_mode & 0o777 == 0o600 & ~_umask()
    assert sorted(p.name for p in out.iterdir()) == ["stream-S0.yaml", "stream-S1.yaml"]


@pytest.mark.parametrize("command", ["export", "import"])
def test_a_file_someone_wrote_is_refused_by_name_and_nothing_is_written(
    tmp_path: Path, command: str
) -> None:
    """A hand-written file and a link at two of the names: one error naming both, and
    no file written (not even the third, new one), whichever command writes."""
    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    out.mkdir()
    outside.write_text("mine")
    (out / "stream-S0.yaml").symlink_to(outside)
    (out / "stream-S1.yaml").write_text("kind: Stream\nname: S1  # by hand\n")
    with pytest.raises(ReconcileError) as refused:
        export_cmd.write_files(_files(3), out, command=command)
    said = str(refused.value)
    assert str(out / "stream-S0.yaml") in said and str(out / "stream-S1.yaml") in said
    assert "stream-S2.yaml" not in said and "--overwrite" in said
    assert sorted(p.name for p in out.iterdir()) == ["stream-S0.yaml", "stream-S1.yaml"]
    assert (out / "stream-S1.yaml").read_text() == "kind: Stream\nname: S1  # by hand\n"
    assert (out / "stream-S0.yaml").is_symlink() and outside.read_text() == "mine"


def test_the_files_export_or_import_wrote_are_refreshed(tmp_path: Path) -> None:
    """Exporting again into the folder replaces what export, import or an older release
    of either wrote (their header lines), edits and all: the usual refresh."""
    out = tmp_path / "out"
    export_cmd.write_files(_files(1), out, command="import")
    (out / "stream-S0.yaml").write_text((out / "stream-S0.yaml").read_text() + "# edited\n")
    older = "# yaml-language-server: $schema=file:///x.json\n# exported by `reconcile`\nx: 1\n"
    (out / "stream-S1.yaml").write_text(older)
    assert export_cmd.write_files(_files(2), out, command="export") == 0
    for name in ("stream-S0.yaml", "stream-S1.yaml"):
        assert "# exported by `reconcile export`" in (out / name).read_text()
        assert "edited" not in (out / name).read_text()


@pytest.mark.parametrize(
    "text",
    [
        "# exported by `reconcile export`\n",  # the schema line missing
        "# yaml-language-server: $schema=x.json\nkind: Stream\n",  # the command line missing
        "# yaml-language-server: $schema=x.json\n# exported by `reconcile export` (mine)\n",
        "# yaml-language-server: $schema=x.json",
        "",
    ],
)
def test_a_header_of_another_shape_is_not_the_tools(text: str) -> None:
    assert not written_by_tool(text.encode())


def test_a_folder_at_a_files_name_is_refused_even_with_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "stream-S1.yaml").mkdir(parents=True)
    with pytest.raises(ReconcileError, match="a folder"):
        export_cmd.write_files(_files(2), out, command="export", overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["stream-S1.yaml"]


def test_without_hard_links_a_new_name_is_claimed_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file system without hard links (FAT, some shares) a new file is still
    written, and a file appearing after the check is still refused and kept."""

    def no_links(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    out = tmp_path / "out"
    export_cmd.write_files(_files(2), out, command="export")
    assert sorted(p.name for p in out.iterdir()) == ["stream-S0.yaml", "stream-S1.yaml"]
    assert all(written_by_tool((out / n).read_bytes()) for n in ("stream-S0.yaml",))
    check = export_cmd.refuse_foreign

    def checked_then_planted(*args: Any, **kwargs: Any) -> None:
        check(*args, **kwargs)
        (out / "stream-S2.yaml").write_text("mine")

    monkeypatch.setattr(export_cmd, "refuse_foreign", checked_then_planted)
    with pytest.raises(ReconcileError, match="2 file\\(s\\) were written before"):
        export_cmd.write_files(_files(3), out, command="export")
    assert (out / "stream-S2.yaml").read_text() == "mine"
    assert len(list(out.iterdir())) == 3  # no temporary file


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
