"""drf: dominant resource fairness across users or queues, with weights.

Points: queue_sort. Args: ``by``: ``user`` (default) or ``queue``; ``weights``: name ->
weight (> 0; default 1, or the queue's ``weight`` from the profile's queue tree with
``by: queue``).

An entity's dominant share is the largest, over every flavor (cpu, memory, each device
class and each class/model, see ``hetsched.cluster.usage``), of what it holds divided by
the cluster's capacity in that flavor. Jobs of the entity with the smallest
``dominant share / weight`` go first (ties: queue time, then arrival). The core re-reads the
key of a job before trying it, so shares move as jobs start within one cycle (progressive
filling, as in the DRF paper). Each entity is a lane of the waiting queue: its jobs wait in
queue-time order, and its share is computed once per change of its usage.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hetsched.cluster.usage import capacity, dominant_share
from hetsched.framework.handle import QueuedJob, SchedulerHandle
from hetsched.framework.registry import register

__all__ = ["Drf", "DrfArgs", "entity_weight"]


class DrfArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    by: Literal["user", "queue"] = "user"
    weights: dict[str, float] = Field(default_factory=dict)


def entity_weight(
    handle: SchedulerHandle | None, by: str, weights: dict[str, float], name: str
) -> float:
    if name in weights:
        return max(weights[name], 1e-9)
    if by == "queue" and handle is not None:
        return float(handle.queue_weight(name))
    return 1.0


@register("drf", DrfArgs)
class Drf:
    """Smallest weighted dominant share first."""

    name = "drf"

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        self.args = args if isinstance(args, DrfArgs) else DrfArgs()
        self.handle = handle
        self.strict = False
        #: entity -> ((usage stamp, cluster version), weighted dominant share)
        self._shares: dict[str, tuple[tuple[int, int], float]] = {}

    def share(self, name: str) -> float:
        """The weighted dominant share of a user or queue now (0 without a scheduler).

        Computed once per change of the entity's usage (or of the cluster's capacity), not
        once per job: every waiting job of the entity reads the same value."""
        if self.handle is None:
            return 0.0
        ledger = self.handle.usage
        state = self.handle.cluster
        stamp = (ledger.stamp(self.args.by, name), state.version)
        cached = self._shares.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        book = ledger.by_user if self.args.by == "user" else ledger.by_queue
        usage = book.get(name)
        value = 0.0
        if usage:
            weight = entity_weight(self.handle, self.args.by, self.args.weights, name)
            value = dominant_share(usage, capacity(state)) / weight
        self._shares[name] = (stamp, value)
        return value

    def sort_key(self, job: QueuedJob, now: float) -> tuple[Hashable, ...]:
        name = job.job.user if self.args.by == "user" else job.job.queue
        return (self.share(name), job.queued_since, job.seq)

    def lane(self, job: QueuedJob) -> Hashable:
        name: str = job.job.user if self.args.by == "user" else job.job.queue
        return name

    def rank(self, job: QueuedJob) -> tuple[Hashable, ...]:
        return (job.queued_since, job.seq)
