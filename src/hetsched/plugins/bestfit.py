"""bestfit: the node left with the least free resource after placement wins.

Points: score. Args: ``weights`` per dimension (cpu, memory, devices; default 1 each).
Score = 100 * (1 - weighted mean of leftover / largest node capacity).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsched.framework.cycle import CycleContext
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register
from hetsched.plugins._resources import demand, free, scale

__all__ = ["BestFit", "DimensionWeights"]


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


@register("bestfit", args=BestFitArgs)
class BestFit:
    """Least leftover resource after placement (packs tightly)."""

    name = "bestfit"

    def __init__(self, args: BaseModel | None = None, handle: Any = None) -> None:
        assert isinstance(args, BestFitArgs)
        self._weights = args.weights.vector()

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        leftover = (free(ctx.state, rows) - demand(ctx)) / scale(ctx.state)
        return np.asarray(100.0 * (1.0 - leftover @ self._weights))
