"""The job routes: submit one job or a batch, list, read, explain, follow the logs of and
cancel jobs.

A user sees, cancels and reads the logs of only their own jobs (others' ids answer 404, as
unknown ids do, so ids cannot be probed); an admin sees all. A submission commits to the
store before it answers.

No postponed annotations in this module: FastAPI reads the routes' annotations.
"""

import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from hetsched.controlplane.api.job_refs import resolve_job
from hetsched.controlplane.api.job_story import story
from hetsched.controlplane.api.speed_routes import job_speed
from hetsched.controlplane.api.submit import submit_batch, submit_one
from hetsched.controlplane.api.tasklogs import MAX_LOG_CHUNK, MAX_LOG_OFFSET, LocalLogs
from hetsched.controlplane.context import Service
from hetsched.controlplane.storage.store import Principal
from hetsched.controlplane.workflows import array_view, uncreated_element

__all__ = ["MAX_PAGE", "add_job_routes", "add_submit_routes", "job_view", "why_view"]

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
        # an id, a unique name or a unique id prefix, among the caller's jobs (job_refs)
        return resolve_job(service.store, job_id, who)

    @app.get("/v1/jobs/{job_id}", tags=["jobs"])
    def get_job(job_id: str, who: Caller) -> dict[str, Any]:
        """A job and its tasks. ``job_id`` may also be a unique name or id prefix among
        your jobs (409 lists the candidates when several match); so may every job route's."""
        row = visible_job(job_id, who)
        view = _job_view(row, service.store.job_tasks(row["id"]))
        return _with_domains(_with_elements(service, row, view), service)

    @app.get("/v1/jobs/{job_id}/why", tags=["jobs"])
    def why(job_id: str, who: Caller) -> dict[str, Any]:
        """Why the job is where it is: its pending explanation, its transition history, and
        the job that last preempted it and the device whose loss last displaced it."""
        row = visible_job(job_id, who)
        transitions = service.store.job_transitions(row["id"])
        view = _waiting_now(service, row, _why_view(row, transitions))
        told = story(service.store, view["history"])
        return {**view, **told, "speed": job_speed(service, row)}

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
            "id": row["id"],
            "task": task,
            "stream": stream,
            "data": data.decode("utf-8", "replace"),
            "offset": next_offset,
            "state": row["state"],
        }

    @app.post("/v1/jobs/{job_id}/cancel", status_code=202, tags=["jobs"])
    def cancel(job_id: str, who: Caller) -> dict[str, Any]:
        """Cancel a job; an array's with all its elements; one element: ``ID[7]``."""
        job_id = _request_cancel(service, job_id, lambda visible: visible_job(visible, who))
        service.loop.cancelled(job_id, who.user)
        return {"id": job_id, "cancel_requested": True}


def _request_cancel(service: Service, job_id: str, visible: Callable[[str], dict[str, Any]]) -> str:
    """Record a cancel request in the store (``visible``: the row of a job the caller may
    see, else 404) and return the job's id; 409 for a job that has ended. An element not
    created yet gets its row now, so that a restart before the next turn still cancels it."""
    if service.store.job(job_id) is None and uncreated_element(service.store, job_id):
        array_id, _, index = job_id[:-1].rpartition("[")
        visible(array_id)  # its array's owner may cancel it
        if not service.store.request_element_cancel(array_id, int(index), time.time()):
            raise HTTPException(409, f"job {job_id} already ended")
        return job_id
    row = visible(job_id)
    if not service.store.request_cancel(row["id"]):
        raise HTTPException(409, f"job {row['id']} already ended ({row['state']})")
    return str(row["id"])


def _with_elements(service: Service, row: dict[str, Any], view: dict[str, Any]) -> dict[str, Any]:
    """An array's view with its elements' counts (``elements``)."""
    if row["spec"].get("array") is not None and not row.get("array_of"):
        view["elements"] = array_view(service.store, row)
    return view


def _waiting_now(service: Service, row: dict[str, Any], view: dict[str, Any]) -> dict[str, Any]:
    """A held job's ``why`` with how far what it waits for got: the core's answer now,
    not the row's (recorded when those jobs last changed state)."""
    if row["state"] == "pending" and row["spec"].get("after") and not row.get("array_of"):
        with service.loop.lock:
            waiting = service.loop.view.waiting_for(row["id"])
        if waiting is not None:
            view["explanation"] = waiting.to_dict()
    return view


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
        return _running_domains([_listed(service, r) for r in rows], service)


