"""priority: highest effective priority first, where waiting raises priority (aging).

Points: queue_sort. Args:

- ``aging_rate`` (priority points per second of waiting, >= 0, default 1/60): the effective
  priority of a pending job is ``priority + aging_rate * (now - queued_since)``, where
  ``queued_since`` is when it last entered the queue (submission or requeue);
- ``mode``: ``best_effort`` (default) or ``strict`` (as for fifo: nothing passes the head).

Ties: earlier ``queued_since``, then arrival order.

The bound: a job ``k`` that arrives after ``j`` is ordered before ``j`` only while
``p_k - p_j > aging_rate * (q_k - q_j)``, so no job arriving more than
``H_j = (P_max - p_j) / aging_rate`` seconds after ``j`` ever passes it (``P_max``: the highest
priority submitted). From ``q_j + H_j`` on, only the finite set of jobs queued before that
instant can be ahead of ``j``. With ``mode: strict`` or backfill (the head job holds a
reservation), each of those holds the head until it starts; if every job fits the cluster
alone and runs at most ``R`` seconds, ``j`` therefore starts within
``H_j + (n + 1) * R`` of ``q_j``, where ``n`` is the number of jobs ahead of ``j`` at
``q_j + H_j``, whatever arrives later. See docs/policies.md for the derivation.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hetsched.framework.handle import QueuedJob, SchedulerHandle
from hetsched.framework.registry import register

__all__ = ["Priority", "PriorityArgs"]


class PriorityArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    aging_rate: float = Field(default=1.0 / 60.0, ge=0)
    mode: Literal["strict", "best_effort"] = "best_effort"


def effective_priority(priority: float, queued_since: float, now: float, rate: float) -> float:
    return priority + rate * max(0.0, now - queued_since)


@register("priority", PriorityArgs)
class Priority:
    """Highest priority first; waiting jobs gain ``aging_rate`` points per second."""

    name = "priority"
    #: the key depends only on the job and the time: the core need not re-read it
    dynamic = False

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        self.args = args if isinstance(args, PriorityArgs) else PriorityArgs()
        self.strict = self.args.mode == "strict"

    def effective(self, job: QueuedJob, now: float) -> float:
        return effective_priority(job.job.priority, job.queued_since, now, self.args.aging_rate)

    def sort_key(self, job: QueuedJob, now: float) -> tuple[Hashable, ...]:
        return (-self.effective(job, now), job.queued_since, job.seq)

    def lane(self, job: QueuedJob) -> Hashable:
        # within one priority class, aging keeps the order of queue times: only jobs of
        # different classes change places, at a time that follows from their keys
        priority: int = job.job.priority
        return priority

    def rank(self, job: QueuedJob) -> tuple[Hashable, ...]:
        return (job.queued_since, job.seq)
