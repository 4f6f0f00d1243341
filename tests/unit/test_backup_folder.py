"""The backup folder's pure parts: names, atomic files, the manifest, the S2 framing check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.backup.folder import claim, own_path
from reconciler.backup.layout import (
    AtomicFile,
    BackupError,
    file_digest,
    folder_name,
    s2_problem,
    s2_unpacked,
    stream_folder,
    valid_stream_name,
)
from reconciler.backup.manifest import (
    ConsumerRecord,
    FileRecord,
    Manifest,
    StreamRecord,
    completeness,
    load,
    read_contents,
)
from reconciler.backup.restore import differences

S2_MAGIC = b"\xff\x06\x00\x00S2sTwO"


def _frame(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + len(body).to_bytes(3, "little") + body


@pytest.mark.parametrize("name", ["..", ".", "a/b", "a\\b", "a b", "a.b", "*", ">", "", "ORDERS\n"])
def test_names_that_are_no_stream_names_never_become_folders(name: str, tmp_path: Path) -> None:
    assert not valid_stream_name(name)
    with pytest.raises(BackupError):
        stream_folder(tmp_path, name, name)


@pytest.mark.parametrize(
    "name", ["x\x1b", "A\x1b[2JB", "A\u200bB", "A\u202eB", "A\x85B", "A\xa0B", "x\x7f", "L" * 255]
)
def test_every_name_the_server_holds_has_a_plain_folder(name: str, tmp_path: Path) -> None:
    """A stream named with ESC, a C1 control, a zero-width space or a bidi override (the
    server takes them all) is backed up into the folder the export's rule names: no raw
    control or invisible character reaches the disk, nothing leaves the folder."""
    assert valid_stream_name(name)  # restored under its own name
    folder = stream_folder(tmp_path, name, folder_name(name))
    assert folder.name == name and folder.folder.parent == tmp_path
    written = folder.folder.name
    assert written.isascii() and written.isprintable() and "." not in written, written
    assert len(written) <= 200 and written == folder_name(name)
    if not name.isprintable() or not name.isascii():
        with pytest.raises(BackupError):
            stream_folder(tmp_path, name, "A\x1bB")  # as a folder, never raw


@pytest.mark.parametrize("folder", ["../x", "..", "a/b", "a\\b", "x\x1b", "", 7])
def test_a_forged_folder_in_a_manifest_is_refused_naming_the_entry(
    tmp_path: Path, folder: object
) -> None:
    body = Manifest("2026-01-01T00:00:00Z", {}, (_record(),)).to_json()
    body["streams"][0]["folder"] = folder
    (tmp_path / "manifest.json").write_text(json.dumps(body))
    with pytest.raises(BackupError, match=r"streams\[0\]: folder is not"):
        load(tmp_path)


def test_a_backup_written_by_the_earlier_rule_is_read_in_its_own_folders(tmp_path: Path) -> None:
    """Backups made before the export's rule named a stream's folder after the stream as
    it is (U+200B and all); their manifests say so, and a restore reads them there."""
    name = "A\u200bB"
    record = StreamRecord(name, {"name": name}, {}, folder=name)
    (tmp_path / "manifest.json").write_text(
        json.dumps(Manifest("2026-01-01T00:00:00Z", {}, (record,)).to_json())
    )
    contents = read_contents(tmp_path)
    assert contents.folder(name).folder == tmp_path / name
    assert contents.streams[0].folder_name == name
    record = StreamRecord("A\x1bB", {"name": "A\x1bB"}, {}, folder="A%1BB")
    (tmp_path / "manifest.json").write_text(
        json.dumps(Manifest("2026-01-01T00:00:00Z", {}, (record,)).to_json())
    )
    assert read_contents(tmp_path).folder("A\x1bB").folder == tmp_path / "A%1BB"


def test_an_atomic_file_is_only_in_place_after_commit(tmp_path: Path) -> None:
    target = tmp_path / "s" / "stream.tar.s2"
    out = AtomicFile(target)
    out.write(b"abc")
    assert not target.exists() and out.partial.exists()
    out.commit()
    assert target.read_bytes() == b"abc" and not out.partial.exists()
    assert (out.sha256, out.size) == file_digest(target)
    other = AtomicFile(tmp_path / "s" / "other")
    other.write(b"x")
    other.discard()
    assert list((tmp_path / "s").iterdir()) == [target]


def test_s2_framing_catches_truncation_and_damage(tmp_path: Path) -> None:
    path = tmp_path / "stream.tar.s2"
    whole = S2_MAGIC + _frame(0x01, b"\0\0\0\0" + b"data" * 100) + _frame(0xFE, b"pad")
    path.write_bytes(whole)
    assert s2_problem(path) is None
    path.write_bytes(whole[:-2])
    assert "truncated" in str(s2_problem(path))
    path.write_bytes(whole[:50])
    assert "truncated" in str(s2_problem(path))
    path.write_bytes(S2_MAGIC + _frame(0x05, b"xxxx"))
    assert "reserved" in str(s2_problem(path))
    path.write_bytes(b"not s2 at all")
    assert "identifier" in str(s2_problem(path))
    path.write_bytes(S2_MAGIC)
    assert "empty" in str(s2_problem(path))


def test_s2_unpacked_counts_what_each_data_frame_decodes_to(tmp_path: Path) -> None:
    """A compressed frame's block says the length it decodes to (a varint after the
    checksum), an uncompressed frame holds its bytes: 6 MiB of a repeated byte fit in a
    file of a few hundred bytes, so the file's size is no measure of what it brings."""
    path = tmp_path / "stream.tar.s2"
    six_mib = (6 << 20).to_bytes(4, "little")  # any checksum
    compressed = b"\0\0\0\0" + bytes([0x80, 0x80, 0x80, 0x03]) + b"\x00" * 40  # 6 MiB
    path.write_bytes(
        S2_MAGIC
        + _frame(0x00, compressed)
        + _frame(0x01, six_mib + b"data" * 100)
        + _frame(0xFE, b"pad")
    )
    assert s2_unpacked(path) == (6 << 20) + 400


