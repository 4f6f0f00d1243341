"""The runner side of the Action: inputs, outputs, summary cap, workflow commands, comments."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from action.comment import COMMENT_LIMIT, PullRequest, comment_body, marker
from action.runner import (
    SUMMARY_LIMIT,
    InputError,
    Runner,
    escape_data,
    escape_property,
    output_block,
    truncate_summary,
    workflow_command,
)


def parse_outputs(text: str) -> dict[str, str]:
    """Read a GITHUB_OUTPUT file back the way the runner does."""
    values: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line:
            i += 1
            continue
        name, sep, delimiter = line.partition("<<")
        assert sep, f"not a heredoc entry: {line!r}"
        end = lines.index(delimiter, i + 1)
        values[name] = "\n".join(lines[i + 1 : end])
        i = end + 1
    return values


def test_message_escaping_covers_percent_and_line_breaks() -> None:
    assert escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"


def test_property_escaping_also_covers_colon_and_comma() -> None:
    assert escape_property("C:\\a,b%\n") == "C%3A\\a%2Cb%25%0A"


def test_error_annotation_names_file_and_line() -> None:
    line = workflow_command("error", "bad: value\nhere", file="specs/a,b.yaml", line=7)
    assert line == "::error file=specs/a%2Cb.yaml,line=7::bad: value%0Ahere"


def test_command_without_properties_has_no_space() -> None:
    assert workflow_command("add-mask", "s3cr%t") == "::add-mask::s3cr%25t"


def test_multiline_output_round_trips_with_a_random_delimiter(tmp_path: Path) -> None:
    out = tmp_path / "output"
    runner = Runner(env={"GITHUB_OUTPUT": str(out)}, stdout=io.StringIO())
    runner.set_output("summary", "line one\nline two\n")
    runner.set_output("has-changes", "true")
    assert parse_outputs(out.read_text()) == {
        "summary": "line one\nline two\n",
        "has-changes": "true",
    }


def test_output_delimiters_differ_between_calls() -> None:
    first = output_block("x", "v").split("\n")[0]
    second = output_block("x", "v").split("\n")[0]
    assert first != second
    assert re.fullmatch(r"x<<ghadelimiter_[0-9a-f-]{36}", first)


def test_small_summary_is_written_as_is(tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    runner = Runner(env={"GITHUB_STEP_SUMMARY": str(target)}, stdout=io.StringIO())
    assert runner.write_summary("# Plan\n") is False
    assert target.read_text() == "# Plan\n"


def test_huge_summary_is_cut_under_one_mebibyte_with_a_note() -> None:
    row = "| Stream | ORDERS-é | update |\n"
    text, truncated = truncate_summary(row * 60_000)
    assert truncated
    assert len(text.encode("utf-8")) <= SUMMARY_LIMIT
    assert "Cut to fit" in text and "`plan-json` output file" in text
    body = text.split("\n\n> [!NOTE]")[0]
    assert all(line == row.rstrip("\n") for line in body.splitlines())


def test_summary_cap_counts_what_the_step_already_wrote(tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    target.write_text("x" * (SUMMARY_LIMIT - 100) + "\n")
    runner = Runner(env={"GITHUB_STEP_SUMMARY": str(target)}, stdout=io.StringIO())
    assert runner.write_summary("line\n" * 1000) is True
    assert target.stat().st_size <= SUMMARY_LIMIT


def test_inputs_accept_hyphenated_and_underscored_names() -> None:
    runner = Runner(env={"INPUT_ALLOW-REPLACE": "true", "INPUT_FAIL_ON_DRIFT": "False"})
    assert runner.flag("allow-replace", default=False) is True
    assert runner.flag("fail-on-drift", default=True) is False
    assert runner.flag("prune", default=False) is False


def test_boolean_input_rejects_other_words() -> None:
    runner = Runner(env={"INPUT_PRUNE": "yes"})
    with pytest.raises(InputError, match="prune"):
        runner.flag("prune", default=False)


def test_mask_hides_the_whole_secret_and_each_line() -> None:
    stdout = io.StringIO()
    Runner(env={}, stdout=stdout).mask("-----BEGIN-----\nSUAXYZ\n")
    lines = stdout.getvalue().splitlines()
    assert "::add-mask::SUAXYZ" in lines
    assert "::add-mask::-----BEGIN-----" in lines
    assert "::add-mask::-----BEGIN-----%0ASUAXYZ" in lines


def test_comment_body_starts_with_the_path_marker() -> None:
    body = comment_body("## Plan\n", path="specs/prod")
    assert body.startswith("<!-- jetstream-gitops:specs/prod -->\n")


def test_marker_cannot_close_the_html_comment_early() -> None:
    assert marker("a-->b").count("-->") == 1


def test_long_comment_is_cut_under_the_limit_with_a_note() -> None:
    body = comment_body("| row |\n" * 20_000, path="specs")
    assert len(body) <= COMMENT_LIMIT
    assert body.startswith(marker("specs"))
    assert body.endswith(
        "The complete plan: the workflow run's step summary and its plan artifact"
        " (`upload-plan: true`).\n"
    )


def test_pull_request_number_comes_from_the_event_payload(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text('{"pull_request": {"number": 42}}')
    pr = PullRequest.from_event(event_name="pull_request", event_path=str(event), repository="o/r")
    assert pr == PullRequest(repository="o/r", number=42)
    assert (
        PullRequest.from_event(event_name="push", event_path=str(event), repository="o/r") is None
    )


def test_the_server_input_takes_urls_one_a_line_as_path_does() -> None:
    """A block scalar of URLs (as ``path`` takes folders) was one URL to the client,
    refused with words about a URL nobody wrote."""
    from action.inputs import Inputs

    given = "nats://a.example:4222\n  nats://b.example:4222 ,nats://c.example:4222\n"
    runner = Runner(env={"INPUT_PATH": "specs", "INPUT_SERVER": given})
    assert Inputs.read(runner).server == (
        "nats://a.example:4222,nats://b.example:4222,nats://c.example:4222"
    )
