"""Resource vectors shared by the score plugins: (cpu, memory, device share) per node.

Device share is summed over all healthy device slots of a node whatever their class, so a
CPU-only task sees a GPU node's idle devices as leftover (and best-fit keeps it off them).
Each dimension is normalised by the largest node's capacity in that dimension, so scores
compare across nodes of different sizes.
"""

from __future__ import annotations

import numpy as np

from hetsched.cluster.state import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import TaskRequest

__all__ = ["DeviceAsk", "capacity", "demand", "device_ask", "free", "scale"]

#: (count, share per device, selector) of a task's request for one device class
DeviceAsk = tuple[int, int, str | None]


def device_ask(request: TaskRequest, device_class: str) -> DeviceAsk:
    """What the task asks of ``device_class``: its first such request's primary choice, or
    (0, 0, None) without one. The GPU-share scores (gpupacking, gpuclustering, fgd, random)
    model a task as one such ask, as the Alibaba trace does."""
    for device_request in request.devices:
        choice = device_request.primary
        if choice.device_class == device_class:
            return choice.count, choice.share, choice.selector
    return 0, 0, None


def demand(ctx: CycleContext) -> FloatArray:
    """The task's request as (cpu milli, memory MiB, device milli-units), first alternatives."""
    request = ctx.request
    devices = sum(d.primary.count * d.primary.share for d in request.devices)
    return np.array([request.cpu_milli, request.memory_mib, devices], np.float64)


def free(state: ClusterState, rows: IntArray) -> FloatArray:
    """Free (cpu, memory, device share) of ``rows``, shape (len(rows), 3)."""
    out = np.empty((len(rows), 3), np.float64)
    out[:, 0] = state.cpu_free[rows]
    out[:, 1] = state.mem_free[rows]
    out[:, 2] = state.dev_free_total[rows]
    return out


def capacity(state: ClusterState, rows: IntArray) -> FloatArray:
    """Total (cpu, memory, device share) of ``rows``, shape (len(rows), 3)."""
    devices = state.memo(
        "device_capacity",
        lambda: np.where(state.dev_healthy, SHARE_UNITS, 0).sum(axis=1),
    )[rows]
    return np.stack([state.cpu_cap[rows], state.mem_cap[rows], devices], axis=1).astype(np.float64)


def scale(state: ClusterState) -> FloatArray:
    """The largest node's capacity per dimension (at least 1), for normalisation."""

    def compute() -> FloatArray:
        rows = np.flatnonzero(state.active)
        if rows.size == 0:
            return np.ones(3)
        return np.asarray(np.maximum(capacity(state, rows).max(axis=0), 1.0), np.float64)

    return state.memo("scale", compute)
