"""Credentials for test servers: a TLS CA with server and client certificates, nkeys, and
an operator with an account and a user (JWT auth), all made on the fly in a temp folder."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a throw-away CA, a server certificate for 127.0.0.1 and a client one."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls(directory: Path) -> TlsFiles:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate (PEM)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    builder = x509.CertificateBuilder().issuer_name(name("test-ca"))
    builder = builder.not_valid_before(now - datetime.timedelta(minutes=5))
    builder = builder.not_valid_after(now + datetime.timedelta(days=1))
    ca_cert = (
        builder.subject_name(name("test-ca"))
        .serial_number(1)
        .public_key(ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(common: str, usage: x509.ObjectIdentifier, serial: int) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        alt = x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        )
        cert = (
            builder.subject_name(name(common))
            .serial_number(serial)
            .public_key(key.public_key())
            .add_extension(alt, critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        cert_path = directory / f"{common}.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cert_path, write_key(key, directory / f"{common}-key.pem")

    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    server_cert, server_key = leaf("server", ExtendedKeyUsageOID.SERVER_AUTH, 2)
    client_cert, client_key = leaf("client", ExtendedKeyUsageOID.CLIENT_AUTH, 3)
    return TlsFiles(ca_path, server_cert, server_key, client_cert, client_key)


def make_nkey(prefix: str = "user") -> tuple[str, str]:
    """A new nkey pair ``(public key, seed)``; needs the ``nkeys`` package."""
    import nkeys

    byte = {
        "user": nkeys.PREFIX_BYTE_USER,
        "account": nkeys.PREFIX_BYTE_ACCOUNT,
        "operator": nkeys.PREFIX_BYTE_OPERATOR,
    }[prefix]
    seed = nkeys.encode_seed(os.urandom(32), byte)
    pair = nkeys.from_seed(bytearray(seed))
    return pair.public_key.decode(), seed.decode()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(claims: dict[str, Any], *, subject: str, issuer_seed: str, name: str) -> str:
    """A NATS JWT (ed25519-nkey) for ``subject`` signed by the issuer's seed."""
    import nkeys

    signer = nkeys.from_seed(bytearray(issuer_seed.encode()))
    body = {
        "iat": int(time.time()),
        "iss": signer.public_key.decode(),
        "name": name,
        "sub": subject,
        "nats": {**claims, "version": 2},
    }
    body["jti"] = base64.b32encode(hashlib.sha256(json.dumps(body).encode()).digest()).decode()
    header = _b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = _b64url(json.dumps(body).encode())
    signature = _b64url(signer.sign(f"{header}.{payload}".encode()))
    return f"{header}.{payload}.{signature}"


@dataclass(frozen=True)
class OperatorSetup:
    """Decentralised auth: server settings (operator, preloaded account) and a user .creds."""

    settings: dict[str, Any]
    creds: Path


def make_operator(directory: Path) -> OperatorSetup:
    """An operator, one JetStream-enabled account and a user with a .creds file."""
    directory.mkdir(parents=True, exist_ok=True)
    op_pub, op_seed = make_nkey("operator")
    acc_pub, acc_seed = make_nkey("account")
    sys_pub, _ = make_nkey("account")
    user_pub, user_seed = make_nkey("user")
    unlimited = {k: -1 for k in ("subs", "data", "payload", "imports", "exports", "conn")}
    js_limits = {k: -1 for k in ("mem_storage", "disk_storage", "streams", "consumer")}
    operator = _jwt({"type": "operator"}, subject=op_pub, issuer_seed=op_seed, name="op")
    account = _jwt(
        {"type": "account", "limits": {**unlimited, **js_limits, "wildcards": True}},
        subject=acc_pub,
        issuer_seed=op_seed,
        name="app",
    )
    system = _jwt(
        {"type": "account", "limits": unlimited}, subject=sys_pub, issuer_seed=op_seed, name="SYS"
    )
    user = _jwt(
        {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1},
        subject=user_pub,
        issuer_seed=acc_seed,
        name="deployer",
    )
    creds = directory / "user.creds"
    creds.write_text(
        f"-----BEGIN NATS USER JWT-----\n{user}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user_seed}\n------END USER NKEY SEED------\n"
    )
    settings = {
        "operator": operator,
        "system_account": sys_pub,
        "resolver": "MEMORY",
        "resolver_preload": {acc_pub: account, sys_pub: system},
    }
    return OperatorSetup(settings=settings, creds=creds)
