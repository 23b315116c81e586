"""bestfit: the node left with the least free resource after placement wins.

Points: score. Args: ``weights`` per dimension (cpu, memory, devices; default 1 each),
``truncate`` (default false: round scores down to whole numbers, as Kubernetes' integer node
scores do; the fragmentation study's BestFit baseline is ``weights: {memory: 0}`` with
``truncate: true``, and its ties are then settled by the framework's tie-break).
Score = 100 * (1 - weighted mean of leftover / largest node capacity).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register
from hetsched.model.job import TaskRequest
from hetsched.plugins._resources import demand, scale

__all__ = ["BestFit", "BestFitArgs", "BestFitScoreArgs", "DimensionWeights"]


class DimensionWeights(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cpu: float = Field(default=1.0, ge=0)
    memory: float = Field(default=1.0, ge=0)
    devices: float = Field(default=1.0, ge=0)

    def vector(self) -> FloatArray:
        weights = np.array([self.cpu, self.memory, self.devices], np.float64)
        total = weights.sum()
        return weights / total if total > 0 else np.full(3, 1 / 3)


class BestFitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weights: DimensionWeights = Field(default_factory=DimensionWeights)


class BestFitScoreArgs(BestFitArgs):
    truncate: bool = False


@register("bestfit", args=BestFitScoreArgs)
class BestFit:
    """Least leftover resource after placement (packs tightly)."""

    name = "bestfit"
    #: scores row by row, element by element (see Framework)
    row_local = True

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        assert isinstance(args, BestFitArgs)
        self._weights = args.weights.vector()
        self._truncate = isinstance(args, BestFitScoreArgs) and args.truncate

    def _coefficients(self, ctx: CycleContext) -> tuple[float, float, float, float]:
        """Per-dimension weights over the largest node's capacity, and the task's weighted
        demand: the same for every row of one cluster version and request (kept in the
        state's memo, which a topology change clears)."""
        state = ctx.state
        cached: dict[TaskRequest, tuple[float, float, float, float]] = state.memo(
            ("bestfit", id(self)), dict
        )
        found = cached.get(ctx.request)
        if found is None:
            coef = self._weights / scale(state)
            found = (float(coef[0]), float(coef[1]), float(coef[2]), float(demand(ctx) @ coef))
            cached[ctx.request] = found
        return found

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        # (free - demand) / scale @ w, written out per dimension: a matrix product may
        # round a row differently depending on the rows around it
        cpu, mem, devices, offset = self._coefficients(ctx)
        state = ctx.state
        leftover = (
            state.cpu_free[rows] * cpu
            + state.mem_free[rows] * mem
            + state.dev_free_total[rows] * devices
        ) - offset
        score = 100.0 * (1.0 - leftover)
        return np.asarray(np.floor(score + 1e-9) if self._truncate else score, np.float64)
