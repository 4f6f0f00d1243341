"""Which server a plan was made against, as far as a client can tell: what a saved plan
records and what ``apply FILE`` compares (docs/saved-plans.md).

A client sees the server's name and id and its cluster's name (the INFO a server sends
on connect), the JetStream domain, and the account the connection is bound to
(``$SYS.REQ.USER.INFO``, when the server answers it). The id is new at every start of a
server, and so is the name of a server configured without ``server_name``; a cluster is
one server to a plan whichever node answers. Two servers may still share all of these
(both named ``nats``, a common default), so the account also holds a lineage: a random
value the tool writes once (:mod:`reconciler.execution.lineage`), the same on every node
of a cluster, never on another server. So two servers are the same when their cluster
names match (both clustered) or their names match (neither), and their domain, account
and lineage match. The version is recorded, never compared: an upgrade is not another
server, and a re-plan on the new version must still equal the saved one.

:class:`Seat` adds the user the connection is bound to, told but not compared: two
connections in one seat write in one account of one server (or cluster), whoever the
user (``reconcile watch`` in heal mode refuses two environments in one seat:
docs/agent.md#many-environments). A stream belongs to its account; a user is one set of
credentials into it, which may write every stream the account holds.

Pure: facts in, sentences out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Seat", "ServerIdentity"]


@dataclass(frozen=True)
class ServerIdentity:
    """What identifies a server (and the account on it) to a client."""

    name: str | None = None
    server_id: str | None = None
    cluster: str | None = None
    domain: str | None = None
    account: str | None = None
    version: str | None = None
    #: The account's lineage (None: it has none), written once by the tool.
    lineage: str | None = None

    @property
    def compared(self) -> dict[str, str | None]:
        """The facts that must match: the cluster (or the server when not clustered),
        the domain, the account, the account's lineage."""
        where = {"cluster": self.cluster} if self.cluster else {"server name": self.name}
        return {**where, "domain": self.domain, "account": self.account, "lineage": self.lineage}

    def differences(self, now: ServerIdentity) -> list[str]:
        """How the server ``now`` differs from this one: one sentence per fact, none
        when it is the same server. Lineages always (a server of the same name with
        another lineage is another server, whatever else it shares)."""
        before, after = self.compared, now.compared
        lineage = [] if self.lineage == now.lineage else [self._lineage(now)]
        if before.keys() != after.keys():
            return [f"clustered: {self._where()}, now: {now._where()}", *lineage]
        return [
            f"{fact}: {_shown(before[fact])}, now {_shown(after[fact])}"
            for fact in before
            if before[fact] != after[fact] and fact != "lineage"
        ] + lineage

    def same_account(self, other: ServerIdentity) -> bool | None:
        """Whether both are one account of one server (or cluster): None when the facts
        cannot tell (an account unknown; two nodes' ids differ and no lineage to compare).
        One server id is one server process; else the rule of :meth:`differences`, which
        needs the lineages (server names alone are often equal: ``nats``)."""
        if self.account is None or other.account is None:
            return None
        if (self.domain, self.account) != (other.domain, other.account):
            return False
        if self.server_id is not None and self.server_id == other.server_id:
            return True
        if self.lineage is None or other.lineage is None:
            return None
        return not self.differences(other)

    def _lineage(self, now: ServerIdentity) -> str:
        found = (
            _shown(now.lineage)
            if now.lineage is not None
            else "none (a server this tool never planned a saved plan on nor applied to)"
        )
        return f"lineage: {_shown(self.lineage)} on {self._where()}, now {found} on {now._where()}"

    def _where(self) -> str:
        return f"cluster {_shown(self.cluster)}" if self.cluster else f"server {_shown(self.name)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "server_id": self.server_id,
            "cluster": self.cluster,
            "domain": self.domain,
            "account": self.account,
            "version": self.version,
            "lineage": self.lineage,
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
            lineage=text("lineage"),
        )


@dataclass(frozen=True)
class Seat:
    """Where a connection writes and as whom: the server's identity (its account
    included) and the user the server says the connection is bound to ("" without
    authentication; None: not told). The user is not part of the seat: two users of
    one account write the same streams (JetStream's resources are the account's)."""

    server: ServerIdentity
    user: str | None = None

    def same_as(self, other: Seat) -> bool | None:
        """One account of one server (or cluster), whoever the users: True; False: not;
        None: the facts cannot tell (:meth:`ServerIdentity.same_account`: an account
        unknown, two servers told apart by nothing)."""
        return self.server.same_account(other.server)


#: How much of a fact a sentence quotes (the file and the server's answers may have been
#: written by someone else: escaped by ``repr``, never echoed whole).
SHOWN = 80


def _shown(value: str | None) -> str:
    if value is None:
        return "unknown"
    return repr(value) if len(value) <= SHOWN else f"{value[:SHOWN]!r}… ({len(value):,} characters)"
