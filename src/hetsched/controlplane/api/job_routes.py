"""The job routes: submit one job or a batch, list, read, explain, follow the logs of and
cancel jobs.

A user sees, cancels and reads the logs of only their own jobs (others' ids answer 404, as
unknown ids do, so ids cannot be probed); an admin sees all. A submission commits to the
store before it answers.

No postponed annotations in this module: FastAPI reads the routes' annotations.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from hetsched.controlplane.api.speed_routes import job_speed
from hetsched.controlplane.api.submit import submit_batch, submit_one
from hetsched.controlplane.api.tasklogs import MAX_LOG_CHUNK, MAX_LOG_OFFSET, LocalLogs
from hetsched.controlplane.context import Service
from hetsched.controlplane.storage.store import Principal

__all__ = ["MAX_PAGE", "add_job_routes", "add_submit_routes"]

#: the most jobs one page of ``GET /v1/jobs`` returns
MAX_PAGE = 10_000
_STATE = "(pending|running|succeeded|failed|cancelled|rejected)"
_STATES_PATTERN = f"^{_STATE}(,{_STATE})*$"


def add_submit_routes(
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


def add_job_routes(
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
        return _with_domains(_job_view(row, service.store.job_tasks(job_id)), service)

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
        limit: Annotated[int, Query(ge=1, le=MAX_LOG_CHUNK)] = 65536,
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


async def _json_body(request: Request) -> tuple[bytes, str | None]:
    """A submission's body and its Idempotency-Key, after the checks both routes share."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip()
    if ctype != "application/json":
        raise HTTPException(415, "send the job as application/json")
    key = request.headers.get("idempotency-key")
    if key is not None and not 1 <= len(key) <= 200:
        raise HTTPException(422, "Idempotency-Key must be 1-200 characters")
    return await request.body(), key


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


def _with_domains(view: dict[str, Any], service: Service) -> dict[str, Any]:
    """Each task's network domains (by level label), when the service has levels."""
    domains = {n["name"]: n["domains"] for n in service.loop.nodes_view if "domains" in n}
    for task in view.get("tasks", []) if domains else []:
        if task["node"] in domains:
            task["domains"] = domains[task["node"]]
    return view


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
