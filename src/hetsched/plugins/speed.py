"""speed: a task goes where the job runs fastest, by its speed on each device model.

Points: score. Args: none. Score = 100 x (the job's rate on the fastest model of the
node's devices of the classes the task asks for) / (its fastest rate on any such model in
the cluster). Rates come from the job's speed model (:mod:`hetsched.model.speed`: its
``speed`` map, else its ``job_type`` in the scheduler's throughput table, the handle's
``speed_table``). A job without speed information, a task without devices, or a job whose
speed cannot be resolved scores 100 everywhere, so the other scores decide alone, as
before speeds existed. Not in the default profile: add it with a weight, e.g.
``score: [bestfit, stranding, {name: speed, weight: 2}]``.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register
from hetsched.model.speed import SpeedError, Speeds, resolve

__all__ = ["Speed"]


@register("speed")
class Speed:
    """The node whose device model runs the job fastest wins."""

    name = "speed"
    #: scores row by row, element by element (see Framework)
    row_local = True

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        self._handle = handle

    def _speeds(self, ctx: CycleContext) -> Speeds | None:
        if not ctx.job.speed.known:
            return None
        table = None if self._handle is None else self._handle.speed_table
        try:
            speeds = resolve(ctx.job, table)
        except SpeedError:
            return None
        return None if speeds.uniform else speeds

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        out = np.full(len(rows), 100.0)
        classes = {r.primary.device_class for r in ctx.request.devices}
        speeds = self._speeds(ctx) if classes else None
        if speeds is None:
            return out
        nodes = ctx.state.nodes

        def rate(row: int) -> float:
            models = {d.model for d in nodes[row].devices if d.device_class in classes}
            return max((speeds.on(m) for m in models), default=0.0)

        best = max((rate(r) for r in range(len(nodes)) if ctx.state.active[r]), default=0.0)
        if best <= 0:
            return out
        return np.array([100.0 * rate(int(r)) / best for r in rows], np.float64)
