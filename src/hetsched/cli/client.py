"""The CLI's HTTP client: ``HETSCHED_URL`` and ``HETSCHED_TOKEN``, errors as one line.

An ``https://`` URL is verified with the CA bundle of ``--cacert`` or ``HETSCHED_CA`` (else
the system's trust store); a client certificate comes from ``HETSCHED_CLIENT_CERT`` and
``HETSCHED_CLIENT_KEY`` (see :mod:`hetsched.tls`)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx

from hetsched.cli.output import INVALID_INPUT, fail
from hetsched.tls import TlsError, client_verify, explain

__all__ = ["Client", "auth_error", "call", "default_url", "default_urls", "error_line", "get"]

_DEFAULT_URL = "http://127.0.0.1:8780"
#: answers that name the leader of a standby pair (controlplane/api/standby.py)
_LEADER = "X-Hetsched-Leader"
_ROLE = "X-Hetsched-Role"


def default_urls() -> list[str]:
    """``HETSCHED_URL``: the service's URL, or the URLs of a standby pair, comma-separated
    (the first is asked first; the one that answers as the leader is kept)."""
    raw = os.environ.get("HETSCHED_URL", _DEFAULT_URL)
    return [u.strip().rstrip("/") for u in raw.split(",") if u.strip()] or [_DEFAULT_URL]


def default_url() -> str:
    return default_urls()[0]


def _admin_token_file() -> Path:
    """Where `hetsched up` writes the admin token (its default home)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(base) / "hetsched" / "admin.token"


def _default_token() -> tuple[str | None, str]:
    """The token and where it came from (for the error that says it was refused)."""
    token = os.environ.get("HETSCHED_TOKEN")
    if token:
        return token.strip(), "HETSCHED_TOKEN"
    # a local admin may use the token `hetsched up` wrote for them
    path = _admin_token_file()
    try:
        return path.read_text().strip() or None, str(path)
    except OSError:
        return None, ""


def auth_error(source: str, url: str) -> str:
    """What a 401 means for this command: the token it sent was refused (say which one), or
    it had none (say where tokens come from)."""
    if source:
        return (
            f"token refused: the token from {source} is unknown to {url} or revoked "
            "(an admin lists tokens with `hetsched token list` and issues one with "
            "`hetsched token create --user NAME`)"
        )
    return (
        f"no token: set HETSCHED_TOKEN, or run this on the machine of `hetsched up`, whose "
        f"admin token the CLI reads from {_admin_token_file()} (an admin issues tokens with "
        "`hetsched token create --user NAME`)"
    )


