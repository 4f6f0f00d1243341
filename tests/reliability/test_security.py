"""Least privilege, TLS, and secrets that never show up in any output.

Servers are configured with users, tokens, nkeys, operator JWTs and TLS by
``tests/servers.py``; every command runs as a user runs it, in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from credentials import make_nkey, make_operator, make_tls
from harness import cli_env, consumer_doc, reconcile, stream_doc, write_specs

pytestmark = pytest.mark.integration

PASSWORD = "pw-Zq8vX2-never-print-me"
TOKEN = "tok-Kd93LmQ-never-print-me"

JS_API = ["$JS.API.>"]
INBOX = ["_INBOX.>"]
LOCK = ["$KV.RECONCILE_LOCKS.>"]


def _user(name: str, publish: list[str], subscribe: list[str]) -> dict:
    return {
        "user": name,
        "password": PASSWORD,
        "permissions": {"publish": {"allow": publish}, "subscribe": {"allow": subscribe}},
    }


def _specs(tmp_path: Path) -> Path:
    return write_specs(
        tmp_path / "specs",
        [stream_doc("SECURE", max_msgs=100), consumer_doc("SECURE", "READER")],
    )


def _as(user: str, url: str) -> tuple[str, ...]:
    return ("--server", url, "--user", user, "--password", PASSWORD)


# --- least privilege ---------------------------------------------------------------------


def test_least_privilege_user_can_plan_and_apply(server_factory, tmp_path: Path, figures) -> None:
    server = server_factory(users=[_user("deployer", JS_API + LOCK, INBOX)])
    specs = _specs(tmp_path)

    planned = reconcile("plan", str(specs), *_as("deployer", server.url))
    applied = reconcile("apply", "-y", str(specs), *_as("deployer", server.url))
    again = reconcile("plan", str(specs), *_as("deployer", server.url), "--detailed-exitcode")

    assert planned.returncode == 0, planned.stderr
    assert applied.returncode == 0, applied.stderr
    assert again.returncode == 0, again.stdout
    figures.add("security_cases")


def test_api_only_user_plans_and_is_told_which_subject_the_lock_needs(
    server_factory, tmp_path: Path, figures
) -> None:
    server = server_factory(users=[_user("apionly", JS_API, INBOX)])
    specs = _specs(tmp_path)

    planned = reconcile("plan", str(specs), *_as("apionly", server.url))
    locked = reconcile("apply", "-y", str(specs), *_as("apionly", server.url))
    unlocked = reconcile("apply", "-y", str(specs), "--no-lock", *_as("apionly", server.url))

    assert planned.returncode == 0, planned.stderr
    assert locked.returncode == 1
    assert "permission denied" in locked.stderr
    assert "$kv.reconcile_locks.apply" in locked.stderr.lower()
    assert "Traceback" not in locked.stderr
    assert unlocked.returncode == 0, unlocked.stderr
    figures.add("security_cases")


def test_user_without_the_api_gets_a_clear_permission_error(
    server_factory, tmp_path: Path, figures
) -> None:
    server = server_factory(users=[_user("reader", ["app.>"], INBOX)])

    done = reconcile("plan", str(_specs(tmp_path)), *_as("reader", server.url), timeout=60)

    assert done.returncode == 1
    assert "permission denied" in done.stderr
    assert "$JS.API" in done.stderr or "$js.api" in done.stderr
    assert "Traceback" not in done.stderr
    figures.add("security_cases")


# --- TLS ---------------------------------------------------------------------------------


def test_tls_with_a_test_ca_and_client_certificates_works(
    server_factory, tmp_path: Path, figures
) -> None:
    tls = make_tls(tmp_path / "pki")
    server = server_factory(tls=tls, verify_clients=True)
    specs = _specs(tmp_path)
    flags = (
        "--server",
        server.url,
        "--tls-ca",
        str(tls.ca),
        "--tls-cert",
        str(tls.client_cert),
        "--tls-key",
        str(tls.client_key),
    )

    applied = reconcile("apply", "-y", str(specs), *flags)
    again = reconcile("plan", str(specs), *flags, "--detailed-exitcode")

    assert applied.returncode == 0, applied.stderr
    assert again.returncode == 0, again.stdout
    figures.add("security_cases")


def test_tls_with_the_wrong_ca_fails_clearly(server_factory, tmp_path: Path, figures) -> None:
    tls = make_tls(tmp_path / "pki")
    stranger = make_tls(tmp_path / "other-pki")
    server = server_factory(tls=tls)

    done = reconcile(
        "plan",
        str(_specs(tmp_path)),
        "--server",
        server.url,
        "--tls-ca",
        str(stranger.ca),
        timeout=60,
    )

    assert done.returncode == 1
    assert "TLS handshake with" in done.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in done.stderr or "certificate verify failed" in done.stderr
    assert "Traceback" not in done.stderr
    figures.add("security_cases")


def test_client_without_a_certificate_is_refused_when_the_server_requires_one(
    server_factory, tmp_path: Path, figures
) -> None:
    tls = make_tls(tmp_path / "pki")
    server = server_factory(tls=tls, verify_clients=True)

    done = reconcile(
        "plan",
        str(_specs(tmp_path)),
        "--server",
        server.url,
        "--tls-ca",
        str(tls.ca),
        timeout=60,
    )

    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "cannot connect" in done.stderr or "TLS" in done.stderr
    figures.add("security_cases")


# --- secrets never shown ------------------------------------------------------------------


class Outputs:
    """Everything the commands printed or wrote, to grep for secrets."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.texts: list[tuple[str, str]] = []

    def run(self, label: str, *args: str, env: dict[str, str] | None = None) -> int:
        done = reconcile(*args, env=env)
        self.texts.append((f"{label} stdout", done.stdout))
        self.texts.append((f"{label} stderr", done.stderr))
        return done.returncode

    def files(self) -> list[tuple[str, str]]:
        found = []
        for path in sorted(self.root.rglob("*")):
            if path.is_file():
                found.append((str(path), path.read_text(errors="replace")))
        return found

    def leaks(self, secrets: list[str]) -> list[str]:
        return [
            f"{secret[:6]}… in {where}"
            for where, text in self.texts + self.files()
            for secret in secrets
            if secret in text
        ]


