"""Which server a plan was made against, as far as a client can tell: what a saved plan
records and what ``apply FILE`` compares (docs/saved-plans.md).

A client sees the server's name and id and its cluster's name (the INFO a server sends
on connect), the JetStream domain, and the account the connection is bound to
(``$SYS.REQ.USER.INFO``, when the server answers it). The id is new at every start of a
server, and so is the name of a server configured without ``server_name``; a cluster is
one server to a plan whichever node answers. So two servers are the same when their
cluster names match (both clustered) or their names match (neither), and their domain
and account match. The version is recorded, never compared: an upgrade is not another
server, and a re-plan on the new version must still equal the saved one.

Pure: facts in, sentences out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ServerIdentity"]


@dataclass(frozen=True)
class ServerIdentity:
    """What identifies a server (and the account on it) to a client."""

    name: str | None = None
    server_id: str | None = None
    cluster: str | None = None
    domain: str | None = None
    account: str | None = None
    version: str | None = None

    @property
    def compared(self) -> dict[str, str | None]:
        """The facts that must match: the cluster (or the server when not clustered),
        the domain, the account."""
        where = {"cluster": self.cluster} if self.cluster else {"server name": self.name}
        return {**where, "domain": self.domain, "account": self.account}

    def differences(self, now: ServerIdentity) -> list[str]:
        """How the server ``now`` differs from this one: one sentence per fact, none
        when it is the same server."""
        before, after = self.compared, now.compared
        if before.keys() != after.keys():
            return [f"clustered: {self._where()}, now: {now._where()}"]
        return [
            f"{fact}: {_shown(before[fact])}, now {_shown(after[fact])}"
            for fact in before
            if before[fact] != after[fact]
        ]

    def _where(self) -> str:
        return f"cluster {self.cluster}" if self.cluster else f"server {_shown(self.name)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "server_id": self.server_id,
            "cluster": self.cluster,
            "domain": self.domain,
            "account": self.account,
            "version": self.version,
        }

    @classmethod
    def from_json(cls, facts: Mapping[str, Any]) -> ServerIdentity:
        def text(key: str) -> str | None:
            value = facts.get(key)
            return str(value) if value not in (None, "") else None

        return cls(
            name=text("name"),
            server_id=text("server_id"),
            cluster=text("cluster"),
            domain=text("domain"),
            account=text("account"),
            version=text("version"),
        )


def _shown(value: str | None) -> str:
    return repr(value) if value is not None else "unknown"
