"""Backup and restore throughput against the raw SNAPSHOT/RESTORE API, in the same run
(figures, never assertions), and the restore of many small streams with a bound.

Run: ``python bench/bench_backup.py [MIB] [SMALL_STREAMS]`` (defaults 256 and 1000).

1. A file stream of MIB MiB in 1 KiB messages (random bytes, so the snapshot's S2 cannot
   shrink them) on a fresh nats-server in a temp folder.
2. Backup: :func:`reconciler.backup.take.take_backup` (chunks to a ``.partial`` file,
   SHA-256 while writing, fsync, rename, ``backup.json``, manifest) against the raw API
   driven by nats-py: SNAPSHOT, then each chunk written to a file, hashed and acked, the
   file fsynced at the end. Four turns, raw first in the even ones and ours first in
   the odd ones (whichever ran second was slower); the best of each.
3. Restore: :func:`reconciler.backup.restore.restore` (the folder checked first: digests
   and S2 framing; then restored and verified) into a second fresh server, against the raw
   API sending the same file in 128 KiB requests (the stream deleted between turns).
4. SMALL_STREAMS streams of 10 messages each backed up, then restored with the
   default bound (one restore at a time: more crashed nats-server 2.15.1), seconds and
   streams per second.

Peak RSS of this process is printed at the end (both sides run in it).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from servers import NatsServer, options

from reconciler.backup.restore import Flags, restore
from reconciler.backup.take import Selection, take_backup
from reconciler.jetstream import open_client

CHUNK = 128 * 1024
TURNS = 4


async def fill(server: NatsServer, name: str, mib: int, size: int = 1024) -> float:
    """The stream's MiB as stored (a core publish the server could not take is lost)."""
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
        block = os.urandom(size * 1024)
        for i in range(mib * 1024 * 1024 // size):
            start = (i % 1024) * size
            await nc.publish(f"{name.lower()}.m", block[start : start + size])
            if i % 5000 == 0:
                await nc.flush()
        await nc.flush()
        info = await js.stream_info(name)
        print(f"stream {name}: {info.state.messages} messages, {info.state.bytes} bytes")
        return info.state.bytes / 1024 / 1024
    finally:
        await nc.close()


async def raw_snapshot(url: str, stream: str, path: Path) -> int:
    nc = await nats.connect(url)
    digest, size = hashlib.sha256(), 0
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        body = f'{{"deliver_subject":"{inbox}","chunk_size":{CHUNK},"jsck":true}}'
        await nc.request(f"$JS.API.STREAM.SNAPSHOT.{stream}", body.encode(), timeout=600)
        with open(path, "wb") as out:
            while True:
                msg = await sub.next_msg(timeout=30)
                if not msg.data:
                    break
                out.write(msg.data)
                digest.update(msg.data)
                size += len(msg.data)
                if msg.reply:
                    await nc.publish(msg.reply, b"")
            out.flush()
            os.fsync(out.fileno())
    finally:
        await nc.close()
    return size


async def raw_restore(url: str, config: dict[str, Any], state: dict[str, Any], path: Path) -> None:
    import json

    nc = await nats.connect(url)
    try:
        body = json.dumps({"config": config, "state": state}).encode()
        reply = await nc.request(f"$JS.API.STREAM.RESTORE.{config['name']}", body, timeout=10)
        deliver = json.loads(reply.data)["deliver_subject"]
        with open(path, "rb") as source:
            while chunk := source.read(CHUNK):
                await nc.request(deliver, chunk, timeout=10)
        final = await nc.request(deliver, b"", timeout=600)
        assert "error" not in json.loads(final.data), final.data
    finally:
        await nc.close()


async def delete(server: NatsServer, name: str) -> None:
    async with open_client(options(server)) as client:
        await client.delete_stream(name)


def rate(mib: float, seconds: float) -> str:
    return f"{mib / seconds:7.1f} MiB/s ({seconds:.2f} s)"


async def throughput(work: Path, mib: int) -> None:
    source = NatsServer(work / "source").start()
    target = NatsServer(work / "target").start()
    try:
        stored = await fill(source, "BIG", mib)
        ours_b, raw_b, ours_r, raw_r = [], [], [], []
        for turn in range(TURNS):  # raw first, then ours first: neither always follows
            for side in ("raw", "ours") if turn % 2 == 0 else ("ours", "raw"):
                started = time.perf_counter()
                if side == "raw":
                    await raw_snapshot(source.url, "BIG", work / f"raw-{turn}.tar.s2")
                    raw_b.append(time.perf_counter() - started)
                else:
                    out = work / f"ours-{turn}"
                    await take_backup(options(source), out, Selection(everything=True))
                    ours_b.append(time.perf_counter() - started)
        meta = __import__("json").loads((out / "BIG" / "backup.json").read_text())
        for _ in range(TURNS):
            started = time.perf_counter()
            await raw_restore(
                target.url, meta["config"], meta["state"], out / "BIG" / "stream.tar.s2"
            )
            raw_r.append(time.perf_counter() - started)
            await delete(target, "BIG")
            started = time.perf_counter()
            await restore(options(target), out, Flags())
            ours_r.append(time.perf_counter() - started)
            await delete(target, "BIG")
        print(
            f"backup  {stored:.0f} MiB  ours {rate(stored, min(ours_b))}"
            f"   raw {rate(stored, min(raw_b))}"
            f"   ratio {min(raw_b) / min(ours_b):.2f}x"
        )
        print(
            f"restore {stored:.0f} MiB  ours {rate(stored, min(ours_r))}"
            f"   raw {rate(stored, min(raw_r))}"
            f"   ratio {min(raw_r) / min(ours_r):.2f}x"
        )
    finally:
        source.stop()
        target.stop()


async def small_streams(work: Path, count: int) -> None:
    source = NatsServer(work / "small-source").start()
    target = NatsServer(work / "small-target").start()
    try:
        nc = await nats.connect(source.url)
        js = nc.jetstream()
        for i in range(count):
            await js.add_stream(name=f"S{i}", subjects=[f"s{i}.>"])
            for j in range(10):
                await nc.publish(f"s{i}.m", f"message {j}".encode(), headers={"J": str(j)})
        await nc.flush()
        await nc.close()
        out = work / "small"
        started = time.perf_counter()
        await take_backup(options(source), out, Selection(everything=True))
        took = time.perf_counter() - started
        print(f"backup  {count} small streams: {took:.2f} s ({count / took:.0f} streams/s)")
        started = time.perf_counter()
        result = await restore(options(target), out, Flags())
        took = time.perf_counter() - started
        assert len(result.restored) == count and not result.problems, result.problems[:5]
        print(
            f"restore {count} small streams (one at a time): {took:.2f} s "
            f"({count / took:.0f} streams/s)"
        )
    finally:
        source.stop()
        target.stop()


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(throughput(Path(folder), mib))
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(small_streams(Path(folder), count))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
