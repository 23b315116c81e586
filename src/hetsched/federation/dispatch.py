"""A dispatch: one run of a job sent to one member."""

from __future__ import annotations

from dataclasses import dataclass

from hetsched.keys import TaskKey

__all__ = ["Dispatch"]


@dataclass(slots=True)
class Dispatch:
    """The federation's task ``key`` (a job run) sent to ``member`` in its incarnation."""

    key: TaskKey
    member: str
    incarnation: int
    #: the member's job id, once it accepted the job
    job_id: str | None = None
    #: the core asked to stop it
    stopping: bool = False