def _every_command(out: Outputs, specs: Path, flags: tuple[str, ...], tag: str) -> None:
    out_dir = out.root
    assert out.run(f"{tag} plan", "plan", str(specs), *flags) == 0, out.texts[-1]
    out.run(f"{tag} plan json", "plan", str(specs), *flags, "--format", "json")
    assert out.run(f"{tag} apply", "apply", "-y", str(specs), *flags, "--format", "json") == 0
    out.run(f"{tag} apply text", "apply", "-y", str(specs), *flags)
    out.run(f"{tag} drift", "drift", str(specs), *flags, "--format", "markdown")
    out.run(
        f"{tag} drift html",
        "drift",
        str(specs),
        *flags,
        "--format",
        "html",
        "--out",
        str(out_dir / f"{tag}-drift.html"),
    )
    out.run(f"{tag} export", "export", *flags, "--out", str(out_dir / f"{tag}-export"))
    out.run(f"{tag} lock", "lock", "status", *flags, "--format", "json")
    out.run(f"{tag} debug plan", "--debug", "plan", str(specs), *flags)


def test_passwords_and_tokens_never_appear_in_any_output(
    server_factory, tmp_path: Path, figures
) -> None:
    by_user = server_factory(users=[{"user": "deployer", "password": PASSWORD}])
    by_token = server_factory(token=TOKEN)
    specs = _specs(tmp_path)
    out = Outputs(tmp_path / "out")
    out.root.mkdir()
    host_user = by_user.url.removeprefix("nats://")
    host_token = by_token.url.removeprefix("nats://")

    as_user = ("--server", by_user.url, "--user", "deployer")
    _every_command(out, specs, (*as_user, "--password", PASSWORD), "pw")
    _every_command(out, specs, ("--server", f"nats://deployer:{PASSWORD}@{host_user}"), "pwurl")
    _every_command(out, specs, ("--server", by_token.url, "--token", TOKEN), "token")
    _every_command(out, specs, ("--server", f"nats://{TOKEN}@{host_token}"), "tokurl")
    env = cli_env(NATS_PASSWORD=PASSWORD)
    out.run("pw env", "plan", str(specs), *as_user, env=env)
    # failures: a wrong secret, an unreachable server
    wrong = PASSWORD[::-1]
    out.run(
        "wrong pw",
        "--debug",
        "plan",
        str(specs),
        "--server",
        by_user.url,
        "--user",
        "deployer",
        "--password",
        wrong,
    )
    out.run("wrong tok", "plan", str(specs), "--server", f"nats://{TOKEN}x@{host_token}")
    out.run("down", "plan", str(specs), "--server", f"nats://deployer:{PASSWORD}@127.0.0.1:1")

    assert out.leaks([PASSWORD, TOKEN, wrong, TOKEN + "x"]) == []
    assert any("SECURE" in text for _, text in out.texts), "the commands did run"
    figures.add("outputs_grepped", len(out.texts) + len(out.files()))