class Client:
    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        self.urls = [url.rstrip("/")] if url else default_urls()
        self.url = self.urls[0]
        headers = {}
        source = "the command"
        if token is None:
            token, source = _default_token()
        self.token_source = source if token else ""
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            verify = client_verify()
        except TlsError as exc:
            fail(str(exc), 2)
        self.http = httpx.Client(headers=headers, timeout=30.0, verify=verify)

    def request(self, method: str, path: str, retries: int = 0, **kwargs: Any) -> Any:
        """The decoded JSON answer; any error ends the command with one clear line.

        ``retries`` retries connection failures (safe only for idempotent requests)."""
        return self._send(method, path, retries, **kwargs).json()

    def page(self, path: str, **params: Any) -> tuple[Any, str | None]:
        """One page of a listing and the cursor of the next (``X-Next-Cursor``; None on
        the last page)."""
        clean = {k: v for k, v in params.items() if v is not None}
        response = self._send("GET", path, 2, params=clean)
        return response.json(), response.headers.get("X-Next-Cursor")

    def _send(self, method: str, path: str, retries: int, **kwargs: Any) -> httpx.Response:
        """The answer of the leader: each URL tried in turn while none answers (``retries``
        rounds, for idempotent requests), a standby's redirect followed to a URL of
        ``HETSCHED_URL`` (never elsewhere: the token goes only where the user sends it), a
        standby's 503 waited out while retries remain."""
        attempt = hops = 0
        while True:
            response = self._reach(method, path, attempt < retries, **kwargs)
            if response is not None and self._follow(response) and hops < 2:
                hops += 1
                continue
            waiting = response is not None and _standby_waiting(response)
            if (response is None or waiting) and attempt < retries:
                attempt += 1
                time.sleep(0.5 * attempt)
                continue
            break
        assert response is not None
        if response.status_code == 401:
            fail(auth_error(self.token_source, self.url))
        if response.status_code >= 400:
            invalid = response.status_code in (400, 422)  # the request's content refused
            fail(_error_text(response), INVALID_INPUT if invalid else 1)
        return response

    def _reach(
        self, method: str, path: str, may_retry: bool, **kwargs: Any
    ) -> httpx.Response | None:
        """The answer of the first URL that answers, the current one first; None when none
        does and ``may_retry``."""
        order = [self.url, *(u for u in self.urls if u != self.url)]
        failure: Exception | None = None
        for url in order:
            try:
                response = self.http.request(method, url + path, **kwargs)
            except httpx.TransportError as exc:
                tls = explain(exc, url)
                if tls is not None:  # asking again would be refused again
                    fail(tls)
                failure = exc
                continue
            self.url = url
            return response
        if may_retry:
            return None
        where = ", ".join(order)
        hint = "" if "HETSCHED_URL" in os.environ else " (HETSCHED_URL sets another)"
        fail(f"cannot reach hetsched at {where}{hint} ({failure}); is `hetsched up` running?")

    def _follow(self, response: httpx.Response) -> bool:
        """A standby's redirect: True (and the leader is the URL from now on) when the
        leader is one of ``HETSCHED_URL``'s; a redirect elsewhere ends the command."""
        if response.status_code != 307 or _LEADER not in response.headers:
            return False
        leader = response.headers[_LEADER].rstrip("/")
        if leader not in self.urls:
            fail(
                f"hetsched at {self.url} is a standby; the leader is at {leader}: add it to "
                "HETSCHED_URL (comma-separated URLs of the pair) to follow it"
            )
        self.url = leader
        return True

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def get(self, path: str, **params: Any) -> Any:
        clean = {k: v for k, v in params.items() if v is not None}
        return self.request("GET", path, retries=2, params=clean)


def _standby_waiting(response: httpx.Response) -> bool:
    """A standby's 503 while no process leads (one takes over when the lease expires)."""
    return response.status_code == 503 and response.headers.get(_ROLE) == "standby"


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text.strip()[:200]}"
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, dict):
        errors = detail.get("errors") or body.get("errors") or []
        return "\n".join([str(detail.get("message", "invalid request")), *map(error_line, errors)])
    if isinstance(detail, list):  # a list of errors without a message
        return "\n".join(["invalid request", *map(error_line, detail)])
    errors = body.get("errors") if isinstance(body, dict) else None
    if errors:
        return "\n".join([str(detail), *map(error_line, errors)])
    return f"{detail} (HTTP {response.status_code})"


def error_line(error: Any) -> str:
    """One error of an answer as a line: a string as it is; a structured error (pydantic's
    ``{"loc": [...], "msg": ...}``) as ``field.path: message``, never as a dict's repr."""
    if isinstance(error, dict) and "msg" in error:
        loc = [str(p) for p in error.get("loc", ()) if p not in ("body", "query", "path")]
        return (".".join(loc) + ": " if loc else "") + str(error["msg"])
    if isinstance(error, dict):
        return "; ".join(f"{k}: {v}" for k, v in error.items())
    return str(error)


def get(path: str, **params: Any) -> Any:
    """One GET with a client opened and closed for it (``Client.get``)."""
    with Client() as client:
        return client.get(path, **params)


def call(method: str, path: str, retries: int = 0, **kwargs: Any) -> Any:
    """One request with a client opened and closed for it (``Client.request``)."""
    with Client() as client:
        return client.request(method, path, retries=retries, **kwargs)
