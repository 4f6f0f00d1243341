"""Where the provider finds its server: resource input, stack config, NATS_URL, or an error."""

from __future__ import annotations

import pytest
from pulumi.dynamic import Config

from pulumi_provider.connection import (
    lock_timeout,
    public_connection,
    resolve_connection,
    stack_connection,
    stack_lock_timeout,
    unknown_connection_fields,
)
from reconciler.errors import ConnectError, ReconcileError


def test_resource_input_wins_field_by_field_over_stack_config() -> None:
    stack = {"servers": "nats://stack:4222", "user": "stack-user", "password": "stack-pw"}
    options = resolve_connection({"servers": "nats://input:4222"}, stack, environ={})
    assert options.servers == "nats://input:4222"
    assert (options.user, options.password) == ("stack-user", "stack-pw")


def test_nats_url_is_the_last_fallback() -> None:
    options = resolve_connection(None, {}, environ={"NATS_URL": "nats://env:4222"})
    assert options.servers == "nats://env:4222"


def test_stack_config_beats_nats_url() -> None:
    options = resolve_connection(
        None, {"servers": "nats://stack:4222"}, environ={"NATS_URL": "nats://env:4222"}
    )
    assert options.servers == "nats://stack:4222"


def test_no_server_anywhere_is_a_clear_error_not_the_embedded_server() -> None:
    with pytest.raises(ConnectError, match="jetstream:servers"):
        resolve_connection(None, {"user": "app"}, environ={})


def test_a_list_of_servers_becomes_the_comma_separated_form() -> None:
    options = resolve_connection({"servers": ["nats://a:4222", "nats://b:4222"]}, environ={})
    assert options.servers == "nats://a:4222,nats://b:4222"


def test_stack_config_reads_the_jetstream_namespace_in_both_spellings() -> None:
    config = Config(
        raw_config={
            "jetstream:servers": "nats://stack:4222",
            "jetstream:tlsCa": "/etc/ca.pem",
            "jetstream:creds": "/etc/app.creds",
            "other:servers": "nats://not-this:4222",
        },
        project_name="example",
    )
    assert stack_connection(config) == {
        "servers": "nats://stack:4222",
        "tls_ca": "/etc/ca.pem",
        "creds": "/etc/app.creds",
    }


def test_public_connection_drops_every_credential() -> None:
    connection = {
        "servers": "nats://h:4222",
        "user": "app",
        "password": "pw",
        "token": "tok",
        "creds": "/a.creds",
        "nkey": "/a.nk",
        "tls_ca": "/ca.pem",
    }
    assert public_connection(connection) == {
        "servers": "nats://h:4222",
        "user": "app",
        "tls_ca": "/ca.pem",
    }


def test_misspelt_connection_fields_are_reported() -> None:
    assert unknown_connection_fields({"server": "x", "servers": "y"}) == ["server"]


def test_connection_options_never_show_the_password() -> None:
    options = resolve_connection({"servers": "nats://h:4222", "password": "pw-123"}, environ={})
    assert "pw-123" not in repr(options)


def test_the_lock_wait_comes_from_the_stack_then_the_environment_then_the_cli_default() -> None:
    environ = {"RECONCILE_LOCK_TIMEOUT": "2m"}
    assert lock_timeout(stack_lock_timeout({"jetstream:lockTimeout": "5"}), 60.0, environ) == 5.0
    assert lock_timeout(stack_lock_timeout({"jetstream:lock_timeout": "1.5"}), 60.0) == 1.5
    assert lock_timeout(stack_lock_timeout({}), 60.0, environ) == 120.0
    assert lock_timeout(None, 60.0, {}) == 60.0


@pytest.mark.parametrize("written", ["-1", "soon", "nan", "inf"])
def test_a_lock_wait_that_is_not_a_time_is_an_error_naming_where_it_was_set(
    written: str,
) -> None:
    with pytest.raises(ReconcileError, match="jetstream:lockTimeout"):
        lock_timeout(written, 60.0, {})
    with pytest.raises(ReconcileError, match="RECONCILE_LOCK_TIMEOUT"):
        lock_timeout(None, 60.0, {"RECONCILE_LOCK_TIMEOUT": written})