def test_creds_and_nkey_seeds_never_appear_in_any_output(
    server_factory, tmp_path: Path, figures
) -> None:
    operator = make_operator(tmp_path / "op")
    by_creds = server_factory(config=operator.settings)
    public, seed = make_nkey("user")
    seed_file = tmp_path / "user.nk"
    seed_file.write_text(seed + "\n")
    by_nkey = server_factory(users=[{"nkey": public}])
    creds_text = operator.creds.read_text()
    jwt = creds_text.split("-----BEGIN NATS USER JWT-----")[1].split("---")[0].strip()
    creds_seed = creds_text.split("-----BEGIN USER NKEY SEED-----")[1].split("---")[0].strip()
    specs = _specs(tmp_path)
    out = Outputs(tmp_path / "out")
    out.root.mkdir()

    _every_command(out, specs, ("--server", by_creds.url, "--creds", str(operator.creds)), "creds")
    _every_command(out, specs, ("--server", by_nkey.url, "--nkey", str(seed_file)), "nkey")
    out.run(
        "creds wrong server",
        "--debug",
        "plan",
        str(specs),
        "--server",
        by_nkey.url,
        "--creds",
        str(operator.creds),
    )

    assert out.leaks([seed, creds_seed, jwt]) == []
    assert any("SECURE" in text for _, text in out.texts), "the commands did run"
    figures.add("outputs_grepped", len(out.texts) + len(out.files()))


def test_the_action_never_shows_the_password_in_summary_outputs_logs_or_comments(
    server_factory, tmp_path: Path, figures
) -> None:
    server = server_factory(users=[{"user": "deployer", "password": PASSWORD}])
    specs = _specs(tmp_path)
    host = server.url.removeprefix("nats://")
    texts: list[tuple[str, str]] = []
    with _GitHubStandIn() as github:
        for mode in ("plan", "apply", "drift"):
            for url in (
                f"nats://deployer:{PASSWORD}@{host}",
                f"nats://deployer:{PASSWORD}@127.0.0.1:1",
            ):
                root = tmp_path / f"{mode}-{len(texts)}"
                texts += _action_step(root, specs, github, mode=mode, server=url, comment="true")
        texts += [(f"PR comment {i}", body) for i, body in enumerate(github.bodies)]

    # `::add-mask::SECRET` is how a step asks the runner to mask a value: the runner
    # consumes that line and never shows it; every other line must be clean.
    shown = [(where, _without_mask_commands(text)) for where, text in texts]
    leaks = [where for where, text in shown if PASSWORD in text or GITHUB_TOKEN in text]
    assert leaks == []
    assert any(f"::add-mask::{PASSWORD}" in text for _, text in texts), "the secret was masked"
    assert len(github.bodies) == 6, "every step commented"
    assert any("SECURE" in body for body in github.bodies), "the comments hold the plan"
    figures.add("outputs_grepped", len(texts))


GITHUB_TOKEN = "ghs_standin-token-never-print-me"


class _GitHubStandIn:
    """A loopback stand-in for the GitHub REST API: records every comment body posted."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.bodies: list[str] = []
        bodies = self.bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return None

            def _reply(self, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(200 if self.command == "GET" else 201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._reply([])  # no earlier comment: every step posts a new one

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                bodies.append(json.loads(self.rfile.read(length))["body"])
                self._reply({"id": len(bodies), "html_url": f"http://stand-in/{len(bodies)}"})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> _GitHubStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _without_mask_commands(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("::add-mask::"))


def _action_step(
    root: Path, specs: Path, github: _GitHubStandIn, **inputs: str
) -> list[tuple[str, str]]:
    root.mkdir(parents=True)
    files = {name: root / name for name in ("summary.md", "output.txt", "env.txt")}
    event = root / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    for path in files.values():
        path.write_text("")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "GITHUB_STEP_SUMMARY": str(files["summary.md"]),
        "GITHUB_OUTPUT": str(files["output.txt"]),
        "GITHUB_ENV": str(files["env.txt"]),
        "GITHUB_WORKSPACE": str(specs.parent),
        "RUNNER_TEMP": str(root / "tmp"),
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": "acme/streams",
        "GITHUB_API_URL": github.url,
        "GITHUB_TOKEN": GITHUB_TOKEN,
        "INPUT_PATH": str(specs),
        **{f"INPUT_{k.upper()}": v for k, v in inputs.items()},
    }
    done = subprocess.run(
        [sys.executable, "-m", "action"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=root,
        check=False,
    )
    texts = [("action stdout", done.stdout), ("action stderr", done.stderr)]
    for path in sorted(root.rglob("*")):
        if path.is_file():
            texts.append((str(path), path.read_text(errors="replace")))
    return texts
