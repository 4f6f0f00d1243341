"""``reconcile lock status`` and ``reconcile lock break``: the apply lock by hand.

Every ``reconcile apply`` holds a lease in the KeyValue bucket ``RECONCILE_LOCKS`` (key
``apply``) on the server while it runs. A crashed apply's lease expires by itself (30 s);
``reconcile lock break`` removes it at once (``--force`` when it has not expired yet).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import click

from reconciler.cli.options import connection_options, format_option, to_connection_options
from reconciler.cli.output import notice
from reconciler.model.values import inert_json, printable


@click.group()
def lock() -> None:
    """Inspect or break the lease lock that keeps two applies apart."""


@lock.command()
@format_option(["text", "json"], "lock's holder")
@connection_options
def status(fmt: str, **conn: Any) -> int:
    """Show who holds the apply lock (exit 0 when free, 2 when held)."""
    from reconciler.execution.stages import leases
    from reconciler.jetstream import open_client

    async def read() -> leases.Lease | None:
        async with open_client(to_connection_options(conn), on_notice=notice) as client:
            return await leases.read_lease(client)

    lease = asyncio.run(read())
    now = time.time()
    if fmt == "json":
        click.echo(inert_json(json.dumps(_as_json(lease, now), indent=2)))
    elif lease is None:
        click.echo(f"apply lock {_where()}: free")
    else:
        click.echo(printable(f"apply lock {_where()}: held by {lease.describe(now)}"))
    return 0 if lease is None else 2


@lock.command(name="break")
@click.option("--force", is_flag=True, help="Break the lock even if its lease has not expired.")
@connection_options
def break_(force: bool, **conn: Any) -> int:
    """Remove the apply lock's lease (a stale one, or any with --force)."""
    from reconciler.errors import LockError
    from reconciler.execution.stages import leases
    from reconciler.jetstream import open_client

    async def go() -> leases.Lease | None:
        async with open_client(to_connection_options(conn), on_notice=notice) as client:
            lease = await leases.read_lease(client)
            if lease is not None and not lease.expired(time.time()) and not force:
                raise LockError(
                    f"apply lock {_where()} is held by {lease.describe(time.time())}; "
                    "its lease has not expired: wait for it, or use --force if that run is gone"
                )
            return await leases.break_lock(client)

    broken = asyncio.run(go())
    if broken is None:
        click.echo(f"apply lock {_where()}: already free")
    else:
        said = f"apply lock {_where()}: removed the lease of {broken.describe(time.time())}"
        click.echo(printable(said))  # the holder's names come from the server: escaped
    return 0


def _where() -> str:
    from reconciler.execution.stages import leases
    from reconciler.identity import LOCK_BUCKET

    return f"{LOCK_BUCKET}/{leases.LOCK_KEY}"


def _as_json(lease: Any, now: float) -> dict[str, Any]:
    from reconciler.model.timestamps import rfc3339

    if lease is None:
        return {"held": False}
    holder = lease.holder
    return {
        "held": not lease.expired(now),
        "owner": holder.owner,
        "host": holder.host,
        "pid": holder.pid,
        "acquired_at": rfc3339(lease.acquired_at),
        "expires_at": rfc3339(lease.expires_at),
        "revision": lease.revision,
    }
