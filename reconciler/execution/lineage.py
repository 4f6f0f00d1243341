"""The account's lineage: a random value the tool keeps in the account the first time it
manages it, which a saved plan is bound to (docs/saved-plans.md), as Terraform binds a
plan to its state's lineage.

Two servers may share every fact a client can see: the same ``server_name`` (``nats``, a
common default), no cluster, no domain, the same account name. A value written once into
the account tells them apart: it lives in the apply lock's bucket (the key
``RECONCILE_LOCKS/lineage``, next to the lease), so every node of one cluster reads the
same value (the bucket has three replicas there) and a server started afresh has none.

- ``plan --out`` reads it, and writes it when the account has none yet (a KeyValue
  *create*: of two runs writing at once, one value wins and both read it back), so the
  saved plan names a lineage the server it was made against holds;
- an apply under the lock writes it too when missing (:func:`keep_for_apply`), so an account the
  tool manages has one before anyone saves a plan with read-only credentials;
- ``apply FILE`` reads it (never writes it) and refuses a server whose lineage is
  another, or none.

Anyone with access to the account can read or write the key: the value only makes two
*different* servers distinguishable, it is no secret and no authentication. Read back, it
is data someone else may have written: compared as text, shown escaped and cut short.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from reconciler.errors import NotFound, PermissionDenied, ReconcileError, ServerError
from reconciler.execution import lock
from reconciler.identity import LOCK_BUCKET
from reconciler.jetstream import JetStreamClient

#: The key of the lineage in the lock bucket (the lease is ``apply``).
LINEAGE_KEY = "lineage"
#: How many characters of a value read back are kept (someone else may have written 1 MiB).
KEPT = 64


async def read(client: JetStreamClient) -> str | None:
    """The account's lineage (None: none yet, its bucket or its key missing or deleted)."""
    try:
        entry = await client.kv_get(LOCK_BUCKET, LINEAGE_KEY)
    except NotFound:
        return None
    if entry is None:
        return None
    text = entry.value.decode("utf-8", errors="replace").strip()
    return text[:KEPT] or None


async def keep(client: JetStreamClient) -> str:
    """The account's lineage, written first when it has none: the bucket made as the
    apply lock makes it (three replicas on a cluster), then a KeyValue create, so a
    lineage once written is never replaced (a run that loses the race reads the
    winner's)."""
    found = await read(client)
    if found is not None:
        return found
    info = await client.server_info()
    settings = lock.LockSettings(key=LINEAGE_KEY, replicas=lock.replicas_for(info.clustered))
    await lock.prepare(client, settings)
    try:
        await lock.create_first(client, settings, uuid.uuid4().hex.encode())
    except ServerError as err:
        if err.err_code != lock.WRONG_LAST_SEQUENCE:
            raise
    found = await read(client)
    if found is None:  # written and gone at once: someone deletes it as it is made
        raise ReconcileError(
            f"the account's lineage ({LOCK_BUCKET}/{LINEAGE_KEY}) was deleted as it was "
            "written: nothing was saved"
        )
    return found


async def keep_for_apply(client: JetStreamClient, notice: Callable[[str], None]) -> None:
    """:func:`keep`, for an apply that holds the lock: a user allowed the lease but not
    the lineage key is told, and the apply goes on (its saved plans will need a user
    who may write it, :func:`keep` says so then)."""
    try:
        await keep(client)
    except PermissionDenied as err:
        notice(f"could not keep the account's lineage ({LOCK_BUCKET}/{LINEAGE_KEY}): {err}")


__all__ = ["KEPT", "LINEAGE_KEY", "keep", "keep_for_apply", "read"]
