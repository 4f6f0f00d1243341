"""The project file edited under a running `reconcile watch` (no --git): spec files were
read again after an edit, the project file only at a restart, so an environment put in
``lifecycle: {mode: observe}`` was still healed, and one moved to another server still
planned the old one. Now the agent reads it again as it does spec files: validated first
(an invalid edit keeps the last valid project, said at its FILE:LINE in the log and
/status), and a change of the environments it serves is said and waits for a restart."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_harness import ORDERS, PATIENCE, Other, agent_process, lines, stopped
from servers import NatsServer, run, unused_port, write

PROJECT = """\
owner: shop
specs: [specs]
environments:
  dev:
    servers: {dev}
  prod:
    servers: {prod}
{more}"""


def _project(root: Path, dev: str, prod: str, *, prod_extra: str = "", more: str = "") -> None:
    text = PROJECT.format(dev=dev, prod=prod, more=more)
    if prod_extra:
        text = text.replace(f"servers: {prod}\n", f"servers: {prod}\n{prod_extra}")
    write(root, text, "reconcile.yaml")


def _status(port: int, part: str = "environments") -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as answer:
        return dict(json.loads(answer.read())[part])


def _readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


async def _drift(url: str, description: str) -> None:
    async with Other.connect(url) as alice:
        await alice.update("ORDERS", description=description)


async def _description(url: str) -> str | None:
    async with Other.connect(url, name="checker") as bob:
        info = await bob.info("ORDERS")
    return info.get("config", {}).get("description")


def _change(env: str | None, state: str, after: int = 0) -> Callable[[dict[str, Any]], bool]:
    """A change line of ORDERS in ``env`` into ``state`` (of the log's lines past ``after``)."""
    return lambda line: (
        line.get("seq", 0) >= after
        and line["event"] == "change"
        and line.get("env") == env
        and line["resource"] == "Stream ORDERS"
        and line["state"] == state
    )


def _numbered(log: Path) -> list[dict[str, Any]]:
    """The agent's JSON log lines, each with its place (``seq``)."""
    return [dict(line, seq=n) for n, line in enumerate(lines(log.read_text()))]


def _wait(log: Path, check: Callable[[dict[str, Any]], Any], what: str) -> dict[str, Any]:
    """The first line of the agent's log (numbered: ``seq``) that ``check`` accepts."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        found = [line for line in _numbered(log) if check(line)]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting: {what}\n{log.read_text()[-3000:]}")


def test_a_running_agent_serves_the_edited_project_file_and_keeps_the_last_valid_one(
    server_factory: Any, tmp_path: Path
) -> None:
    """``reconcile watch --all-envs --mode heal`` of dev and prod; the project file then
    puts prod in observe mode and moves dev to another server: dev's ORDERS is created
    there and prod's drift is reported, never healed. An invalid edit is said at its
    line (log, /status; still ready) and the last valid project is served (dev healed
    on its new server, prod still observed). An environment added is said to wait for
    a restart, and is not served."""
    servers: dict[str, NatsServer] = {n: server_factory() for n in ("dev", "prod", "moved")}
    (tmp_path / "specs").mkdir()
    write(tmp_path / "specs", ORDERS, "orders.yaml")
    dev, prod, moved = (servers[n].url for n in ("dev", "prod", "moved"))
    _project(tmp_path, dev, prod)
    log, port = tmp_path / "agent.log", unused_port()
    args = ["--all-envs", "--mode", "heal", "--interval", "0.5s", "--log-format", "json"]
    process = agent_process([*args, "--listen", f"127.0.0.1:{port}"], cwd=tmp_path, log=log)
    try:
        for env in ("dev", "prod"):
            _wait(log, _change(env, "healed"), f"ORDERS created in {env}")

        # prod observed from now on, dev moved to another server
        observe = "    lifecycle: {mode: observe}\n"
        _project(tmp_path, moved, prod, prod_extra=observe)
        read = {env: _wait(log, _read_again(env), f"{env} read again") for env in ("dev", "prod")}
        _wait(log, _change("dev", "healed", read["dev"]["seq"]), "ORDERS created where dev moved")
        assert run(_description(moved)) == "orders as declared"
        run(_drift(prod, "changed by hand in prod"))
        drifted = _wait(log, _change("prod", "drifted", read["prod"]["seq"]), "prod's drift said")
        _cycles_after(log, "prod", drifted["seq"], 3)
        assert run(_description(prod)) == "changed by hand in prod"  # observed: never healed
        assert not [
            line for line in _numbered(log) if _change("prod", "healed", drifted["seq"])(line)
        ]

        # an invalid edit: said at its line, the last valid project kept (prod observed,
        # dev on the moved server), the agent still ready
        _project(tmp_path, moved, prod, prod_extra="    lifecycle: {mode: sometimes}\n")
        said = _wait(log, _refused("prod"), "the invalid edit said")
        assert re.search(r"reconcile\.yaml:\d+", said["message"]), said
        status = _status(port)
        for env in ("dev", "prod"):
            assert re.search(r"reconcile\.yaml:\d+", status[env]["project"]["error"] or "")
            assert status[env]["project"]["failing_since"]
        assert _readyz(port) == 200
        run(_drift(moved, "changed by hand in dev"))
        _wait(log, _change("dev", "healed", said["seq"]), "dev healed on the moved server")
        assert run(_description(moved)) == "orders as declared"
        assert run(_description(prod)) == "changed by hand in prod"

        # another environment: said, served after a restart; the others go on
        extra = "  extra:\n    servers: nats://127.0.0.1:1\n"
        _project(tmp_path, moved, prod, prod_extra=observe, more=extra)
        said = _wait(log, lambda line: _refused("dev")(line) and "extra" in line["message"],
                     "the changed list said")  # fmt: skip
        assert "restart" in said["message"]
        assert "extra" in (_status(port)["dev"]["project"]["error"] or "")
        assert "extra" not in _status(port)
        assert "restart" in _status(port, "not_served")["extra"]
        assert "Traceback" not in log.read_text()
    finally:
        stopped(process)


def _read_again(env: str | None) -> Callable[[dict[str, Any]], bool]:
    return lambda line: line["event"] == "project" and line.get("env") == env


def _refused(env: str) -> Callable[[dict[str, Any]], bool]:
    return lambda line: (
        line["event"] == "error"
        and line.get("env") == env
        and "the project file changed and cannot be served" in line["message"]
    )


def _cycles_after(log: Path, env: str | None, seq: int, n: int) -> None:
    def enough(line: dict[str, Any]) -> bool:
        cycles = [
            x
            for x in _numbered(log)
            if x["seq"] > seq and x["event"] == "cycle" and x.get("env") == env
        ]
        return len(cycles) >= n

    _wait(log, enough, f"{n} more cycles of {env}")


NO_UPDATES = (
    "rules:\n  - id: frozen\n    level: deny\n    message: ORDERS is frozen\n"
    '    kinds: [Stream]\n    expr: step.action != "update"\n'
)


def test_spec_paths_with_a_project_file_serve_its_edited_policies(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``reconcile watch --project reconcile.yaml specs`` (spec PATHS, no environment):
    the project file's policies were read at the start only, so a deny rule added to it
    later never held and the agent went on healing what the rule denies. Now the project
    file is read again as an environment's is: the rule added, the next drift is denied
    (the hand's change stays, every message too); the rule taken out, it is healed."""
    url = clean_server.url
    (tmp_path / "specs").mkdir()
    write(tmp_path / "specs", ORDERS, "orders.yaml")
    write(tmp_path, NO_UPDATES, "frozen.yaml")
    plain = f"owner: shop\nspecs: [specs]\nenvironments:\n  dev:\n    servers: {url}\n"
    write(tmp_path, plain, "reconcile.yaml")
    log = tmp_path / "agent.log"
    args = ["--mode", "heal", "--interval", "0.5s", "--log-format", "json", "--listen", "off"]
    where = ["--project", "reconcile.yaml", "specs", "--server", url]
    process = agent_process([*args, *where], cwd=tmp_path, log=log)
    try:
        _wait(log, _change(None, "healed"), "ORDERS created")
        run(_publish(url, 10))
        run(_drift(url, "changed by hand"))
        _wait(log, lambda line: run(_description(url)) == "orders as declared", "healed")

        write(
            tmp_path,
            plain.replace("specs: [specs]\n", "specs: [specs]\npolicies: [frozen.yaml]\n"),
            "reconcile.yaml",
        )
        read = _wait(log, _read_again(None), "the project file read again")
        run(_drift(url, "changed by hand again"))
        denied = _wait(
            log,
            lambda line: (
                line["seq"] > read["seq"]
                and line["event"] == "cycle"
                and "deny frozen: Stream ORDERS (update)" in (line.get("error") or "")
            ),
            "the drift denied by the rule added",
        )
        _cycles_after(log, None, denied["seq"], 3)
        assert run(_description(url)) == "changed by hand again"
        assert run(_messages(url)) == 10

        write(tmp_path, plain, "reconcile.yaml")  # the rule taken out: healed again
        read = _wait(log, lambda line: _read_again(None)(line) and line["seq"] > denied["seq"],
                     "the project file read again, the rule gone")  # fmt: skip
        _wait(log, _change(None, "healed", read["seq"]), "the drift healed")
        assert run(_description(url)) == "orders as declared"
        assert run(_messages(url)) == 10
        assert "Traceback" not in log.read_text()
    finally:
        stopped(process)


async def _publish(url: str, count: int) -> None:
    async with Other.connect(url) as alice:
        await alice.publish("orders.new", count)


async def _messages(url: str) -> int:
    async with Other.connect(url, name="checker") as bob:
        return int(await bob.messages("ORDERS"))


def test_an_edited_reconcileignore_is_named_as_the_file_read_again_or_refused(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The ``.reconcileignore`` beside the project file is read again after an edit as the
    project file is; the log named the project file as the one changed (``file:
    reconcile.yaml``) for an edit of the ignore file. Now each line names the file edited."""
    url = clean_server.url
    (tmp_path / "specs").mkdir()
    write(tmp_path / "specs", ORDERS, "orders.yaml")
    write(tmp_path, f"owner: shop\nspecs: [specs]\nenvironments:\n  dev:\n    servers: {url}\n",
          "reconcile.yaml")  # fmt: skip
    log = tmp_path / "agent.log"
    args = ["--mode", "heal", "--interval", "0.5s", "--log-format", "json", "--listen", "off"]
    process = agent_process([*args, "--project", "reconcile.yaml", "--env", "dev"], cwd=tmp_path,
                            log=log)  # fmt: skip
    try:
        _wait(log, _change(None, "healed"), "ORDERS created")
        write(tmp_path, "# apps' own consumers\nConsumer ORDERS/app-*\n", ".reconcileignore")
        read = _wait(log, _read_again(None), "the ignore file read again")
        assert read["file"].endswith(".reconcileignore"), read
        assert ".reconcileignore changed" in read["message"], read

        write(tmp_path, "Consumer ORDERS/app-*\nNoSuchKind X\n", ".reconcileignore")
        refused = _wait(log, lambda line: line["event"] == "error" and line["seq"] > read["seq"],
                        "the invalid ignore file refused")  # fmt: skip
        assert refused["file"].endswith(".reconcileignore"), refused
        assert "the .reconcileignore changed and cannot be served" in refused["message"]
        assert re.search(r"\.reconcileignore:2", refused["message"]), refused
        run(_drift(url, "changed by hand"))
        _wait(log, _change(None, "healed", refused["seq"]), "the last valid project served")
        assert run(_description(url)) == "orders as declared"
        assert "Traceback" not in log.read_text()
    finally:
        stopped(process)
