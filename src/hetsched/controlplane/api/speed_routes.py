"""``GET /v1/speeds``: what the service learned of job types' speeds, and the ``speed``
part of ``GET /v1/jobs/{id}/why`` (controlplane/speedlearn.py).

No postponed annotations in this module: FastAPI reads the route's annotations.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request

from hetsched.controlplane.context import Service
from hetsched.controlplane.schemas import from_stored
from hetsched.controlplane.storage.store import Principal
from hetsched.model.speed import SpeedError, resolve

__all__ = ["add_speed_routes", "job_speed"]


def job_speed(service: Service, row: dict[str, Any]) -> dict[str, Any] | None:
    """Where a job's speeds come from (``job``: its speed map; ``profile``: its job type in
    the profile's table; ``learned``: its job type's estimates; ``none``: every model is
    equal), its rates per model as placement sees them now, its job type's estimates, and
    the rate its current run was last measured at. None without a learner."""
    learner = service.speeds
    if learner is None:
        return None
    job = from_stored(row["spec"]).to_job(row["id"], row["owner"], float(row["submitted_at"]))
    speed = job.speed
    job_type = speed.job_type
    source = "none" if job_type is None else learner.source(job_type)
    if speed.rates:
        source = "job"
    try:
        rates = dict(resolve(job, learner.table()).rates)
    except SpeedError:
        rates = {}
    measured = learner.measured(job.id, int(row["run"]))
    return {
        "job_type": job_type,
        "source": source,
        "rates": rates,
        "estimates": [e.as_dict() for e in learner.estimates(job_type)] if job_type else [],
        "measured": None
        if measured is None
        else {
            "model": measured.model,
            "steps": measured.steps,
            "at": measured.at,
            "steps_per_second": measured.rate,
        },
    }


def add_speed_routes(
    app: FastAPI, service: Service, caller: Callable[[Request], Awaitable[Principal]]
) -> None:
    """The learned speeds, for any valid token."""
    Caller = Annotated[Principal, Depends(caller)]

    @app.get("/v1/speeds", tags=["cluster"])
    def speeds(who: Caller) -> dict[str, Any]:
        """Per (job type, device model): the throughput learned from progress reports
        (steps/s of one device, an exponentially weighted mean), how many intervals it
        rests on and when it last changed; and the job types the profile's table lists
        (their table rates win over what is learned)."""
        learner = service.speeds
        if learner is None:
            return {"estimates": [], "profile_job_types": []}
        base = learner.base
        return {
            "estimates": [e.as_dict() for e in learner.estimates()],
            "profile_job_types": base.job_types() if base is not None else [],
        }
