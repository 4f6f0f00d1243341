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
