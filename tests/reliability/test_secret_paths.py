"""Random secrets pushed through every error path of every server-facing command, in every
URL form nats-py accepts: no secret reaches an output, and no error is a traceback.

The commands run in process (the CLI's own ``main``) against a loopback port nothing
listens on, a URL that cannot be parsed, or a scheme the tool does not speak.
"""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from harness import stream_doc, write_specs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servers import unused_port

from reconciler.cli import main

pytestmark = pytest.mark.integration

secrets = st.text(alphabet=string.ascii_letters + string.digits, min_size=10, max_size=20).map(
    lambda text: f"Sx{text}"
)


def url_forms(secret: str, port: int) -> list[tuple[str, ...]]:
    """``--server`` (and credential flags) carrying ``secret`` in each accepted form."""
    host = f"127.0.0.1:{port}"
    return [
        ("--server", f"alice:{secret}@{host}"),  # no scheme: nats-py adds nats://
        ("--server", f"nats://alice:{secret}@{host}"),
        ("--server", f"{secret}@{host}"),  # a token, no scheme
        ("--server", f"tls://{secret}@{host}"),
        ("--server", f"nats://{host},nats://bob:{secret}@{host}"),  # the second URL
        ("--server", f"nats://alice:{secret}@127.0.0.1:notaport"),
        ("--server", f"ws://alice:{secret}@{host}"),
        ("--server", f"nats://alice:{secret}@[::1"),
        ("--server", f"nats://{host}", "--user", "alice", "--password", secret),
        ("--server", f"nats://{host}", "--token", secret),
    ]


def commands(specs: Path, out: Path) -> list[tuple[str, ...]]:
    return [
        ("plan", str(specs)),
        ("apply", "-y", str(specs), "--lock-timeout", "1"),
        ("drift", str(specs), "--format", "markdown"),
        ("export", "--out", str(out / "export")),
        ("snapshot", "--env", "x", "--out", str(out / "snap.jsonl")),
        ("lock", "status"),
        ("lock", "break"),
    ]


@settings(
    max_examples=15,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(secret=secrets)
def test_no_secret_and_no_traceback_on_any_error_path(
    secret: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], figures
) -> None:
    specs = write_specs(tmp_path / "specs", [stream_doc("SECRETS")])
    port = unused_port()
    runs = 0
    for command in commands(specs, tmp_path):
        for form in url_forms(secret, port):
            argv = [*command, *form, "--connect-timeout", "0.3"]
            with pytest.raises(SystemExit) as ended:  # anything else is a traceback
                main(argv)
            err = capsys.readouterr()
            text = err.out + err.err
            assert ended.value.code == 1, (argv, text)
            assert secret not in text, (argv, text)
            assert secret[2:] not in text
            assert "Traceback" not in text
            runs += 1
    figures.add("secret_error_paths", runs)
