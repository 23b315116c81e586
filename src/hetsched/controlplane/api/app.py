"""The HTTP API (FastAPI). OpenAPI at ``/openapi.json``, viewers at ``/docs`` and ``/redoc``.

Rules every route follows:
- a bearer token is required everywhere except ``GET /healthz``, the dashboard's static
  files under ``/ui`` (they hold no data; the page calls the API with the user's token),
  ``GET /metrics`` when the service runs with ``--metrics-public``, and the OpenAPI
  description with its viewers when it runs with ``--public-docs``;
- a user sees, cancels and reads the logs of only their own jobs (others' ids answer 404,
  as unknown ids do, so ids cannot be probed); an admin sees all;
- a change is committed to the store before any 2xx answer;
- bodies are limited in size (413), bad JSON is 400, a body that does not validate is 422
  with field paths, and a rejected request stores nothing.

This module assembles the app; the routes live by resource group (``job_routes``,
``cancel_routes``, ``cluster_routes``, ``token_routes``, ``member``, ``checkpoint_routes``,
``speed_routes``, ``doc_routes``), who may call them in ``access``, the body limit in
``body_limit``.
"""

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from hetsched.controlplane import metrics
from hetsched.controlplane.api import ui
from hetsched.controlplane.api.access import (
    admin_dependency,
    authenticated_dependency,
    caller_dependency,
)
from hetsched.controlplane.api.body_limit import BodyLimit
from hetsched.controlplane.api.cancel_routes import add_cancel_routes
from hetsched.controlplane.api.checkpoint_routes import add_checkpoint_routes
from hetsched.controlplane.api.cluster_routes import add_cluster_routes
from hetsched.controlplane.api.doc_routes import add_doc_routes
from hetsched.controlplane.api.job_routes import add_job_routes, add_submit_routes
from hetsched.controlplane.api.member_routes import add_member_routes
from hetsched.controlplane.api.speed_routes import add_speed_routes
from hetsched.controlplane.api.tasklogs import MAX_LOG_OFFSET, LocalLogs
from hetsched.controlplane.api.token_routes import add_token_routes
from hetsched.controlplane.context import Service
from hetsched.controlplane.schemas import MAX_BATCH_BODY_BYTES, MAX_BODY_BYTES
from hetsched.controlplane.storage.store import Principal

__all__ = ["MAX_LOG_OFFSET", "LocalLogs", "Service", "create_app"]


def create_app(service: Service) -> FastAPI:
    app = FastAPI(
        title="hetsched",
        summary="The hetsched control plane: submit, watch and cancel jobs.",
        version="1",
        # served by add_doc_routes, behind a token unless --public-docs
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.service = service

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        lines = [
            ".".join(str(p) for p in e["loc"] if p not in ("body", "query", "path"))
            + f": {e['msg']}"
            for e in exc.errors()
        ]
        return JSONResponse({"detail": "invalid request", "errors": lines}, status_code=422)

    caller = caller_dependency(service)
    authenticated = authenticated_dependency(service, caller)
    admin_only = admin_dependency(authenticated)
    _add_service_routes(app, service, caller)
    ui.add_routes(app)
    add_doc_routes(app, None if service.docs_public else caller)
    add_submit_routes(app, service, authenticated)
    add_job_routes(app, service, authenticated)
    add_cancel_routes(app, service, authenticated)
    add_cluster_routes(app, service, authenticated)
    add_token_routes(app, service, admin_only)
    add_member_routes(app, service, authenticated, admin_only)
    add_checkpoint_routes(app, service)
    add_speed_routes(app, service, authenticated)
    app.add_middleware(
        BodyLimit, limit=MAX_BODY_BYTES, limits={"/v1/jobs/batch": MAX_BATCH_BODY_BYTES}
    )
    return app


def _add_service_routes(
    app: FastAPI, service: Service, caller: Callable[[Request], Principal]
) -> None:
    """``GET /healthz`` (no token) and ``GET /metrics``."""

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, Any]:
        return {"ok": True}

    registry = metrics.install(service)

    @app.get("/metrics", tags=["service"], response_class=Response)
    def prometheus(request: Request) -> Response:
        """Prometheus metrics (docs/observability.md); any valid token, or none with
        ``--metrics-public``."""
        if not service.metrics_public:
            caller(request)
        return Response(metrics.render(registry), media_type=metrics.CONTENT_TYPE)
