"""``reconcile server``: the embedded nats-server in the foreground, for local work.

It is the same server (same store, same state file) the other commands start when no
server is configured, so while it runs they reuse it instead of starting their own.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType

import click

from reconciler.cli.options import store_option


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@click.command()
@store_option
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=4222,
    show_default=True,
    help="Client port on 127.0.0.1 (0: any free port).",
)
def server(store: Path, port: int) -> int:
    """Run the embedded nats-server (JetStream on) until Ctrl-C."""
    from reconciler.errors import ConnectError
    from reconciler.jetstream.embedded import EmbeddedServer, greeting

    embedded = EmbeddedServer(store, port=port or None)
    url = embedded.acquire()
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        version = greeting(embedded.running.port)["version"] if embedded.running else "?"
        reused = "" if embedded.started else ", already running: reusing it"
        click.echo(f"embedded nats-server {version} at {url} (state in {store}/{reused})")
        click.echo("export NATS_URL=" + url + " to use it from other tools; Ctrl-C stops it")
        while embedded.alive():
            time.sleep(0.2)
        raise ConnectError(f"embedded nats-server stopped; see {embedded.log_file}")
    except KeyboardInterrupt:
        click.echo("stopping", err=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        embedded.release()
