"""TLS for hetsched's HTTP servers and their clients (the standard library's ``ssl`` only).

Servers (``hetsched up``, ``hetsched federation up``, ``hetsched k8s extender``) take a
certificate chain and its key (``--tls-cert``, ``--tls-key``) and, optionally, a CA bundle
whose certificates every client must present (``--tls-client-ca``): :class:`ServerTls`
checks them at start, with one line naming the option at fault, and gives uvicorn its
arguments.

Clients (the CLI, a federation's member client, ``hetsched checkpoint`` in a task) verify
the server with a CA bundle: :func:`client_verify` builds the context from a file
(``--cacert``, ``HETSCHED_CA``), from PEM text (``HETSCHED_CA_PEM``: what a task on another
machine is given, so no file need be copied there) or, with neither, the system's trust
store; a client certificate comes from ``HETSCHED_CLIENT_CERT`` and ``HETSCHED_CLIENT_KEY``.
:func:`explain` turns a failed handshake into one line that says what to do.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CA_ENV",
    "CA_PEM_ENV",
    "CLIENT_CERT_ENV",
    "CLIENT_KEY_ENV",
    "ServerTls",
    "TlsError",
    "client_verify",
    "explain",
    "server_tls",
]

#: a CA bundle file the client verifies servers with
CA_ENV = "HETSCHED_CA"
#: the same as PEM text (what tasks are given)
CA_PEM_ENV = "HETSCHED_CA_PEM"
#: the client's certificate chain and key, for servers that ask for one
CLIENT_CERT_ENV = "HETSCHED_CLIENT_CERT"
CLIENT_KEY_ENV = "HETSCHED_CLIENT_KEY"


class TlsError(ValueError):
    """A certificate, key or CA bundle that cannot be used; the message names the option."""


def _not_after(path: Path) -> float | None:
    """When the first certificate of a PEM file expires (seconds since the epoch); None
    when the interpreter cannot say."""
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    try:
        info: Mapping[str, Any] = decode(str(path))
    except (ssl.SSLError, OSError, ValueError):
        return None
    stamp = info.get("notAfter")
    return float(ssl.cert_time_to_seconds(stamp)) if isinstance(stamp, str) else None


def _readable(path: Path, option: str) -> None:
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise TlsError(f"{option}: cannot read {path}: {exc.strerror}") from None


def _load_chain(context: ssl.SSLContext, cert: Path, key: Path, options: tuple[str, str]) -> None:
    """``cert`` and ``key`` into ``context``; TlsError naming ``options`` when they do not
    load (not PEM, a key of another certificate, a key with a passphrase)."""
    cert_option, key_option = options
    _readable(cert, cert_option)
    _readable(key, key_option)
    try:
        context.load_cert_chain(cert, key, password=lambda: b"")
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise TlsError(
                f"{key_option}: {key} is not the key of {cert} ({cert_option})"
            ) from None
        raise TlsError(
            f"{cert_option}/{key_option}: cannot load {cert} with {key} ({exc.reason or exc}); "
            "expected a PEM certificate chain and its unencrypted PEM key"
        ) from None


def _load_ca(context: ssl.SSLContext, path: Path, option: str) -> None:
    _readable(path, option)
    try:
        context.load_verify_locations(cafile=str(path))
    except ssl.SSLError as exc:
        raise TlsError(f"{option}: {path} is not a PEM CA bundle ({exc.reason or exc})") from None


@dataclass(frozen=True)
class ServerTls:
    """A server's certificate chain and key, and the CA its clients' certificates must be
    signed by (None: no client certificate asked for)."""

    cert: Path
    key: Path
    client_ca: Path | None = None
    #: the options these came from, for messages
    prefix: str = "--tls"

    def check(self, now: float | None = None) -> None:
        """Load everything once, so a bad file stops the start with one line (TlsError)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        _load_chain(context, self.cert, self.key, (f"{self.prefix}-cert", f"{self.prefix}-key"))
        expires = _not_after(self.cert)
        if expires is not None and expires <= (time.time() if now is None else now):
            raise TlsError(
                f"{self.prefix}-cert: {self.cert} expired on "
                f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(expires))}; "
                "renew it and start again"
            )
        if self.client_ca is not None:
            _load_ca(context, self.client_ca, f"{self.prefix}-client-ca")

    def uvicorn(self) -> dict[str, Any]:
        """uvicorn.Config's TLS arguments."""
        out: dict[str, Any] = {"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)}
        if self.client_ca is not None:
            out["ssl_ca_certs"] = str(self.client_ca)
            out["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        return out


def server_tls(
    cert: Path | None, key: Path | None, client_ca: Path | None = None, prefix: str = "--tls"
) -> ServerTls | None:
    """The server's TLS from its options, checked (TlsError); None without a certificate."""
    if cert is None and key is None:
        if client_ca is not None:
            raise TlsError(f"{prefix}-client-ca needs {prefix}-cert and {prefix}-key")
        return None
    if cert is None or key is None:
        given, missing = ("cert", "key") if key is None else ("key", "cert")
        raise TlsError(f"{prefix}-{given} needs {prefix}-{missing}")
    tls = ServerTls(cert, key, client_ca, prefix)
    tls.check()
    return tls


def client_verify(
    ca: Path | None = None,
    cert: Path | None = None,
    key: Path | None = None,
    env: Mapping[str, str] | None = None,
    names: tuple[str, str, str] = ("--cacert", "--client-cert", "--client-key"),
) -> ssl.SSLContext:
    """The context a client verifies servers with: ``ca`` (else ``HETSCHED_CA``, else
    ``HETSCHED_CA_PEM``, else the system's trust store), with the client certificate
    ``cert``/``key`` (else ``HETSCHED_CLIENT_CERT``/``HETSCHED_CLIENT_KEY``) when given.
    TlsError names the option (``names``: of ``ca``, ``cert``, ``key``) or variable at
    fault."""
    env = os.environ if env is None else env
    context = ssl.create_default_context()
    if ca is not None:
        _load_ca(context, ca, names[0])
    elif env.get(CA_ENV):
        _load_ca(context, Path(env[CA_ENV]), CA_ENV)
    elif env.get(CA_PEM_ENV):
        try:
            context.load_verify_locations(cadata=env[CA_PEM_ENV])
        except (ssl.SSLError, ValueError) as exc:
            raise TlsError(f"{CA_PEM_ENV}: not a PEM CA bundle ({exc})") from None
    if cert is None and env.get(CLIENT_CERT_ENV):
        cert = Path(env[CLIENT_CERT_ENV])
        key = Path(env[CLIENT_KEY_ENV]) if env.get(CLIENT_KEY_ENV) else None
        options = (CLIENT_CERT_ENV, CLIENT_KEY_ENV)
    else:
        options = names[1:]
    if cert is not None:
        if key is None:
            raise TlsError(f"{options[0]} needs {options[1]}")
        _load_chain(context, cert, key, options)
    return context


#: OpenSSL's verification codes, as a user would say them
_VERIFY = {
    10: "its certificate has expired",
    9: "its certificate is not valid yet (check the clocks)",
    18: "its certificate is self-signed and not in the CA bundle",
    19: "its certificate is not signed by a CA in the CA bundle",
    20: "its certificate is not signed by a CA in the CA bundle",
    21: "its certificate is not signed by a CA in the CA bundle",
    62: "its certificate is not for this host name or address",
}


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(out) < 10:
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def explain(
    exc: BaseException,
    url: str,
    ca_hint: str = f"--cacert FILE or {CA_ENV}",
    cert_hint: str = f"{CLIENT_CERT_ENV}, {CLIENT_KEY_ENV}",
) -> str | None:
    """One line for a request to ``url`` that failed because of TLS (None: not TLS): a
    server certificate the CA bundle does not trust or that has expired, a server that does
    not speak TLS, or one that hung up after the handshake (it asks for a client
    certificate). ``exc`` is what the HTTP client raised; the hints say where the CA
    bundle and the client certificate are given."""
    chain = _chain(exc)
    for item in chain:
        if isinstance(item, ssl.SSLCertVerificationError):
            why = _VERIFY.get(item.verify_code or 0, item.verify_message or str(item))
            return f"TLS: {url} refused: {why}; verify with the CA that signed it ({ca_hint})"
    text = " ".join(str(item) for item in chain)
    if "WRONG_VERSION_NUMBER" in text or "record layer failure" in text:
        return f"TLS: {url} does not speak TLS; use an http:// URL, or start it with --tls-cert"
    secure = url.startswith("https://")
    if "Server disconnected" in text or "alert" in text.lower():
        if secure:
            return (
                f"TLS: {url} closed the connection without answering: it may require a client "
                f"certificate signed by a CA it trusts ({cert_hint})"
            )
        return f"{url} closed the connection: if it serves TLS, use an https:// URL"
    if "CERTIFICATE" in text and secure:
        return f"TLS: {url}: {chain[-1]}"
    return None
