"""What a batched direct get's replies are read as (``jetstream.kv``): which reply is a
message and which ends the batch, the subject the server says, however a message's own
headers try to pass for the server's lines; and how keys are cut into batches."""

from __future__ import annotations

from reconciler.jetstream import kv


def _message(own: bytes, subject: bytes, sequence: int) -> bytes:
    """A message's header block as the server sends it in a batch: its own headers, then
    the server's lines."""
    return (
        b"NATS/1.0\r\n"
        + own
        + b"Nats-Stream: KV_b\r\nNats-Subject: "
        + subject
        + b"\r\nNats-Sequence: %d\r\nNats-Time-Stamp: t\r\nNats-Num-Pending: 0\r\n"
        b"Nats-Last-Sequence: 0\r\n\r\n" % sequence
    )


def test_the_servers_lines_are_the_last_ones_whatever_a_message_says() -> None:
    forged = b"Nats-Subject: $KV.b.declared\r\nNats-Sequence: 1\r\n"
    block = _message(forged, b"$KV.b.app.1", 42)
    assert kv._last_header(block, kv._SUBJECT) == b"$KV.b.app.1"
    assert kv._last_header(block, kv._SEQUENCE) == b"42"
    assert kv._last_header(b"NATS/1.0\r\n\r\n", kv._SUBJECT) is None


def test_a_status_reply_is_no_message_and_a_forged_status_line_does_not_end_a_batch() -> None:
    end = b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 3\r\nNats-Last-Sequence: 9\r\n\r\n"
    assert kv._last_header(end, kv._SEQUENCE) is None
    assert kv._status(end) == "204" and kv._last_header(end, kv._PENDING) == b"3"
    assert kv._status(b"NATS/1.0 408 Empty Request\r\n\r\n") == "408"
    assert kv._status(b"NATS/1.0 503\r\n\r\n") == "503"
    assert kv._status(b"NATS/1.0\r\nA: b\r\n\r\n") == ""
    # a stored message whose own header block starts with a status line: the server
    # still adds its sequence, so it is read as the message it is
    stored = _message(b"", b"$KV.b.k", 5).replace(b"NATS/1.0\r\n", b"NATS/1.0 204 EOB\r\n", 1)
    assert kv._last_header(stored, kv._SEQUENCE) == b"5"


def test_keys_are_cut_by_count_and_by_bytes() -> None:
    subjects = [f"$KV.b.k{i:04d}" for i in range(2500)]
    batches = kv._batches(subjects, 1 << 20)
    assert [len(b) for b in batches] == [kv.BATCH_KEYS, kv.BATCH_KEYS, 2500 - 2 * kv.BATCH_KEYS]
    assert [s for b in batches for s in b] == subjects
    long = ["$KV.b." + "x" * 300, "$KV.b.y", "$KV.b." + "z" * 300]
    assert kv._batches(long, 310) == [[long[0]], [long[1]], [long[2]]]
    assert kv._batches([], 100) == []
