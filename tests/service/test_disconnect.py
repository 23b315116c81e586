"""A client that goes away in the middle of its request leaves no traceback behind.

The request reaches the real app (its routes, authentication and body limit) with a body cut
short by ``http.disconnect``, as uvicorn delivers it when the connection drops. Before, the
route's body read raised starlette's ``ClientDisconnect`` out of the app, and uvicorn logged
it as "Exception in ASGI application" with its traceback.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from service_fixtures import Api

#: (method, path, the part of the body sent before the client went away)
CASES = [
    ("POST", "/v1/jobs", b'{"name": "cut", "command": ["tr'),
    ("POST", "/v1/jobs/batch", b'{"jobs": [{"name": "a"'),
    ("POST", "/v1/tokens", b'{"us'),
]


def _call(app: Any, method: str, path: str, token: str, part: bytes) -> list[dict[str, Any]]:
    """The app's answer to a request whose client disconnects after ``part``."""
    incoming = [
        {"type": "http.request", "body": part, "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % (len(part) + 100)),
            (b"authorization", f"Bearer {token}".encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(app(scope, receive, send))
    return sent


@pytest.mark.parametrize(("method", "path", "part"), CASES)
def test_a_client_gone_mid_request_is_no_error(
    api: Api, method: str, path: str, part: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    app = api.svc.built.app
    with caplog.at_level(logging.WARNING):
        sent = _call(app, method, path, api.svc.admin_token, part)
    statuses = [m["status"] for m in sent if m["type"] == "http.response.start"]
    assert all(status < 500 for status in statuses), statuses
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # the service goes on serving
    assert api.admin.get("/healthz").status_code == 200
