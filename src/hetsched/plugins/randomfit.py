"""random: a uniformly random feasible node, and a random device for a shared task.

Points: score, device choice (``choose_devices``). Args: ``seed`` (default 0; the same seed
gives the same choices for the same sequence of calls), ``device_class`` (default ``gpu``).

The fragmentation study's Random baseline: every feasible node gets a fresh uniform score
on each attempt, so the best is a uniform draw. A shared task (one device, share below
1000) takes a uniformly random eligible device with room; whole devices are left to the
default choice (which ones does not change fragmentation).

Only real placements draw from the stream: a what-if trial (``CycleContext.what_if``:
backfill, preemption, ``why``) draws from a copy of it, so whether trials ran never changes
the choices that follow.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsched.cluster.placement import DeviceShare
from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register
from hetsched.model.device import SHARE_UNITS
from hetsched.plugins._resources import device_ask

__all__ = ["RandomFit", "RandomFitArgs"]


class RandomFitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    seed: int = 0
    device_class: str = "gpu"


@register("random", args=RandomFitArgs)
class RandomFit:
    """A uniformly random feasible node."""

    name = "random"

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        assert isinstance(args, RandomFitArgs)
        self._rng = np.random.default_rng(args.seed)
        self._class = args.device_class

    def _stream(self, ctx: CycleContext) -> np.random.Generator:
        if not ctx.what_if:
            return self._rng
        copy = type(self._rng.bit_generator)()
        copy.state = self._rng.bit_generator.state
        return np.random.Generator(copy)

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        return np.asarray(100.0 * self._stream(ctx).random(rows.size), np.float64)

    def choose_devices(self, ctx: CycleContext, row: int) -> tuple[DeviceShare, ...] | None:
        count, share, selector = device_ask(ctx.request, self._class)
        if count != 1 or share >= SHARE_UNITS or len(ctx.request.devices) != 1:
            return None
        state = ctx.state
        room = state.device_mask(self._class, selector)[row] & (state.dev_free[row] >= share)
        slots = np.flatnonzero(room)
        if slots.size == 0:
            return None
        slot = int(slots[self._stream(ctx).integers(slots.size)])
        return (DeviceShare(state.device_id(row, slot), share),)
