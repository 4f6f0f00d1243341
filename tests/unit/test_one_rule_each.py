"""Each rule in one place: the front doors reuse the engine's URL redaction, Markdown
escaping, RFC 3339 timestamps and server facts instead of writing their own."""

from __future__ import annotations

import pytest

from action.comment import CommentError, GitHubAPI


@pytest.mark.parametrize("url", ["ftp://alice:s3cret@h:4222", "ftp://T0KEN@h", "alice:s3cret@h"])
def test_a_refused_api_url_is_shown_without_its_credentials(url: str) -> None:
    with pytest.raises(CommentError) as refused:
        GitHubAPI(api_url=url, token="")
    assert "s3cret" not in str(refused.value) and "T0KEN" not in str(refused.value)


def test_refusal_details_reach_markdown_escaped_one_per_line() -> None:
    from reconciler.console.markdown import failure_markdown
    from reconciler.errors import RefusedPlan

    err = RefusedPlan(
        "refusing to apply: 1 step(s) would destroy data",
        details=["update Stream [x](http://evil) @team: holds 20 messages"],
    )
    lines = failure_markdown(err).splitlines()
    assert lines[0] == "**Failed:** refusing to apply: 1 step(s) would destroy data"
    (detail,) = [line for line in lines if line.startswith("- ")]
    assert detail.startswith("- update Stream \\[x\\](http://evil) @&#8203;team")  # no link


def test_the_action_title_shows_a_path_as_a_code_span_it_cannot_leave() -> None:
    import io

    from action.__main__ import GitHubConsole, Inputs
    from action.runner import Runner

    inputs = Inputs(
        paths=("a`[x](http://evil)`",),
        mode="plan",
        server="",
        creds="",
        context="",
        prune=False,
        allow_replace=False,
        allow_data_loss=False,
        comment=False,
        fail_on_drift=True,
    )
    console = GitHubConsole(Runner(env={}, stdout=io.StringIO()), inputs, "plan")
    assert console.title == "JetStream plan for `` a`[x](http://evil)` ``"


def test_one_rfc3339_formatter_for_every_record() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from reconciler.model.timestamps import rfc3339

    moment = datetime(2026, 11, 25, 14, 47, 38, 999_999, tzinfo=UTC)
    assert rfc3339(moment) == "2026-11-25T14:47:38Z"
    assert rfc3339(moment.replace(tzinfo=None)) == "2026-11-25T14:47:38Z"  # naive: UTC
    assert rfc3339(moment.astimezone(timezone(timedelta(hours=2)))) == "2026-11-25T14:47:38Z"
    assert rfc3339(moment.timestamp()) == "2026-11-25T14:47:38Z"


def test_no_module_formats_a_utc_timestamp_its_own_way() -> None:
    """Snapshots, drift, the fleet summary and the lock write time through
    ``model.timestamps.rfc3339``. (``backup/take.py`` keeps its manifest's
    microsecond ``created`` field: a format of its own, documented in docs/backup.md.)"""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "reconciler"
    own_ways = ('%SZ"', '"+00:00", "Z"')
    found = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if any(way in path.read_text(encoding="utf-8") for way in own_ways)
    ]
    assert sorted(found) == ["backup/take.py", "model/timestamps.py"]


def test_server_facts_are_written_in_one_place_and_read_back() -> None:
    from reconciler.model.state import ServerInfo
    from reconciler.planning.steps import Plan

    info = ServerInfo("2.12.1", 2, clustered=True, domain="hub", address="nats://h:4222")
    facts = Plan(server=info).to_json()["server"]
    assert facts == info.to_json()
    assert facts == {"version": "2.12.1", "api_level": 2, "clustered": True, "domain": "hub"}
    back = ServerInfo.from_json(facts)
    assert (back.version, back.api_level, back.clustered, back.domain) == ("2.12.1", 2, True, "hub")
    assert back.address is None  # where the client was connected is not a fact kept


