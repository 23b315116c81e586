"""fifo: jobs in submission order.

Points: queue_sort. Args: ``mode``: ``best_effort`` (default; a later job may start when the
head cannot) or ``strict`` (nothing passes the head of its queue: a job that cannot start
blocks every later job of the same queue). Ties (same submit time) keep arrival order.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from hetsched.framework.handle import QueuedJob, SchedulerHandle
from hetsched.framework.registry import register

__all__ = ["Fifo", "FifoArgs"]


class FifoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["strict", "best_effort"] = "best_effort"


@register("fifo", FifoArgs)
class Fifo:
    """Submission order."""

    name = "fifo"
    #: the key depends only on the job and the time: the core need not re-read it
    dynamic = False

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        mode = args.mode if isinstance(args, FifoArgs) else "best_effort"
        #: read by the core: a blocked job blocks the rest of its queue
        self.strict = mode == "strict"

    def sort_key(self, job: QueuedJob, now: float) -> tuple[Hashable, ...]:
        return (job.job.submit_time, job.seq)

    def lane(self, job: QueuedJob) -> Hashable:
        return ()

    def rank(self, job: QueuedJob) -> tuple[Hashable, ...]:
        return (job.job.submit_time, job.seq)
