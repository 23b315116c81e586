"""What the standby of a pair serves while another process leads: reads from the store,
and a redirect to the leader for everything else.

- ``GET /healthz`` (no token): ``{"ok": true, "role": "standby", "leader": URL}``;
- ``GET /v1/jobs/{id}`` and ``GET /v1/jobs/{id}/why``: read from the store, with the same
  tokens and ownership rules as the leader's routes (another user's job answers 404);
- anything else: ``307 Temporary Redirect`` to the same path at the leader's URL (the
  method and body are kept), with ``X-Hetsched-Leader``; ``503`` with ``Retry-After``
  while no process holds an unexpired lease (the standby takes over when it expires).

Every answer carries ``X-Hetsched-Role: standby``. The CLI follows the redirect only to a
URL it was given (``HETSCHED_URL`` may list the pair), so a token is never sent where the
user did not send it.
"""

import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from hetsched.controlplane.api.auth import Authenticator
from hetsched.controlplane.api.job_routes import job_view, why_view
from hetsched.controlplane.leadership import Held
from hetsched.controlplane.storage.store import Principal, Store

__all__ = ["ROLE_HEADER", "standby_app"]

ROLE_HEADER = "X-Hetsched-Role"
_ROLE = {ROLE_HEADER: "standby"}


def standby_app(store: Store, auth: Authenticator, leader: Callable[[], Held | None]) -> FastAPI:
    """The standby's app over ``store``; ``leader`` says who holds the lease now."""
    app = FastAPI(title="hetsched (standby)", docs_url=None, redoc_url=None, openapi_url=None)

    def live_leader() -> Held | None:
        held = leader()
        return held if held is not None and held.expires_at > time.time() else None

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        held = live_leader()
        body = {"ok": True, "role": "standby", "leader": held.url if held else None}
        return JSONResponse(body, headers=_ROLE)

    def visible(request: Request, job_id: str) -> dict[str, Any]:
        who = _caller(auth, request)
        row = store.job(job_id) if len(job_id) <= 32 else None
        if row is None or (not who.admin and row["owner"] != who.user):
            raise HTTPException(404, f"no job {job_id!r}", _ROLE)
        return row

    @app.get("/v1/jobs/{job_id}")
    def get_job(request: Request, job_id: str) -> JSONResponse:
        row = visible(request, job_id)
        return JSONResponse(job_view(row, store.job_tasks(job_id)), headers=_ROLE)

    @app.get("/v1/jobs/{job_id}/why")
    def why(request: Request, job_id: str) -> JSONResponse:
        row = visible(request, job_id)
        return JSONResponse(why_view(row, store.job_transitions(job_id)), headers=_ROLE)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    def to_leader(request: Request, path: str) -> Response:
        held = live_leader()
        if held is None:
            detail = "standby: no process leads now; one takes over when the lease expires"
            return JSONResponse({"detail": detail}, 503, {**_ROLE, "Retry-After": "1"})
        target = held.url.rstrip("/") + "/" + path
        if request.url.query:
            target += "?" + request.url.query
        headers = {**_ROLE, "X-Hetsched-Leader": held.url}
        return RedirectResponse(target, status_code=307, headers=headers)

    return app


def _caller(auth: Authenticator, request: Request) -> Principal:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    principal = auth.principal(token.strip()) if scheme.lower() == "bearer" and token else None
    if principal is None:
        raise HTTPException(401, "authentication required", {"WWW-Authenticate": "Bearer"})
    return principal
