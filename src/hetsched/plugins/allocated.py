"""spread and mostallocated: the least-allocated and most-allocated node scores.

Points: score. Args: ``weights`` per dimension (cpu, memory, devices; default 1 each).
``spread`` (Kubernetes' LeastAllocated) favours the node with the most free fraction after
placement; ``mostallocated`` the one with the least. Dimensions a node lacks (devices on a
CPU-only node) count as fully free.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register
from hetsched.plugins._resources import capacity, demand, free
from hetsched.plugins.bestfit import BestFitArgs

__all__ = ["MostAllocated", "Spread", "free_fraction"]


def free_fraction(ctx: CycleContext, rows: IntArray, weights: FloatArray) -> FloatArray:
    """Weighted mean over dimensions of free / capacity after placement, per row."""
    cap = capacity(ctx.state, rows)
    left = free(ctx.state, rows) - demand(ctx)
    fraction = np.divide(left, cap, out=np.ones_like(left), where=cap > 0)
    return np.asarray(fraction @ weights)


@register("spread", args=BestFitArgs)
class Spread:
    """Most free fraction after placement (spreads load)."""

    name = "spread"

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        assert isinstance(args, BestFitArgs)
        self._weights = args.weights.vector()

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        return 100.0 * free_fraction(ctx, rows, self._weights)


@register("mostallocated", args=BestFitArgs)
class MostAllocated:
    """Least free fraction after placement (fills nodes before opening new ones)."""

    name = "mostallocated"

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        assert isinstance(args, BestFitArgs)
        self._weights = args.weights.vector()

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        return 100.0 * (1.0 - free_fraction(ctx, rows, self._weights))
