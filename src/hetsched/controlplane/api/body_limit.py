"""The request body limit every route is behind: a body larger than the limit is refused
with 413, whether or not it declares a Content-Length. The same middleware ends quietly a
request whose client went away before its body was read (nothing is left to answer)."""

import logging

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimit"]

log = logging.getLogger(__name__)


class BodyLimit:
    """Refuses bodies larger than ``limit`` bytes (``limits[path]`` for the paths it names)
    with 413, whether or not they declare a Content-Length (pure ASGI, so it costs nothing
    on small requests)."""

    def __init__(self, app: ASGIApp, limit: int, limits: dict[str, int] | None = None) -> None:
        self.app = app
        self.default = limit
        self.limits = limits or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.get(scope.get("path", ""), self.default)
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await _too_large(send)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await _too_large(send)
        except ClientDisconnect:
            # not an error of the service: the client closed the connection mid-request
            log.debug("%s %s: the client went away", scope.get("method"), scope.get("path"))


class _TooLarge(Exception):
    pass


async def _too_large(send: Send) -> None:
    body = b'{"detail":"request body too large"}'
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
