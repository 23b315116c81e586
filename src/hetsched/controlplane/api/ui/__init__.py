"""The web dashboard: three static files served at ``/ui``, no build step.

``index.html``, ``app.js`` (vanilla JavaScript; charts are hand-drawn SVG) and ``style.css``
ship inside the package, so the page loads nothing from the internet. The files hold no
data and need no token: the page asks for the user's API token, keeps it in
``sessionStorage`` and calls the JSON API with it (``/v1/nodes``, ``/v1/queues``,
``/v1/jobs``, ``/v1/jobs/{id}/why``, ``/v1/history``), so a user sees on the dashboard
exactly what the API shows them. A strict Content-Security-Policy allows only the page's
own script, style and API.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import Response

__all__ = ["add_routes"]

_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}

_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@cache
def _read(name: str) -> bytes:
    return files(__name__).joinpath(name).read_bytes()


def _serve(name: str) -> Response:
    return Response(_read(name), media_type=_TYPES[name], headers=_HEADERS)


def add_routes(app: FastAPI) -> None:
    """``GET /ui``, ``/ui/app.js`` and ``/ui/style.css``: a fixed set, never a path."""

    @app.get("/ui", include_in_schema=False)
    def index() -> Response:
        return _serve("index.html")

    @app.get("/ui/app.js", include_in_schema=False)
    def script() -> Response:
        return _serve("app.js")

    @app.get("/ui/style.css", include_in_schema=False)
    def style() -> Response:
        return _serve("style.css")
