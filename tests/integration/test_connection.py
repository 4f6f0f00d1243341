"""Connecting: auth methods, TLS, unreachable servers, nats contexts, CLI flags, secrecy."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from credentials import make_nkey, make_operator, make_tls
from servers import NatsServer, run, unused_port

from reconciler.cli.options import connection_options, to_connection_options
from reconciler.errors import ConnectError
from reconciler.jetstream import ConnectionOptions, load_context, open_client, redact_url

Factory = Callable[..., NatsServer]


def stream_names(options: ConnectionOptions) -> list[str]:
    async def go() -> list[str]:
        async with open_client(options) as client:
            return await client.stream_names()

    return run(go())


def connect_error(options: ConnectionOptions) -> str:
    with pytest.raises(ConnectError) as failure:
        stream_names(options)
    return str(failure.value)


def test_user_and_password(server_factory: Factory) -> None:
    server = server_factory(users=[{"user": "deployer", "password": "hunter2-pw"}])
    good = ConnectionOptions(servers=server.url, user="deployer", password="hunter2-pw")
    assert stream_names(good) == []
    message = connect_error(ConnectionOptions(servers=server.url, user="deployer", password="no"))
    assert "authorization violation" in message and "check credentials" in message
    assert "hunter2-pw" not in message


def test_credentials_in_the_url_are_masked(server_factory: Factory) -> None:
    server = server_factory(users=[{"user": "deployer", "password": "right-pw"}])
    url = f"nats://deployer:wrong-pw@127.0.0.1:{server.port}"
    message = connect_error(ConnectionOptions(servers=url))
    assert "wrong-pw" not in message and "deployer:***@" in message
    assert redact_url("nats://s3cr3t-token@127.0.0.1:4222") == "nats://***@127.0.0.1:4222"


def test_token(server_factory: Factory) -> None:
    server = server_factory(token="t0ken-value")
    assert stream_names(ConnectionOptions(servers=server.url, token="t0ken-value")) == []
    message = connect_error(ConnectionOptions(servers=server.url, token="other-token"))
    assert "authorization violation" in message and "other-token" not in message


def test_nkey_seed_file(server_factory: Factory, tmp_path: Path) -> None:
    pytest.importorskip("nkeys")
    public, seed = make_nkey()
    seed_file = tmp_path / "user.nk"
    seed_file.write_text(seed)
    server = server_factory(config={"authorization": {"users": [{"nkey": public}]}})
    assert stream_names(ConnectionOptions(servers=server.url, nkey=str(seed_file))) == []
    _, other_seed = make_nkey()
    seed_file.write_text(other_seed)
    message = connect_error(ConnectionOptions(servers=server.url, nkey=str(seed_file)))
    assert "authorization violation" in message and other_seed not in message


def test_creds_file_in_operator_mode(server_factory: Factory, tmp_path: Path) -> None:
    pytest.importorskip("nkeys")
    operator = make_operator(tmp_path / "op")
    server = server_factory(config=operator.settings)
    assert stream_names(ConnectionOptions(servers=server.url, creds=str(operator.creds))) == []
    assert "authorization violation" in connect_error(ConnectionOptions(servers=server.url))


def test_missing_credentials_file_is_a_connect_error(tmp_path: Path) -> None:
    options = ConnectionOptions(servers="nats://127.0.0.1:1", creds=str(tmp_path / "x.creds"))
    assert "credentials file not found" in connect_error(options)


def test_tls_with_client_certificate(server_factory: Factory, tmp_path: Path) -> None:
    tls = make_tls(tmp_path / "tls")
    server = server_factory(tls=tls, verify_clients=True)
    options = ConnectionOptions(
        servers=server.url,
        tls_ca=str(tls.ca),
        tls_cert=str(tls.client_cert),
        tls_key=str(tls.client_key),
    )
    assert stream_names(options) == []
    without_ca = connect_error(ConnectionOptions(servers=server.url))
    assert "TLS handshake" in without_ca and "CERTIFICATE_VERIFY_FAILED" in without_ca


@pytest.mark.timeout(30)
def test_refused_connection_fails_with_a_clear_message() -> None:
    url = f"nats://127.0.0.1:{unused_port()}"
    message = connect_error(ConnectionOptions(servers=url, connect_timeout=2))
    assert message == f"cannot connect to {url}: connection refused"


@pytest.mark.timeout(30)
def test_hung_server_fails_within_the_connect_timeout(server_factory: Factory) -> None:
    server = server_factory()
    server.pause()
    try:
        message = connect_error(ConnectionOptions(servers=server.url, connect_timeout=0.5))
    finally:
        server.resume()
    assert message == f"cannot connect to {server.url}: no answer within 0.5s"


def test_second_url_is_tried_when_the_first_is_down(server_factory: Factory) -> None:
    server = server_factory()
    urls = f"nats://127.0.0.1:{unused_port()},{server.url}"
    assert stream_names(ConnectionOptions(servers=urls)) == []


def test_repr_never_shows_secrets() -> None:
    options = ConnectionOptions(
        servers="nats://me:pw-in-url@127.0.0.1:4222", user="me", password="pw", token="tok"
    )
    shown = repr(options) + str(options)
    assert "pw-in-url" not in shown and "'pw'" not in shown and "tok'" not in shown
    assert "password='***'" in shown and "me:***@" in shown


def test_is_configured_only_when_something_points_at_a_server() -> None:
    assert not ConnectionOptions().is_configured
    assert not ConnectionOptions(domain="hub", timeout=3).is_configured
    assert ConnectionOptions(servers="nats://127.0.0.1:4222").is_configured
    assert ConnectionOptions(context="prod").is_configured
    assert ConnectionOptions(creds="/x.creds").is_configured


def write_context(directory: Path, name: str, **fields: str) -> None:
    folder = directory / "nats" / "context"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({"description": "test", **fields}))


def test_context_file_resolution(
    server_factory: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = server_factory(users=[{"user": "ctx", "password": "ctx-pw"}], domain="hub")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("CREDS_DIR", "/secret")
    write_context(
        tmp_path,
        "staging",
        url=server.url,
        user="ctx",
        password="ctx-pw",
        jetstream_domain="hub",
        creds="$CREDS_DIR/app.creds",
    )
    loaded = load_context("staging")
    assert loaded.creds == "/secret/app.creds"
    assert "ctx-pw" not in repr(loaded)
    options = ConnectionOptions(context="staging").with_context()
    assert (options.servers, options.user, options.domain) == (server.url, "ctx", "hub")
    explicit = ConnectionOptions(context="staging", user="other").with_context()
    assert explicit.user == "other"  # explicit flags win over the context

    write_context(tmp_path, "app", url=server.url, user="ctx", password="ctx-pw")
    assert stream_names(ConnectionOptions(context="app", domain="hub")) == []
    assert "unknown nats context 'nope'" in connect_error(ConnectionOptions(context="nope"))


def test_cli_flags_and_environment_become_connection_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[ConnectionOptions] = []

    @click.command()
    @connection_options
    def probe(**conn: Any) -> None:
        seen.append(to_connection_options(conn))

    runner = CliRunner()
    env = {"NATS_URL": "nats://127.0.0.1:4333", "NATS_PASSWORD": "env-pw", "NATS_TOKEN": None}
    result = runner.invoke(probe, ["--user", "u", "--domain", "hub", "--timeout", "2"], env=env)
    assert result.exit_code == 0, result.output
    options = seen[-1]
    assert (options.servers, options.user, options.password) == (
        "nats://127.0.0.1:4333",
        "u",
        "env-pw",
    )
    assert (options.domain, options.timeout, options.store) == ("hub", 2.0, Path(".reconcile"))

    clean = {"NATS_URL": None, "NATS_PASSWORD": None, "NATS_TOKEN": None, "NATS_CONTEXT": None}
    result = runner.invoke(probe, ["--store", str(tmp_path / "st")], env=clean)
    assert result.exit_code == 0, result.output
    assert not seen[-1].is_configured and seen[-1].store == tmp_path / "st"
    assert "--server" in runner.invoke(probe, ["--help"]).output


def test_bad_context_files_are_connect_errors(tmp_path: Path) -> None:
    folder = tmp_path / "nats" / "context"
    folder.mkdir(parents=True)
    (folder / "broken.json").write_text("{not json")
    (folder / "list.json").write_text("[]")
    with pytest.raises(ConnectError, match="cannot read nats context"):
        load_context("broken", directory=folder)
    with pytest.raises(ConnectError, match="not a JSON object"):
        load_context("list", directory=folder)
    with pytest.raises(ConnectError, match="invalid nats context name"):
        load_context("../etc", directory=folder)
