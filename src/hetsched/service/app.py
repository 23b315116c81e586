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
"""

import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hetsched.agent.protocol import ProcessExecutor
from hetsched.model.device import Health
from hetsched.service import metrics, ui
from hetsched.service.checkpoint_routes import add_checkpoint_routes
from hetsched.service.context import Service
from hetsched.service.member import add_member_routes
from hetsched.service.schemas import MAX_BATCH_BODY_BYTES, MAX_BODY_BYTES
from hetsched.service.speed_routes import add_speed_routes, job_speed
from hetsched.service.store import Principal
from hetsched.service.submit import submit_batch, submit_one

__all__ = ["MAX_LOG_OFFSET", "LocalLogs", "Service", "create_app"]

_MAX_LOG_CHUNK = 1 << 20
#: the largest log offset a request may name: 2^53 - 1, exact in every JSON client
MAX_LOG_OFFSET = (1 << 53) - 1


class _BodyLimit:
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


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    user: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    admin: bool = False


def create_app(service: Service) -> FastAPI:
    app = FastAPI(
        title="hetsched",
        summary="The hetsched control plane: submit, watch and cancel jobs.",
        version="1",
        # served by _add_doc_routes, behind a token unless --public-docs
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

    caller = _caller(service)
    authenticated = _authenticated(service, caller)

    def admin_only(who: Annotated[Principal, Depends(authenticated)]) -> Principal:
        if not who.admin:
            raise HTTPException(403, "admin only")
        return who

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

    ui.add_routes(app)
    _add_doc_routes(app, None if service.docs_public else caller)
    _add_submit_routes(app, service, authenticated)
    _add_job_routes(app, service, authenticated)
    _add_cluster_routes(app, service, authenticated)
    _add_token_routes(app, service, admin_only)
    add_member_routes(app, service, authenticated, admin_only)
    add_checkpoint_routes(app, service)
    add_speed_routes(app, service, authenticated)
    app.add_middleware(
        _BodyLimit, limit=MAX_BODY_BYTES, limits={"/v1/jobs/batch": MAX_BATCH_BODY_BYTES}
    )
    return app


def _caller(service: Service) -> Callable[[Request], Principal]:
    """The dependency that authenticates a request: its bearer token, rate limited per
    token, failures rate limited per client address."""

    def caller(request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        client = request.client.host if request.client else "?"
        principal = None
        if scheme.lower() == "bearer" and token:
            principal = service.auth.principal(token.strip())
        if principal is None:
            wait = service.auth_failures.allow(client)
            if wait:
                raise HTTPException(
                    429, "too many failed authentications", {"Retry-After": f"{wait:.0f}"}
                )
            raise HTTPException(401, "authentication required", {"WWW-Authenticate": "Bearer"})
        wait = service.limiter.allow(principal.token_id)
        if wait:
            raise HTTPException(429, "rate limit exceeded", {"Retry-After": f"{max(wait, 1):.0f}"})
        return principal

    return caller


def _authenticated(
    service: Service, caller: Callable[[Request], Principal]
) -> Callable[[Request], Awaitable[Principal]]:
    """``caller`` as the routes' dependency: on the event loop when the token is in the
    authenticator's cache (no I/O: a lookup and the rate limiter), in the thread pool when
    the store must be read. A thread hop per request cost as much as the lookup itself."""

    async def authenticated(request: Request) -> Principal:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and service.auth.cached(token.strip()) is not None:
            return caller(request)
        return await run_in_threadpool(caller, request)

    return authenticated


def _add_submit_routes(
    app: FastAPI, service: Service, caller: Callable[[Request], Awaitable[Principal]]
) -> None:
    """Submit one job, or a batch (all or nothing); both commit before they answer."""
    Caller = Annotated[Principal, Depends(caller)]

    @app.post("/v1/jobs", status_code=201, tags=["jobs"])
    async def submit(request: Request, who: Caller) -> JSONResponse:
        """Submit a job. Send ``Idempotency-Key`` to make retries safe: a repeated key
        returns the job it created (200) and never creates a second one."""
        body, key = await _json_body(request)
        row, created = await run_in_threadpool(submit_one, service, body, who, key)
        return JSONResponse(_job_view(row), status_code=201 if created else 200)

    @app.post("/v1/jobs/batch", status_code=201, tags=["jobs"])
    async def submit_many(request: Request, who: Caller) -> JSONResponse:
        """Submit many jobs at once: ``{"jobs": [job, ...]}``, at most 5,000 jobs and 8 MiB.
        All or nothing: if any job is refused, nothing is stored and the answer lists every
        problem by index (``jobs[3].resources.cpu: ...``). ``Idempotency-Key`` covers the
        whole batch (201 new, 200 replay, 409 same key with another batch)."""
        body, key = await _json_body(request)
        rows, created = await run_in_threadpool(submit_batch, service, body, who, key)
        return JSONResponse(
            {"jobs": [_job_view(r) for r in rows]}, status_code=201 if created else 200
        )


#: the most jobs one page of ``GET /v1/jobs`` returns
MAX_PAGE = 10_000
_STATE = "(pending|running|succeeded|failed|cancelled|rejected)"
_STATES_PATTERN = f"^{_STATE}(,{_STATE})*$"


def _add_job_routes(
    app: FastAPI, service: Service, caller: Callable[[Request], Awaitable[Principal]]
) -> None:
    """List, read, explain, follow the logs of and cancel jobs. A user sees only their own
    jobs (others' answer 404, as unknown ids do); an admin sees all."""
    Caller = Annotated[Principal, Depends(caller)]
    _add_job_list_route(app, service, caller)

    def visible_job(job_id: str, who: Principal) -> dict[str, Any]:
        row = service.store.job(job_id) if len(job_id) <= 32 else None
        if row is None or (not who.admin and row["owner"] != who.user):
            raise HTTPException(404, f"no job {job_id!r}")
        return row

    @app.get("/v1/jobs/{job_id}", tags=["jobs"])
    def get_job(job_id: str, who: Caller) -> dict[str, Any]:
        row = visible_job(job_id, who)
        return _job_view(row, service.store.job_tasks(job_id))

    @app.get("/v1/jobs/{job_id}/why", tags=["jobs"])
    def why(job_id: str, who: Caller) -> dict[str, Any]:
        """Why the job is where it is: its pending explanation and its transition history."""
        row = visible_job(job_id, who)
        view = _why_view(row, service.store.job_transitions(job_id))
        return {**view, "speed": job_speed(service, row)}

    @app.get("/v1/jobs/{job_id}/logs", tags=["jobs"])
    def logs(
        job_id: str,
        who: Caller,
        task: Annotated[int, Query(ge=0, le=100_000)] = 0,
        stream: Annotated[str, Query(pattern="^(stdout|stderr)$")] = "stdout",
        offset: Annotated[int, Query(ge=0, le=MAX_LOG_OFFSET)] = 0,
        limit: Annotated[int, Query(ge=1, le=_MAX_LOG_CHUNK)] = 65536,
    ) -> dict[str, Any]:
        """A chunk of a task's output. The path comes from the job record, never from the
        request; pass the returned ``offset`` back to follow."""
        row = visible_job(job_id, who)
        reader = service.logs or LocalLogs(service.executor)
        data, next_offset = reader.read(row["id"], task, stream, offset, limit)
        return {
            "id": job_id,
            "task": task,
            "stream": stream,
            "data": data.decode("utf-8", "replace"),
            "offset": next_offset,
            "state": row["state"],
        }

    @app.post("/v1/jobs/{job_id}/cancel", status_code=202, tags=["jobs"])
    def cancel(job_id: str, who: Caller) -> dict[str, Any]:
        row = visible_job(job_id, who)
        if not service.store.request_cancel(job_id):
            raise HTTPException(409, f"job {job_id} already ended ({row['state']})")
        service.loop.cancelled(job_id, who.user)
        return {"id": job_id, "cancel_requested": True}


def _add_job_list_route(
    app: FastAPI, service: Service, caller: Callable[[Request], Awaitable[Principal]]
) -> None:
    """``GET /v1/jobs``: a page of the jobs the caller may see."""
    Caller = Annotated[Principal, Depends(caller)]

    @app.get("/v1/jobs", tags=["jobs"])
    def list_jobs(
        who: Caller,
        response: Response,
        all: bool = False,
        queue: str | None = None,
        user: str | None = None,
        state: Annotated[str | None, Query(pattern=_STATES_PATTERN)] = None,
        order: Annotated[str, Query(pattern="^(oldest|newest)$")] = "oldest",
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1000,
        cursor: Annotated[str | None, Query(pattern="^[0-9]{1,18}$")] = None,
    ) -> list[dict[str, Any]]:
        """One page of your jobs (an admin: everyone's, or ``user``'s), oldest first (``order
        =newest``: latest first); finished ones with ``all``, or only those in ``state``
        (comma-separated). At most ``limit`` rows (1 to 10,000); when more follow, the
        ``X-Next-Cursor`` header holds the ``cursor`` that asks for the next page."""
        owner = who.user if not who.admin else user
        rows = service.store.list_jobs(
            owner,
            queue,
            include_terminal=all,
            limit=limit + 1,
            states=state.split(",") if state else (),
            after=None if cursor is None else int(cursor),
            newest=order == "newest",
        )
        if len(rows) > limit:
            rows = rows[:limit]
            response.headers["X-Next-Cursor"] = str(rows[-1]["seq"])
        return [_job_view(r) for r in rows]


def _add_cluster_routes(
    app: FastAPI, service: Service, caller: Callable[[Request], Awaitable[Principal]]
) -> None:
    """Nodes, queues and the dashboard's history, for any valid token."""
    Caller = Annotated[Principal, Depends(caller)]

    @app.get("/v1/nodes", tags=["cluster"])
    def nodes(who: Caller) -> list[dict[str, Any]]:
        return service.loop.nodes_view

    @app.get("/v1/queues", tags=["cluster"])
    def queues(who: Caller) -> list[dict[str, Any]]:
        """Each queue: who may submit, jobs by state, and quota used, borrowed and free."""
        return _queues_view(service)

    @app.get("/v1/history", tags=["cluster"])
    def history(who: Caller, since: float = 0.0) -> dict[str, Any]:
        """Samples taken every few seconds for the dashboard's charts, newest last: allocated
        and measured share per device class, jobs pending per queue, jobs running."""
        ring = service.loop.metrics.history
        return {"interval_s": ring.interval_s, "samples": [s.to_dict() for s in ring.since(since)]}

    @app.get("/v1/alerts", tags=["cluster"])
    def alerts(who: Caller, since: float = 0.0) -> dict[str, Any]:
        """What the dashboard's banners show: the reconcile loop's alerts (failed turns,
        jobs held back or given up, a wedge), the overcommit guard's alerts (a user sees
        those of their own jobs and the node-wide ones), and every device that is not
        present and healthy, with the watcher's reason."""
        return _alerts_view(service, who, since)


def _add_token_routes(app: FastAPI, service: Service, admin_only: Callable[..., Principal]) -> None:
    """Create, list and revoke tokens: admins only."""
    Admin = Annotated[Principal, Depends(admin_only)]

    @app.post("/v1/tokens", status_code=201, tags=["tokens"])
    def create_token(body: TokenRequest, who: Admin) -> dict[str, Any]:
        token_id, token = service.store.create_token(body.user, body.admin)
        return {"id": token_id, "user": body.user, "admin": body.admin, "token": token}

    @app.get("/v1/tokens", tags=["tokens"])
    def list_tokens(who: Admin) -> list[dict[str, Any]]:
        return service.store.list_tokens()

    @app.delete("/v1/tokens/{token_id}", tags=["tokens"])
    def revoke_token(token_id: str, who: Admin) -> dict[str, Any]:
        if not service.store.revoke_token(token_id):
            raise HTTPException(404, f"no live token {token_id!r}")
        service.auth.forget()
        return {"id": token_id, "revoked": True}


async def _json_body(request: Request) -> tuple[bytes, str | None]:
    """A submission's body and its Idempotency-Key, after the checks both routes share."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip()
    if ctype != "application/json":
        raise HTTPException(415, "send the job as application/json")
    key = request.headers.get("idempotency-key")
    if key is not None and not 1 <= len(key) <= 200:
        raise HTTPException(422, "Idempotency-Key must be 1-200 characters")
    return await request.body(), key


def _add_doc_routes(app: FastAPI, caller: Callable[[Request], Principal] | None) -> None:
    """The OpenAPI description and its two viewers; with ``caller``, each needs a token.

    The viewers are static pages, but the description lists every route and field, so it is
    behind the same token as the API unless the service runs with ``--public-docs``.
    """

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


def _why_view(row: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
    """``GET /v1/jobs/{id}/why``: where the job is and why, its checkpoint and lost work,
    and its transitions."""
    return {
        "id": row["id"],
        "state": row["state"],
        "reason": row["reason"],
        "explanation": row["explanation"],
        "checkpoint": row.get("checkpoint"),
        "lost_work_s": row.get("lost_work_s") or 0.0,
        "history": [
            {"time": t["time"], "from": t["source"], "to": t["target"], "cause": t["cause"]}
            for t in history
        ],
    }


def _job_view(row: dict[str, Any], task_rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec = row["spec"]
    view: dict[str, Any] = {
        "id": row["id"],
        "name": row["name"],
        "user": row["owner"],
        "queue": row["queue"],
        "priority": row["priority"],
        "state": row["state"],
        "reason": row["reason"],
        "run": row["run"],
        "restarts": row["restarts"],
        "preemptions": row["preemptions"],
        "submitted_at": row["submitted_at"],
        "started_at": row["started_at"],
        "first_started_at": row["first_started_at"],
        "ended_at": row["ended_at"],
        "exit_code": row["exit_code"],
        "checkpoint": row.get("checkpoint"),
        "lost_work_s": row.get("lost_work_s") or 0.0,
        "migrations": row.get("migrations") or 0,
        "command": spec.get("command", []),
        "resources": spec.get("resources", {}),
        "replicas": spec.get("replicas", 1),
    }
    if task_rows is not None:
        view["tasks"] = [
            {
                "task": t["task"],
                "run": t["run"],
                "node": t["node"],
                "state": t["state"],
                "pid": t["pid"],
                "devices": t["placement"].get("devices", []),
                "started_at": t["started_at"],
                "ended_at": t["ended_at"],
                "exit_code": t["exit_code"],
                "reason": t["reason"],
            }
            for t in task_rows
        ]
    return view


class LocalLogs:
    """Task logs as ``hetsched up`` keeps them: files under the executor's home (the Ray
    executor streams its tasks' output into the same files)."""

    def __init__(self, executor: ProcessExecutor | None) -> None:
        if executor is None:
            raise HTTPException(404, "no such log")
        self.executor = executor

    def read(
        self, job_id: str, task: int, stream: str, offset: int, limit: int
    ) -> tuple[bytes, int]:
        path = self.executor.log_path(job_id, task, stream)
        return _read_log(path, self.executor.home, offset, limit)


def _read_log(path: Path, root: Path, offset: int, limit: int) -> tuple[bytes, int]:
    """Read from a log under ``root``. A task can write into its job directory, so what is
    there is not trusted: symlinks are not followed (404); a file with more than one link
    (a hard link to a file the task could read), another owner than the service, or that is
    not a regular file (a FIFO would block the read) is refused (403)."""
    real_root = os.path.realpath(root)
    if not os.path.realpath(path).startswith(real_root + os.sep):
        raise HTTPException(404, "no such log")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return b"", offset
    except OSError:
        raise HTTPException(404, "no such log") from None
    try:
        info = os.fstat(fd)
        problem = _log_file_problem(info)
        if problem is not None:
            raise HTTPException(403, f"log refused: {problem}")
        if offset >= info.st_size:
            return b"", offset
        data = os.pread(fd, limit, offset)
    finally:
        os.close(fd)
    return data, offset + len(data)


def _log_file_problem(info: os.stat_result) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_nlink != 1:
        return f"the file has {info.st_nlink} links (a log has one)"
    if info.st_uid != os.geteuid():
        return f"the file's owner (uid {info.st_uid}) is not the service's"
    return None


def _alerts_view(service: Service, who: Principal, since: float) -> dict[str, Any]:
    loop = service.loop
    guard = loop.guard.recent(200) if loop.guard is not None else []
    guard = [a for a in guard if a.time > since]
    if not who.admin:
        mine = {
            row["id"]
            for row in service.store.jobs_by_ids(sorted({a.job_id for a in guard if a.job_id}))
            if row["owner"] == who.user
        }
        guard = [a for a in guard if not a.job_id or a.job_id in mine]
    devices = loop.watcher.view() if loop.watcher is not None else []
    return {
        "wedged": loop.faults.wedged,
        "held": loop.faults.held(),
        "loop": [a.to_dict() for a in loop.faults.alerts(since)],
        "guard": [a.to_dict() for a in guard],
        "devices": [
            d.to_dict() for d in devices if not d.present or d.health is not Health.HEALTHY
        ],
    }


def _queues_view(service: Service) -> list[dict[str, Any]]:
    counts: dict[str, dict[str, int]] = {}
    for item in service.store.queue_usage():
        counts.setdefault(item["queue"], {})[item["state"]] = item["count"]
    used: dict[str, dict[str, float]] = {}
    for item in service.store.running_specs():
        p = item["placement"]
        u = used.setdefault(item["queue"], {})
        u["cpu"] = u.get("cpu", 0.0) + p["cpu_milli"]
        u["memory"] = u.get("memory", 0.0) + p["memory_mib"]
        for d in p.get("devices", []):
            cls = (
                service.loop.devices[d["id"]].device_class
                if d["id"] in service.loop.devices
                else "device"
            )
            u[cls] = u.get(cls, 0.0) + d["share"] / 1000
    out: list[dict[str, Any]] = []
    core_quotas = service.loop.quota_view
    names = [q.name for q in service.queues.queues]
    names += [n for n in core_quotas if n not in names]
    names += sorted(set(counts) - set(names))
    by_name = service.queues.by_name()
    for name in names:
        spec = by_name.get(name)
        limits = spec.limits() if spec is not None else {}
        usage = used.get(name, {})
        keys = sorted(set(limits) | set(usage))
        if name in core_quotas:
            # the scheduling profile's queue tree: guarantees, borrowing, what the core holds
            out.append(
                {
                    "name": name,
                    "users": spec.users if spec is not None else None,
                    "jobs": counts.get(name, {}),
                    "quota_source": "profile",
                    "resources": core_quotas[name],
                }
            )
            continue
        out.append(
            {
                "name": name,
                "users": spec.users if spec is not None else None,
                "jobs": counts.get(name, {}),
                "quota_source": "queues file" if limits else "none",
                "resources": {
                    k: {
                        "quota": limits.get(k),
                        "used": usage.get(k, 0.0),
                        "borrowed": max(0.0, usage.get(k, 0.0) - limits[k]) if k in limits else 0.0,
                        "free": max(0.0, limits[k] - usage.get(k, 0.0)) if k in limits else None,
                    }
                    for k in keys
                },
            }
        )
    return out
