"""gpupacking: fill partly used devices first, then partly used nodes, then idle nodes.

Points: score. Args: ``device_class`` (default ``gpu``).

The fragmentation study's GPU Packing baseline, with its integer tiers:

1. the task fits on devices already in use: ``max(100 - sum(free%) // 10, 50)``, where the
   sum is over the devices it would take (best fit: the least free first), each device's
   free share in whole percent;
2. the node is in use but the task needs fully free devices: ``max(50 - devices taken, 33)``;
3. every device of the node is free: ``max(33 - devices, devices)`` (smaller nodes first).

A task without devices scores 0 everywhere.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register
from hetsched.model.device import SHARE_UNITS
from hetsched.plugins._resources import device_ask

__all__ = ["GpuPacking", "GpuPackingArgs"]


class GpuPackingArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    device_class: str = "gpu"


@register("gpupacking", args=GpuPackingArgs)
class GpuPacking:
    """Partly used devices first, then partly used nodes, then the smallest idle nodes."""

    name = "gpupacking"

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        assert isinstance(args, GpuPackingArgs)
        self._class = args.device_class

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        count, share, selector = device_ask(ctx.request, self._class)
        if count == 0:
            return np.zeros(rows.size, np.float64)
        state = ctx.state
        slots = state.device_mask(self._class)[rows]
        free = np.where(slots, state.dev_free[rows], 0)
        devices = slots.sum(axis=1)
        fully_free = (slots & (free >= SHARE_UNITS)).sum(axis=1)
        idle_node = np.maximum(33 - fully_free, fully_free)
        if count == 1 and share < SHARE_UNITS:
            room = state.device_mask(self._class, selector)[rows] & (free >= share)
            best = np.where(room, free, SHARE_UNITS + 1).min(axis=1)  # best fit device
            on_used = np.maximum(100 - (best * 100 // SHARE_UNITS) // 10, 50)
            in_use = np.where(best >= SHARE_UNITS, max(50 - 1, 33), on_used)
        else:
            in_use = np.full(rows.size, max(50 - count, 33))
        return np.asarray(np.where(fully_free == devices, idle_node, in_use), np.float64)
