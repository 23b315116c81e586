"""``POST /v1/checkpoints``: a task reports a checkpoint (``hetsched checkpoint``).

The caller is a task, not a user: it sends its own task key and the task token it was given
(``HETSCHED_TASK_TOKEN``, an HMAC of that key: service/tasktokens.py). A user's token is
refused here, and a task token is refused everywhere else (it is no user's token). The
report goes to the reconcile loop, which hands it to the core as ``TaskCheckpointed``; a
report for a run that no longer runs is dropped there (the answer cannot know it yet: 202).

No postponed annotations in this module: FastAPI reads the route's annotations.
"""

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from hetsched.agent.checkpoints import MAX_PATH_LENGTH, MAX_STEP, Report
from hetsched.keys import TaskKey
from hetsched.service.context import Service

__all__ = ["CheckpointBody", "add_checkpoint_routes"]


class CheckpointBody(BaseModel):
    """``{"task": "<job>/<task>#<run>", "step": N, "path": "..."}``"""

    model_config = ConfigDict(extra="forbid", strict=True)

    task: str = Field(min_length=5, max_length=300)
    step: int = Field(ge=0, le=MAX_STEP)
    path: str = Field(default="", max_length=MAX_PATH_LENGTH)


def add_checkpoint_routes(app: FastAPI, service: Service) -> None:
    """Add the route (see the module docstring)."""

    @app.post("/v1/checkpoints", status_code=202, tags=["tasks"])
    def checkpoint(body: CheckpointBody, request: Request) -> dict[str, Any]:
        """Report a checkpoint of the calling task: the step it reached and where it saved.
        Authenticated by the task's own token (``Authorization: Bearer
        $HETSCHED_TASK_TOKEN``), for its own task key only."""
        protocol = service.loop.checkpoints
        if protocol is None or protocol.deliver is None:
            raise HTTPException(404, "this service does not take checkpoint reports")
        try:
            key = TaskKey.parse(body.task)
        except ValueError as exc:
            raise HTTPException(422, f"task: {exc}") from None
        if "\x00" in body.path:
            raise HTTPException(422, "path: must not contain NUL")
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
        protocol.deliver(key, Report(body.step, body.path))
        return {"task": str(key), "step": body.step, "path": body.path, "accepted": True}