def _record() -> StreamRecord:
    return StreamRecord(
        "ORDERS",
        {"name": "ORDERS", "subjects": ["orders.>"]},
        {"messages": 3, "bytes": 99, "first_seq": 1, "last_seq": 3},
        (
            ConsumerRecord("w", {"delivered.stream_seq": 3, "ack_floor.stream_seq": 2}),
            ConsumerRecord(
                "busy",
                {"delivered.stream_seq": 3, "ack_floor.stream_seq": 3},
                {"delivered.stream_seq": 1, "ack_floor.stream_seq": 0},
            ),
        ),
        {"stream.tar.s2": FileRecord("ab" * 32, 10), "backup.json": FileRecord("cd" * 32, 5)},
    )


def test_the_manifest_round_trips_and_holds_what_it_was_given(tmp_path: Path) -> None:
    manifest = Manifest("2026-01-01T00:00:00Z", {"version": "2.15.1"}, (_record(),))
    (tmp_path / "manifest.json").write_text(json.dumps(manifest.to_json()))
    assert load(tmp_path) == manifest
    contents = read_contents(tmp_path)
    assert contents.manifest == manifest and completeness(contents) == []


def test_a_manifest_of_another_shape_is_an_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text('{"format": "x"}')
    with pytest.raises(BackupError, match=r"manifest\.json"):
        load(tmp_path)
    (tmp_path / "manifest.json").write_text("[1, 2")
    with pytest.raises(BackupError, match="not a JSON file"):
        load(tmp_path)


def _live(delivered: int, floor: int, messages: int = 3) -> tuple[dict, dict]:  # type: ignore[type-arg]
    info = {"state": {"messages": messages, "bytes": 99, "first_seq": 1, "last_seq": 3}}
    consumer = {"delivered": {"stream_seq": delivered}, "ack_floor": {"stream_seq": floor}}
    return info, {"w": consumer, "busy": consumer}


