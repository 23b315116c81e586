"""The OpenAPI description (``/openapi.json``) and its two viewers (``/docs``, ``/redoc``).

The viewers are static pages, but the description lists every route and field, so it is
behind the same token as the API unless the service runs with ``--public-docs``.
"""

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from hetsched.controlplane.storage.store import Principal

__all__ = ["add_doc_routes"]


def add_doc_routes(app: FastAPI, caller: Callable[[Request], Principal] | None) -> None:
    """The OpenAPI description and its two viewers; with ``caller``, each needs a token."""

    def check(request: Request) -> None:
        if caller is not None:
            caller(request)

    @app.get("/openapi.json", include_in_schema=False)
    def openapi(request: Request) -> JSONResponse:
        check(request)
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    def swagger(request: Request) -> HTMLResponse:
        check(request)
        return get_swagger_ui_html(openapi_url="/openapi.json", title="hetsched API")

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        check(request)
        return get_redoc_html(openapi_url="/openapi.json", title="hetsched API")
