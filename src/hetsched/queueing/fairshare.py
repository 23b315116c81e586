"""fairshare: least recent usage first, with usage decaying by a half-life (as in Slurm).

Points: queue_sort. Args: ``half_life_s`` (> 0, default 7 days), ``by`` (``user`` or
``queue``), ``weights`` (as for drf).

Usage is the dominant share of the cluster an entity held, integrated over time with
exponential decay: usage from ``half_life_s`` ago counts half. Jobs of the entity with the
least ``decayed usage / weight`` go first; ties by current weighted dominant share (so that
entities with no history share fairly), then queue time and arrival.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hetsched.cluster.usage import DecayedUsage
from hetsched.framework.handle import DecayedView, QueuedJob, SchedulerHandle
from hetsched.framework.registry import register
from hetsched.queueing.drf import Drf, DrfArgs, entity_weight

__all__ = ["Fairshare", "FairshareArgs"]


class FairshareArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    half_life_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    by: Literal["user", "queue"] = "user"
    weights: dict[str, float] = Field(default_factory=dict)


@register("fairshare", FairshareArgs)
class Fairshare:
    """Least decayed past usage first."""

    name = "fairshare"

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        self.args = args if isinstance(args, FairshareArgs) else FairshareArgs()
        self.handle = handle
        self.strict = False
        # without a scheduler (a Framework built for placement alone) there is no usage
        self.decayed: DecayedView = (
            handle.track_usage(self.args.by, self.args.half_life_s)
            if handle is not None
            else DecayedUsage(self.args.half_life_s)
        )
        self._current = Drf(DrfArgs(by=self.args.by, weights=self.args.weights), handle)

    def usage(self, name: str) -> float:
        """Decayed usage (dominant-share seconds) per unit of weight."""
        weight = entity_weight(self.handle, self.args.by, self.args.weights, name)
        return float(self.decayed.value.get(name, 0.0)) / weight

    def sort_key(self, job: QueuedJob, now: float) -> tuple[Hashable, ...]:
        name = job.job.user if self.args.by == "user" else job.job.queue
        return (self.usage(name), self._current.share(name), job.queued_since, job.seq)

    def lane(self, job: QueuedJob) -> Hashable:
        name: str = job.job.user if self.args.by == "user" else job.job.queue
        return name

    def rank(self, job: QueuedJob) -> tuple[Hashable, ...]:
        return (job.queued_since, job.seq)
