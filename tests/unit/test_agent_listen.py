"""`reconcile watch --listen`: an address other machines can reach is said in the log
(the endpoints have no authentication and /status names who changed what)."""

from __future__ import annotations

from reconciler.agent.http import exposure


def test_a_listen_address_reachable_from_elsewhere_is_said() -> None:
    for host in ("0.0.0.0", "::", "[::]", "10.0.0.7", "agent.example"):
        said = exposure(host)
        assert said is not None and host in said and "/status" in said
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert exposure(host) is None
