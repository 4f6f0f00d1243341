"""docs/dr.md's walk on examples/dr/ as shipped: two domains joined by a leafnode, apply
both sites, the pair's health, a failover asked about, done, then the roles swapped in
the spec and a failback."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from cli_runner import reconcile
from servers import START_TIMEOUT, NatsServer, default_binary, joined_domains, run, unused_port
from test_dr_failover import fetch, is_fenced
from test_dr_standby import last_seq, wait_for
from test_lifecycle import _info, _publish

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dr"


def test_the_dr_example_fails_over_and_back_as_the_doc_walks_it(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    east, west = joined_domains(server_factory)
    root = tmp_path / "dr"
    shutil.copytree(EXAMPLE, root)
    urls = {"EAST_NATS_URL": east.url, "WEST_NATS_URL": west.url}

    def cli(*args: str) -> tuple[int, str]:
        done = reconcile(*args, cwd=root, env=urls)
        return done.returncode, done.stdout + done.stderr

    for env in ("east", "west"):  # 1. apply both sites
        code, said = cli("apply", "--env", env, "--yes")
        assert code == 0, said
    run(_publish(east.url, "orders.new", 40))
    assert fetch(east, "shipper", 15, ack=True) == list(range(1, 16))
    wait_for(lambda: last_seq(west) == 40)

    code, said = cli("plan", "--env", "west")  # 2. the pair's health
    assert code == 0 and "standby ORDERS (east -> west): last seq origin 40, mirror 40" in said
    code, said = cli("failover", "--from", "east", "--to", "west", "--check")
    assert code == 0, said

    code, said = cli("failover", "--from", "east", "--to", "west")  # 3. asked: no terminal
    assert code == 1 and "nothing was changed" in said and not is_fenced(east)
    code, said = cli("failover", "--from", "east", "--to", "west", "--yes")
    assert code == 0, said
    # the doc: the output ends with each stream's write-unavailable window (it said
    # "no write taken: ORDERS 0.01s", which a new user read as no message stored)
    (done,) = [line for line in said.splitlines() if line.startswith("Failover complete")]
    assert re.search(r"writes unavailable[^:]*: ORDERS \d+\.\d+s", done), done
    assert is_fenced(east) and _info(west.url, "ORDERS")["config"].get("mirror") is None
    assert fetch(west, "shipper", 1, ack=False) == [16]

    code, said = cli("apply", "--env", "east", "--yes")  # 4. nothing undoes it
    assert code == 1 and "fenced by a failover" in said

    orders = root / "specs" / "orders.yaml"  # 5. fail back: the roles swapped in git
    text = orders.read_text(encoding="utf-8")
    text = text.replace("primary: east", "primary: @").replace(
        "environment: west", "environment: east"
    )
    orders.write_text(text.replace("primary: @", "primary: west"), encoding="utf-8")
    code, said = cli("plan", "--env", "west", "--detailed-exitcode")
    assert code == 0, said
    code, said = cli("apply", "--env", "east", "--yes")
    assert code == 1  # a replace: a full copy, allowed by --allow-replace
    code, said = cli("apply", "--env", "east", "--yes", "--allow-replace")
    assert code == 0, said
    run(_publish(west.url, "orders.new", 5))
    wait_for(lambda: last_seq(east) == 45)
    code, said = cli("failover", "--from", "west", "--to", "east", "--yes")
    assert code == 0, said
    assert is_fenced(west) and fetch(east, "shipper", 1, ack=False) == [16]


@contextmanager
def _started(conf: Path) -> Iterator[Path]:
    """``nats-server -c CONF`` run in the config's folder, as the doc runs it; its log."""
    log = conf.with_suffix(".log")
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(default_binary()), "-c", conf.name],
            cwd=conf.parent,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        yield log
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_shipped_server_configs_make_the_two_sites_the_doc_walks(tmp_path: Path) -> None:
    """docs/dr.md's step 0: ``nats-server -c east.conf`` and ``-c west.conf`` from the
    example's folder give two JetStream domains joined by a leafnode, on which step 1's
    applies make ORDERS in east and its mirror in west. Only the ports are moved off the
    doc's (4222, 4223, 7422), which other runs on this machine may hold."""
    root = tmp_path / "dr"
    shutil.copytree(EXAMPLE, root)
    ports = {port: str(unused_port()) for port in ("4222", "4223", "7422")}
    for conf in (root / "east.conf", root / "west.conf"):
        text = conf.read_text(encoding="utf-8")
        text = re.sub(r"127\.0\.0\.1:(4222|4223|7422)", lambda m: f"127.0.0.1:{ports[m[1]]}", text)
        conf.write_text(text, encoding="utf-8")
    urls = {
        "EAST_NATS_URL": f"nats://127.0.0.1:{ports['4222']}",
        "WEST_NATS_URL": f"nats://127.0.0.1:{ports['4223']}",
    }
    with _started(root / "east.conf"), _started(root / "west.conf") as west_log:
        deadline = time.monotonic() + START_TIMEOUT
        while "JetStream using domains" not in west_log.read_text(errors="replace"):
            assert time.monotonic() < deadline, west_log.read_text(errors="replace")
            time.sleep(0.05)
        for env in ("east", "west"):
            done = reconcile("apply", "--env", env, "--yes", cwd=root, env=urls)
            assert done.returncode == 0, done.stdout + done.stderr
        run(_publish(urls["EAST_NATS_URL"], "orders.new", 5))
        wait_for(lambda: _info(urls["WEST_NATS_URL"], "ORDERS")["state"]["last_seq"] == 5)
        done = reconcile(
            "failover", "--from", "east", "--to", "west", "--check", cwd=root, env=urls
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert (root / "east-store").is_dir() and (root / "west-store").is_dir()
