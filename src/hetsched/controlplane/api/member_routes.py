"""The routes a federation uses to run jobs on this service as one of its members.

- ``POST /v1/federation/lease`` (admin): renew a federation's lease by nonce
  (``controlplane/fencing.py``) and, in the same answer, report the states of the federation's
  jobs it names and this service's nodes with their free capacity. One round trip per
  renewal is all a federation needs to keep its jobs here alive and to follow them.
- ``POST /v1/whatif`` (any token): for each job of a batch (the body of
  ``POST /v1/jobs/batch``), would it fit here now, when, or never
  (``hetsched.scheduler.whatif``). Nothing is stored.

Jobs themselves come through ``POST /v1/jobs`` with ``federation`` set, which is refused
(409) unless that federation holds a live lease here.
"""

import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hetsched.controlplane.fencing import FEDERATION_NAME, Fencing
from hetsched.controlplane.schemas import InvalidBody, error_lines, parse_batch
from hetsched.controlplane.storage.store import Principal, Store
from hetsched.scheduler.view import SchedulerView

__all__ = ["MAX_WHATIF_JOBS", "LeaseRequest", "MemberService", "add_member_routes"]

#: jobs one what-if request may ask about
MAX_WHATIF_JOBS = 500

_JobId = Annotated[str, Field(min_length=1, max_length=64)]
#: task states whose process may still run
_ACTIVE_TASKS = ("starting", "running", "stopping")


class _Loop(Protocol):
    nodes_view: list[dict[str, Any]]
    lock: threading.Lock

    @property
    def view(self) -> SchedulerView: ...


class MemberService(Protocol):
    """What the member routes read of the service (its store, its leases, its loop)."""

    @property
    def store(self) -> Store: ...

    @property
    def fencing(self) -> Fencing | None: ...

    @property
    def loop(self) -> _Loop: ...


class LeaseRequest(BaseModel):
    """A renewal: the federation, its lease, the nonce of an earlier answer (none on the
    first), and the ids of its jobs here whose states it wants."""

    model_config = ConfigDict(extra="forbid", strict=True)

    federation: str = Field(pattern=FEDERATION_NAME.pattern)
    lease_s: float = Field(gt=0, le=86_400)
    nonce: str | None = Field(default=None, min_length=1, max_length=64)
    jobs: list[_JobId] = Field(default_factory=list, max_length=20_000)


def add_member_routes(
    app: FastAPI,
    service: MemberService,
    caller: Callable[[Request], Awaitable[Principal]],
    admin_only: Callable[..., Principal],
) -> None:
    """Add the member routes to the service's app (see the module docstring). No
    postponed annotations in this module: FastAPI reads the routes' annotations, which
    name the dependencies given here."""
    Admin = Annotated[Principal, Depends(admin_only)]
    Caller = Annotated[Principal, Depends(caller)]

    def fencing() -> Fencing:
        if service.fencing is None:
            raise HTTPException(404, "this service takes no federated jobs")
        return service.fencing

    @app.post("/v1/federation/lease", tags=["federation"])
    def lease(body: LeaseRequest, who: Admin) -> dict[str, Any]:
        """Renew a federation's lease by the nonce of an earlier answer, and report its
        jobs' states and this service's nodes. A federation's jobs stop when its lease
        lapses, and renewals are refused until they have all ended."""
        leases = fencing()
        # a job is live while it has not ended or a task of it may still run (a cancelled
        # job's tasks get their SIGTERM and grace after its state says cancelled)
        active = Counter(t["job_id"] for t in service.store.tasks_in(_ACTIVE_TASKS))
        mine = {r["id"] for r in service.store.live_jobs() if _federation(r) == body.federation}
        mine |= {
            r["id"]
            for r in service.store.jobs_by_ids(sorted(active))
            if _federation(r) == body.federation
        }
        try:
            renewal = leases.renew(body.federation, body.lease_s, body.nonce, len(mine))
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        states = [
            {
                "id": row["id"],
                "state": row["state"],
                "reason": row["reason"],
                "exit_code": row["exit_code"],
                "run": row["run"],
                "started_at": row["started_at"],
                "ended_at": row["ended_at"],
                "fenced": leases.fenced(body.federation, row["submitted_at"], row["ended_at"]),
                "active_tasks": active.get(row["id"], 0),
            }
            for row in service.store.jobs_by_ids(body.jobs)
            if _federation(row) == body.federation
        ]
        return {**renewal.to_dict(), "jobs": states, "nodes": service.loop.nodes_view}

    @app.post("/v1/whatif", tags=["federation"])
    async def whatif(request: Request, who: Caller) -> Any:
        """For each job of ``{"jobs": [job, ...]}`` (at most 500): would it fit here now,
        and if not, in how many seconds (running jobs ending at their expected runtimes),
        or never. Capacity only: the queue ahead and quotas are not counted."""
        body = await request.body()
        return await run_in_threadpool(_what_if, service, body, who)


def _federation(row: dict[str, Any]) -> str | None:
    spec = row.get("spec") or {}
    value = spec.get("federation") if isinstance(spec, dict) else None
    return value if isinstance(value, str) else None


def _what_if(service: MemberService, body: bytes, who: Principal) -> dict[str, Any]:
    try:
        batch = parse_batch(body)
    except InvalidBody as exc:
        raise HTTPException(400, str(exc)) from None
    except ValidationError as exc:
        raise HTTPException(422, {"message": "invalid jobs", "errors": error_lines(exc)}) from None
    if len(batch.jobs) > MAX_WHATIF_JOBS:
        raise HTTPException(422, f"jobs: at most {MAX_WHATIF_JOBS} per what-if")
    now = time.time()
    jobs = [spec.to_job(f"whatif-{i}", who.user, now) for i, spec in enumerate(batch.jobs)]
    loop = service.loop
    with loop.lock:
        view = loop.view
        answers = [(view.what_if(job), view.now) for job in jobs]
    return {"answers": [answer.to_dict(at) for answer, at in answers]}
