"""bestfit: the node left with the least free resource after placement wins.

Points: score. Args: ``weights`` per dimension (cpu, memory, devices; default 1 each),
``truncate`` (default false: round scores down to whole numbers, as Kubernetes' integer node
scores do; the fragmentation study's BestFit baseline is ``weights: {memory: 0}`` with
``truncate: true``, and its ties are then settled by the framework's tie-break).
Score = 100 * (1 - weighted mean of leftover / largest node capacity).

The weighted free capacity of every node (the request-independent part of the leftover) is
kept per cluster state and brought up to date on the rows allocated on or released from
since it was last read, so a score costs a few operations on the scored rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsched.cluster.perstate import PerState
from hetsched.cluster.state import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register
from hetsched.model.job import TaskRequest
from hetsched.plugins._resources import demand, scale

__all__ = ["BestFit", "BestFitArgs", "BestFitScoreArgs", "DimensionWeights"]


class DimensionWeights(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    cpu: float = Field(default=1.0, ge=0)
    memory: float = Field(default=1.0, ge=0)
    devices: float = Field(default=1.0, ge=0)

    def vector(self) -> FloatArray:
        weights = np.array([self.cpu, self.memory, self.devices], np.float64)
        total = weights.sum()
        return weights / total if total > 0 else np.full(3, 1 / 3)


class BestFitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    weights: DimensionWeights = Field(default_factory=DimensionWeights)


class BestFitScoreArgs(BestFitArgs):
    truncate: bool = False


@dataclass(slots=True, eq=False)
class _WeightedFree:
    """cpu free x w_cpu + memory free x w_mem + device share free x w_dev per row, as of
    ``tick`` and ``version`` of one state."""

    tick: int
    version: int
    values: FloatArray
    #: the weights over the largest node's capacity per dimension (cpu, memory, devices)
    coef: FloatArray
    per_dimension: tuple[float, float, float]
    #: request -> its weighted demand
    offsets: dict[TaskRequest, float]


#: past this many changes, the weighted free capacity is updated by numpy, not row by row
_BY_ROW = 8
#: up to this many rows are scored one by one in plain Python, more with numpy
_PYTHON_ROWS = 16


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
        self._free: PerState[_WeightedFree] = PerState()

    def _kept(self, state: ClusterState) -> _WeightedFree:
        """The weighted free capacity of ``state`` brought up to date (the arithmetic of
        the whole-array expression, element by element, so a row updated on its own has
        the same bits)."""
        kept = self._free.get(state)
        if kept is None or kept.version != state.version or kept.values.size != len(state):
            # per-dimension weights over the largest node's capacity: the same for every row
            # of one cluster version
            coef = self._weights / scale(state)
            cpu, mem, dev = float(coef[0]), float(coef[1]), float(coef[2])
            values: FloatArray = (
                state.cpu_free * cpu + state.mem_free * mem + state.dev_free_total * dev
            )
            kept = _WeightedFree(state.tick, state.version, values, coef, (cpu, mem, dev), {})
            self._free.set(state, kept)
            return kept
        if kept.tick != state.tick:
            values = kept.values
            cpu, mem, dev = kept.per_dimension
            rows = state.recent_changes(kept.tick, _BY_ROW)
            if rows is None:
                changed = state.changed_since(kept.tick)
                values[changed] = (
                    state.cpu_free[changed] * cpu
                    + state.mem_free[changed] * mem
                    + state.dev_free_total[changed] * dev
                )
            else:
                cpu_free, mem_free, dev_free = state.cpu_free, state.mem_free, state.dev_free_total
                for row in set(rows):
                    values[row] = (
                        cpu_free.item(row) * cpu + mem_free.item(row) * mem
                    ) + dev_free.item(row) * dev
            kept.tick = state.tick
        return kept

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        # (free - demand) / scale @ w, written out per dimension: a matrix product may
        # round a row differently depending on the rows around it
        kept = self._kept(ctx.state)
        offset = kept.offsets.get(ctx.request)
        if offset is None:
            # the task's weighted demand
            offset = kept.offsets[ctx.request] = float(demand(ctx) @ kept.coef)
        if rows.size <= _PYTHON_ROWS and not self._truncate:
            # a cached request class rescores the few rows placements changed since it was
            # last used: the same operations on the same doubles in plain Python (numpy's
            # float64 arithmetic is Python's), without numpy's per-call cost
            values = kept.values
            return np.array(
                [100.0 * (1.0 - (values.item(row) - offset)) for row in rows.tolist()],
                np.float64,
            )
        leftover = kept.values[rows] - offset
        score = 100.0 * (1.0 - leftover)
        return np.asarray(np.floor(score + 1e-9) if self._truncate else score, np.float64)
