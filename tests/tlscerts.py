"""Certificates the TLS tests make for themselves (the ``cryptography`` package): a CA, a
server certificate for 127.0.0.1 and localhost signed by it, client certificates, a second
CA nobody trusts, and an expired server certificate.

``make_pki(folder)`` writes them as PEM files and returns their paths; nothing is read from
or written to any place but ``folder``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Pki", "make_pki"]

_DAY = dt.timedelta(days=1)


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    #: a CA that signed nothing the servers present
    other_ca: Path
    #: a client certificate signed by ``other_ca``
    stranger_cert: Path
    stranger_key: Path
    #: a server certificate of ``ca`` whose validity ended yesterday
    expired_cert: Path
    expired_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _ca(common: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(_name(common))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + 30 * _DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    common: str,
    server: bool,
    expired: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = ca
    key = _key()
    now = dt.datetime.now(dt.UTC)
    start, end = (now - 10 * _DAY, now - _DAY) if expired else (now - _DAY, now + 30 * _DAY)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
    )
    if server:
        names: list[x509.GeneralName] = [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path


def make_pki(folder: Path) -> Pki:
    """A CA with a server and a client certificate, a stranger CA with a client
    certificate, and an expired server certificate, as PEM files under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca("hetsched test CA")
    other = _ca("a CA nobody trusts")
    server = _leaf(ca, "hetsched server", server=True)
    client = _leaf(ca, "federation", server=False)
    stranger = _leaf(other, "stranger", server=False)
    expired = _leaf(ca, "hetsched server (expired)", server=True, expired=True)
    return Pki(
        ca=_write_cert(folder / "ca.pem", ca[0]),
        server_cert=_write_cert(folder / "server.pem", server[0]),
        server_key=_write_key(folder / "server.key", server[1]),
        client_cert=_write_cert(folder / "client.pem", client[0]),
        client_key=_write_key(folder / "client.key", client[1]),
        other_ca=_write_cert(folder / "other-ca.pem", other[0]),
        stranger_cert=_write_cert(folder / "stranger.pem", stranger[0]),
        stranger_key=_write_key(folder / "stranger.key", stranger[1]),
        expired_cert=_write_cert(folder / "expired.pem", expired[0]),
        expired_key=_write_key(folder / "expired.key", expired[1]),
    )
