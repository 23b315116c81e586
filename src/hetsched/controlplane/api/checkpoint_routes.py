"""``POST /v1/checkpoints``: a task reports a checkpoint (``hetsched checkpoint``);
``POST /v1/progress``: a task reports the steps its job has done (``hetsched progress``).

The caller is a task, not a user: it sends its own task key and the task token it was given
(``HETSCHED_TASK_TOKEN``, an HMAC of that key: controlplane/tasktokens.py). A user's token is
refused here, and a task token is refused everywhere else (it is no user's token). The
report goes to the reconcile loop, which hands it to the core as ``TaskCheckpointed``; a
report for a run that no longer runs is dropped there (the answer cannot know it yet: 202).
A progress report goes to the service's speed learner (controlplane/speedlearn.py), dated when
it arrives.

No postponed annotations in this module: FastAPI reads the route's annotations.
"""

import time
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from hetsched.agent.checkpoints import MAX_PATH_LENGTH, MAX_STEP, Report
from hetsched.agent.progress import Progress
from hetsched.controlplane.context import Service
from hetsched.keys import TaskKey

__all__ = ["CheckpointBody", "ProgressBody", "add_checkpoint_routes"]


class CheckpointBody(BaseModel):
    """``{"task": "<job>/<task>#<run>", "step": N, "path": "..."}``"""

    model_config = ConfigDict(extra="forbid", strict=True)

    task: str = Field(min_length=5, max_length=300)
    step: int = Field(ge=0, le=MAX_STEP)
    path: str = Field(default="", max_length=MAX_PATH_LENGTH)


class ProgressBody(BaseModel):
    """``{"task": "<job>/<task>#<run>", "steps": N}``"""

    model_config = ConfigDict(extra="forbid", strict=True)

    task: str = Field(min_length=5, max_length=300)
    steps: int = Field(ge=0, le=MAX_STEP)


def _calling_task(service: Service, task: str, request: Request) -> TaskKey:
    """The task key the caller reports for, once its token is checked (else 401/429)."""
    protocol = service.loop.checkpoints
    assert protocol is not None
    try:
        key = TaskKey.parse(task)
    except ValueError as exc:
        raise HTTPException(422, f"task: {exc}") from None
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not protocol.tokens.check(key, token.strip()):
        client = request.client.host if request.client else "?"
        wait = service.auth_failures.allow(client)
        if wait:
            raise HTTPException(
                429, "too many failed authentications", {"Retry-After": f"{wait:.0f}"}
            )
        raise HTTPException(401, "not the token of that task", {"WWW-Authenticate": "Bearer"})
    wait = service.limiter.allow(f"task:{key}")
    if wait:
        raise HTTPException(429, "rate limit exceeded", {"Retry-After": f"{max(wait, 1):.0f}"})
    return key


def add_checkpoint_routes(app: FastAPI, service: Service) -> None:
    """Add the routes (see the module docstring)."""

    @app.post("/v1/checkpoints", status_code=202, tags=["tasks"])
    def checkpoint(body: CheckpointBody, request: Request) -> dict[str, Any]:
        """Report a checkpoint of the calling task: the step it reached and where it saved.
        Authenticated by the task's own token (``Authorization: Bearer
        $HETSCHED_TASK_TOKEN``), for its own task key only."""
        protocol = service.loop.checkpoints
        if protocol is None or protocol.deliver is None:
            raise HTTPException(404, "this service does not take checkpoint reports")
        if "\x00" in body.path:
            raise HTTPException(422, "path: must not contain NUL")
        key = _calling_task(service, body.task, request)
        protocol.deliver(key, Report(body.step, body.path))
        return {"task": str(key), "step": body.step, "path": body.path, "accepted": True}

    @app.post("/v1/progress", status_code=202, tags=["tasks"])
    def progress(body: ProgressBody, request: Request) -> dict[str, Any]:
        """Report the steps the calling task's job has done so far in this run (a counter
        that grows): the service learns the job type's speed on its device model from the
        rate between reports. Authenticated by the task's own token, as checkpoints are."""
        protocol = service.loop.checkpoints
        if protocol is None or protocol.deliver_progress is None:
            raise HTTPException(404, "this service does not take progress reports")
        key = _calling_task(service, body.task, request)
        protocol.deliver_progress(key, Progress(body.steps, time.time()))
        return {"task": str(key), "steps": body.steps, "accepted": True}