def test_differences_name_state_and_positions_and_allow_a_busy_consumers_range() -> None:
    record = _record()
    info, consumers = _live(3, 2)
    consumers = {"w": consumers["w"], "busy": {"delivered": {"stream_seq": 2}, "ack_floor": {}}}
    assert differences(record, info, consumers) == []  # busy: between earliest and last
    info, consumers = _live(3, 1, messages=4)
    found = differences(record, info, consumers)
    assert "ORDERS: messages is 4, the backup has 3" in found
    assert any("consumer w ack_floor.stream_seq is 1" in line for line in found)
    assert differences(record, info, {})[-1] == "ORDERS: consumer busy is missing"


def _two_files(name: str) -> StreamRecord:
    files = {"stream.tar.s2": FileRecord("x", 3), "backup.json": FileRecord("y", 2)}
    return StreamRecord(name, {"name": name}, {}, files=files)


def test_a_manifest_is_never_written_while_a_file_it_lists_is_missing(tmp_path: Path) -> None:
    with claim(tmp_path) as held:
        held.start(["ORDERS"])
        (tmp_path / "ORDERS").mkdir()
        (tmp_path / "ORDERS" / "stream.tar.s2").write_bytes(b"abc")  # no backup.json
        with pytest.raises(BackupError, match=r"ORDERS/backup\.json"):
            held.finish(Manifest("2026-01-01T00:00:00Z", {}, (_two_files("ORDERS"),)))
    assert not (tmp_path / "manifest.json").exists()
    assert (tmp_path / "backup-in-progress.json").is_file()  # the next run knows its files


def test_a_planted_partial_link_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / ".stream.tar.s2.partial").symlink_to(victim)
    out = AtomicFile(tmp_path / "s" / "stream.tar.s2")
    out.write(b"snapshot")
    out.commit()
    assert victim.read_bytes() == b"precious"
    assert (tmp_path / "s" / "stream.tar.s2").read_bytes() == b"snapshot"


@pytest.mark.parametrize(
    "rel", ["../x/backup.json", "/etc/backup.json", "a/b/backup.json", "ORDERS/other",
            "specs.d/../../x.yaml", "specs.d/.hidden.yaml", "a.b/backup.json", "notes/x.yaml"],
)  # fmt: skip
def test_a_listed_path_outside_the_layout_names_no_file(rel: str) -> None:
    assert not own_path(rel)
    assert own_path("ORDERS/backup.json") and own_path("specs.d/stream-ORDERS.yaml")


def test_a_folder_a_backup_was_writing_when_it_stopped_is_no_backup(tmp_path: Path) -> None:
    with claim(tmp_path) as held:
        held.start(["ORDERS"])
    (tmp_path / "ORDERS").mkdir()  # one stream whole, as a nats CLI folder would be
    (tmp_path / "ORDERS" / "backup.json").write_text('{"config": {"name": "ORDERS"}}')
    (tmp_path / "ORDERS" / "stream.tar.s2").write_bytes(b"x")
    with pytest.raises(BackupError, match=r"backup-in-progress\.json"):
        read_contents(tmp_path)


def test_files_named_like_the_backups_own_but_of_another_shape_are_never_replaced(
    tmp_path: Path,
) -> None:
    (tmp_path / "backup-in-progress.json").write_text('{"mine": true}')
    with pytest.raises(BackupError, match=r"backup-in-progress\.json"), claim(tmp_path):
        pass
    assert (tmp_path / "backup-in-progress.json").read_text() == '{"mine": true}'
    (tmp_path / "backup-in-progress.json").unlink()
    (tmp_path / "manifest.json").write_text('{"format": "npm"}')
    with pytest.raises(BackupError, match=r"neither empty nor a backup"), claim(tmp_path):
        pass
    assert (tmp_path / "manifest.json").read_text() == '{"format": "npm"}'
