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
  with field paths, and a rejected request stores nothing;
- while the store cannot be used (disk full, read-only filesystem, database server down)
  or where it is damaged, a request that needs it answers 503 with the reason and
  ``Retry-After``, never 500; what needs no store (``/healthz``, ``/readyz``, the alerts,
  the views the loop keeps) goes on answering.

This module assembles the app; the routes live by resource group (``job_routes``,
``cancel_routes``, ``cluster_routes``, ``token_routes``, ``member``, ``checkpoint_routes``,
``speed_routes``, ``doc_routes``), who may call them in ``access``, the body limit in
``body_limit``.
"""

import sqlite3
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import SQLAlchemyError

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

__all__ = ["MAX_LOG_OFFSET", "RETRY_AFTER_S", "LocalLogs", "Service", "create_app"]

#: what a 503 of an unavailable store asks a client to wait (seconds)
RETRY_AFTER_S = 2


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

    async def _store_failed(_request: Request, exc: Exception) -> Response:
        health = service.store.health
        damaged_before = health.damage
        reason = health.failed(exc)
        if reason is None:
            raise exc  # a bug, not the store: the ordinary 500
        if health.damage is not None and damaged_before is None:
            service.loop.faults.store_damaged(reason, time.time())
        headers = {"Retry-After": str(RETRY_AFTER_S)}
        return JSONResponse({"detail": reason}, status_code=503, headers=headers)

    for error in (SQLAlchemyError, sqlite3.Error, OSError):
        app.add_exception_handler(error, _store_failed)

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
    """``GET /healthz`` and ``GET /readyz`` (no token), and ``GET /metrics``."""

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, Any]:
        """The process is alive (200 as long as it answers: a failing store is no reason
        to restart it); ``store`` says whether the store can be used, and why not."""
        return {"ok": True, "store": service.store.health.to_dict()}

    @app.get("/readyz", tags=["service"])
    def readyz() -> Response:
        """200 when the service can take submissions and schedule; 503 with the reason and
        ``Retry-After`` while the store cannot be used or scheduling is wedged."""
        health = service.store.health
        if health.outage is None:
            try:
                service.store.ping()
            except Exception as exc:
                if health.failed(exc) is None:
                    raise
        state = health.to_dict()
        wedged = service.loop.faults.wedged
        ready = bool(state["ok"]) and wedged is None
        body = {"ready": ready, "store": state, "wedged": wedged}
        headers = {} if ready else {"Retry-After": str(RETRY_AFTER_S)}
        return JSONResponse(body, status_code=200 if ready else 503, headers=headers)

    registry = metrics.install(service)

    @app.get("/metrics", tags=["service"], response_class=Response)
    def prometheus(request: Request) -> Response:
        """Prometheus metrics (docs/observability.md); any valid token, or none with
        ``--metrics-public``."""
        if not service.metrics_public:
            caller(request)
        return Response(metrics.render(registry), media_type=metrics.CONTENT_TYPE)
