"""gpuclustering: put tasks of the same device shape together.

Points: score. Args: ``device_class`` (default ``gpu``).

The fragmentation study's GPU Clustering baseline. Each task has an affinity label: ``share``
(part of one device) or ``k`` whole devices. With the node's labels taken from the tasks it
holds, the integer tiers are:

- the node holds only tasks with the task's label: 75 + fill;
- it holds mixed labels including the task's: 50 + fill;
- it holds no device task: 25 + fill;
- it holds only other labels: fill;

where fill = ``25 * (cap - free) // cap``, free being the node's free device share and cap
that of the largest node (a fuller node scores higher within a tier). A task without
devices scores 0 everywhere.

The labels per node are kept from the cluster's allocations: new allocations are folded in
as they appear (dicts keep insertion order, so they are at the end); anything else (a
release, another cluster state) rebuilds them from scratch.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocKey, ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register
from hetsched.model.device import SHARE_UNITS
from hetsched.plugins._resources import device_ask

__all__ = ["GpuClustering", "GpuClusteringArgs"]


class GpuClusteringArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    device_class: str = "gpu"


@register("gpuclustering", args=GpuClusteringArgs)
class GpuClustering:
    """Tasks with the same device shape share nodes."""

    name = "gpuclustering"

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        assert isinstance(args, GpuClusteringArgs)
        self._class = args.device_class
        self._state: ClusterState | None = None
        self._seen: dict[AllocKey, Placement] = {}
        #: tasks per (node row, label); label 0 is "share", k is k whole devices
        self._labels: IntArray = np.zeros((0, 1), np.int64)

    def _label(self, state: ClusterState, placement: Placement) -> int:
        """The affinity label of a placement, or -1 if it holds no device of the class."""
        devices = [
            d
            for d in placement.devices
            if state.kinds[state.dev_kind[state.device_index[d.device_id]]].device_class
            == self._class
        ]
        if not devices:
            return -1
        return 0 if devices[0].share < SHARE_UNITS else len(devices)

    def _apply(self, state: ClusterState, placement: Placement, sign: int) -> None:
        label = self._label(state, placement)
        if label >= 0:
            self._labels[state.node_index[placement.node], label] += sign

    def _sync(self, state: ClusterState) -> None:
        allocations = state.allocations
        shape = (len(state), state.width + 1)
        if state is self._state and self._labels.shape == shape:
            # fold in the allocations added (or replaced) at the end since the last call
            for key in reversed(allocations):
                placement = allocations[key]
                old = self._seen.get(key)
                if old is placement:
                    break
                if old is not None:
                    self._apply(state, old, -1)
                self._apply(state, placement, +1)
                self._seen[key] = placement
            if len(self._seen) == len(allocations):
                return
        # first call, another state, or something was released: rebuild
        self._state = state
        self._labels = np.zeros(shape, np.int64)
        self._seen = dict(allocations)
        for placement in allocations.values():
            self._apply(state, placement, +1)

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        count, share, _ = device_ask(ctx.request, self._class)
        if count == 0:
            return np.zeros(rows.size, np.float64)
        state = ctx.state
        self._sync(state)
        label = 0 if count == 1 and share < SHARE_UNITS else count
        held = self._labels[rows]
        same = held[:, label] > 0 if label < held.shape[1] else np.zeros(rows.size, np.bool_)
        kinds = (held > 0).sum(axis=1)
        tier = np.where(same, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))
        slots = state.device_mask(self._class)
        cap = max(int(slots.sum(axis=1).max(initial=0)), 1) * SHARE_UNITS
        free = np.where(slots[rows], state.dev_free[rows], 0).sum(axis=1)
        fill = np.maximum(25 * (cap - free) // cap, 0)
        return np.asarray(tier + fill, np.float64)