def _listed(service: Service, row: dict[str, Any]) -> dict[str, Any]:
    """A job in the list: its view, with an elastic job's count (None while it does not
    run; the tasks are read for running elastic jobs only)."""
    view = _job_view(row)
    if view.get("min_replicas") is not None:
        running = row["state"] == "running"
        view["count"] = _count(row, service.store.job_tasks(row["id"])) if running else None
    return view


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
        "name": row["name"],
        "state": row["state"],
        "reason": row["reason"],
        "explanation": row["explanation"],
        "checkpoint": row.get("checkpoint"),
        "lost_work_s": row.get("lost_work_s") or 0.0,
        "history": [
            {"time": t["time"], "from": t["source"], "to": t["target"], "cause": t["cause"]}
            for t in history
        ],
        # an elastic job's count over time: each start and each resize done
        "counts": [
            {"time": t["time"], "count": t["count"]} for t in history if t.get("count") is not None
        ],
    }


def _shape_view(spec: dict[str, Any]) -> dict[str, Any]:
    """An elastic job's bounds and resize mode; a heterogeneous job's groups (``replicas``
    then is their total)."""
    out: dict[str, Any] = {}
    if spec.get("min_replicas") is not None:
        out["min_replicas"] = spec["min_replicas"]
        out["resize"] = spec.get("resize", "checkpoint")
    groups = spec.get("groups")
    if groups:
        out["groups"] = [
            {
                "name": g["name"],
                "replicas": g.get("replicas", 1),
                "resources": g.get("resources", {}),
            }
            for g in groups
        ]
        out["replicas"] = sum(g.get("replicas", 1) for g in groups)
    return out


def _count(row: dict[str, Any], task_rows: list[dict[str, Any]]) -> int | None:
    """How many tasks a running job runs with now (while it resizes: the count it resizes
    to); None when it does not run."""
    if row["state"] != "running":
        return None
    run = int(row["run"])
    resizing = [t for t in task_rows if t["run"] == run + 1 and t["state"] == "reserved"]
    if resizing:
        return len(resizing)
    live = ("starting", "running", "exited")
    return sum(1 for t in task_rows if t["run"] == run and t["state"] in live)


def _with_domains(view: dict[str, Any], service: Service) -> dict[str, Any]:
    """Each task's network domains (by level label), when the service has levels."""
    domains = {n["name"]: n["domains"] for n in service.loop.nodes_view if "domains" in n}
    for task in view.get("tasks", []) if domains else []:
        if task["node"] in domains:
            task["domains"] = domains[task["node"]]
    return view


def _running_domains(views: list[dict[str, Any]], service: Service) -> list[dict[str, Any]]:
    """Each running job's ``domains``: its running tasks' network domains (by level label),
    in task order, when the service has levels."""
    domains = {n["name"]: n["domains"] for n in service.loop.nodes_view if "domains" in n}
    if not domains:
        return views
    with service.loop.lock:
        running = service.loop.view.running_placements()
    tasks: dict[str, list[tuple[int, str]]] = {}
    for (job_id, task), placement in running.items():
        tasks.setdefault(job_id, []).append((task, placement.node))
    for view in views:
        held = sorted(tasks.get(view["id"], ()))
        if held:
            view["domains"] = [domains.get(node, {}) for _, node in held]
    return views


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
        #: a pending job's current reason (its explanation's summary: "no node fits ..."),
        #: where ``reason`` is the cause of its last transition ("submitted")
        "pending_reason": _pending_reason(row),
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
        # an element's row holds its array's spec: what it waits for and its indexes are
        # the array's, not its own
        "after": [] if row.get("array_of") else spec.get("after", []),
        "on_unmet": spec.get("on_unmet", "cancel"),
        "array": None if row.get("array_of") else spec.get("array"),
        "array_of": row.get("array_of"),
        "array_index": row.get("array_index"),
        **_shape_view(spec),
    }
    if task_rows is not None:
        view["count"] = _count(row, task_rows)
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


def _pending_reason(row: dict[str, Any]) -> str | None:
    explanation = row.get("explanation")
    if row["state"] != "pending" or not isinstance(explanation, dict):
        return None
    summary = explanation.get("summary")
    return str(summary) if summary else None


#: the views of a job and of its explanation, as the standby of a pair serves them too
job_view = _job_view
why_view = _why_view