def _plans() -> dict[str, object]:
    from reconciler.identity import ResourceRef
    from reconciler.model.loss import Loss
    from reconciler.model.state import ServerInfo
    from reconciler.planning.steps import Delete, Plan, Replace, Update

    server = ServerInfo("2.12.1", 2)
    loss = (Loss("max_msgs", "holds 20 messages; max_msgs 5 deletes at least 15", 15),)
    lossy = Update(ref=ResourceRef("Stream", "A"), config={}, live={}, losses=loss)
    replace = Replace(ref=ResourceRef("Stream", "B"), config={}, live={})
    delete = Delete(ref=ResourceRef("Stream", "C"))
    return {
        "lossy update": Plan(server=server, changes=(lossy,)),
        "replace": Plan(server=server, changes=(replace,)),
        "delete and replace": Plan(server=server, changes=(replace, delete)),
        "all three": Plan(server=server, changes=(lossy, replace, delete)),
    }


BOTH = ("--allow-replace", "--allow-data-loss")


@pytest.mark.parametrize("name", sorted(_plans()))
@pytest.mark.parametrize("flags", [(), BOTH[:1], BOTH[1:], BOTH])
def test_the_plan_shown_announces_exactly_what_the_executor_refuses(
    name: str, flags: tuple[str, ...]
) -> None:
    """One rule (``Plan.refused``, ``allowing_flag``): the renderers' warning says apply
    refuses a plan, and names a flag, exactly when ``check_allowed`` refuses it naming it."""
    from reconciler.errors import RefusedPlan
    from reconciler.execution.apply import check_allowed
    from reconciler.planning.steps import Plan
    from reconciler.render.text import destroy_warning

    plan = _plans()[name]
    assert isinstance(plan, Plan)
    warning = destroy_warning(plan, flags) or ""
    try:
        check_allowed(
            plan,
            allow_replace="--allow-replace" in flags,
            allow_data_loss="--allow-data-loss" in flags,
        )
    except RefusedPlan as refused:
        flag = warning.rsplit("without ", 1)[1].rstrip(".")
        assert f"Re-run with {flag}" in refused.headline
    else:
        assert "allowed by" in warning


def test_a_prevented_step_that_destroys_nothing_is_not_said_to_destroy() -> None:
    """A failover rule prevents an update that destroys nothing (a fenced origin given its
    subjects back): the plan's last line and the pull request's headline said it destroyed
    protected resources; a prevented delete still says so."""
    from reconciler.identity import ResourceRef
    from reconciler.model.state import ServerInfo
    from reconciler.planning.steps import Delete, Plan, Update
    from reconciler.render.markdown import render_markdown
    from reconciler.render.text import destroy_warning

    server = ServerInfo("2.12.1", 2)
    why = "the origin is fenced: a failover gave its subjects to the standby"
    update = Update(ref=ResourceRef("Stream", "A"), config={}, live={}, prevented=why)
    gone = Delete(ref=ResourceRef("Stream", "B"), prevented="lifecycle prevent_destroy")
    fenced = Plan(server=server, changes=(update,))
    warning = destroy_warning(fenced) or ""
    assert "prevented" in warning and "destroy" not in warning
    assert "apply refuses" in warning
    headline = render_markdown(fenced).splitlines()[0]
    assert "prevented" in headline and "Destroys" not in headline
    both = Plan(server=server, changes=(update, gone))
    assert "2 step(s) are prevented" in (destroy_warning(both) or "")
    deleting = Plan(server=server, changes=(gone,))
    assert "destroy protected resources" in (destroy_warning(deleting) or "")


def test_an_api_answer_that_is_no_json_is_a_comment_error_the_step_warns_of() -> None:
    """A 200 answer that is not JSON (a proxy's login page) is the refused comment's
    error, which the step turns into a warning; it was an unforeseen JSONDecodeError."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            data = b"<html>Sign in to continue</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        api = GitHubAPI(api_url=f"http://127.0.0.1:{httpd.server_address[1]}", token="t0k")
        with pytest.raises(CommentError) as refused:
            api.request("GET", "/repos/o/r/issues/7/comments")
        assert "Sign in" not in str(refused.value)
    finally:
        httpd.shutdown()
        httpd.server_close()
