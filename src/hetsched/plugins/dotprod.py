"""dotprod: dot-product alignment of the request with a node's free resources (Tetris).

Points: score. Args: ``prefer`` (``max``: Tetris, the node whose free vector points the
most along the request; ``min``: the node with the least free resource in the request's
direction, as the fragmentation study's DotProd baseline), ``weights`` per dimension.
Vectors are normalised by the largest node's capacity per dimension. ``truncate`` (default
false) scores as the reference simulator does instead: the integer ``trunc(100 * (1 - dot))``
(``min``) or ``trunc(100 * dot)`` (``max``), so nearby nodes tie and the framework's
tie-break settles them. The study's DotProd baseline is ``prefer: min``,
``weights: {memory: 0}``, ``truncate: true``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register
from hetsched.plugins._resources import demand, free, scale
from hetsched.plugins.bestfit import DimensionWeights

__all__ = ["DotProd"]


class DotProdArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    prefer: Literal["max", "min"] = "max"
    weights: DimensionWeights = Field(default_factory=DimensionWeights)
    truncate: bool = False


@register("dotprod", args=DotProdArgs)
class DotProd:
    """Alignment of the request with the free resources (Tetris)."""

    name = "dotprod"

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        assert isinstance(args, DotProdArgs)
        self._weights = args.weights.vector()
        self._sign = 1.0 if args.prefer == "max" else -1.0
        self._truncate = args.truncate

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        norm = scale(ctx.state)
        dot = free(ctx.state, rows) @ (demand(ctx) / norm / norm * self._weights)
        # dot is in 0..1: each normalised component is at most 1 and the weights sum to 1
        if self._truncate:
            return np.asarray(
                np.floor(100.0 * (dot if self._sign > 0 else 1.0 - dot) + 1e-9), np.float64
            )
        return np.asarray(50.0 + 50.0 * self._sign * dot)
