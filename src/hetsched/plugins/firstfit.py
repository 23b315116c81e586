"""firstfit: the first feasible node in cluster order wins.

Points: score. Args: none.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register

__all__ = ["FirstFit"]


@register("firstfit")
class FirstFit:
    """Lowest node row first (the order nodes were declared in)."""

    name = "firstfit"
    row_local = True

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        pass

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        return np.asarray(100.0 * (1.0 - rows / max(len(ctx.state), 1)), np.float64)
