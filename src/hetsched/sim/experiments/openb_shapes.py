"""The placed pods of an openb run by shape: per device slot, how many pods of each request
hold it, and which requests fit somewhere as the cluster is now.

Defragmentation (:mod:`hetsched.sim.experiments.openb_defrag`) ranks nodes with it: a
device holding a pod whose request fits nowhere else cannot be freed, since that pod could
go nowhere. "Fits somewhere" is by free capacity alone (an estimate for ranking; the
policy's own filter decides), one pass over the nodes per group of requests for the same
devices, computed again only after the state changed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hetsched.cluster.state import ClusterState
from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import TaskRequest

__all__ = ["ShapeIndex"]

#: requests for the same devices: (device class or None, selector, count)
_GroupKey = tuple[str | None, str | None, int]
#: their indexes, CPU, memory and per-device share needed, as arrays
_Group = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class ShapeIndex:
    """Pods per device slot and request, kept as pods come and go."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._shapes: dict[TaskRequest, int] = {}
        self._requests: list[TaskRequest] = []
        self._per_shape = np.zeros((0, *state.dev_free.shape), np.int32)
        self._placed = np.zeros(0, np.int64)
        self._groups: dict[_GroupKey, _Group] | None = None
        #: per request seen: whether it fits somewhere, valid while the state's tick is
        #: ``_fits_tick``; and the slots the unfit ones make stuck
        self._fits = np.zeros(0, np.bool_)
        self._fits_tick = -1
        self._stuck: np.ndarray | None = None

    def add(self, request: TaskRequest, slots: Sequence[tuple[int, int]], step: int = 1) -> None:
        """A pod of ``request`` on ``slots`` was placed (``step`` -1: it left)."""
        index = self._index(request)
        self._placed[index] += step
        on_shape = self._per_shape[index]
        for at in slots:
            on_shape[at] += step

    def _index(self, request: TaskRequest) -> int:
        index = self._shapes.get(request)
        if index is None:
            index = self._shapes[request] = len(self._requests)
            self._requests.append(request)
            if index == len(self._per_shape):
                grown = np.zeros((2 * index + 8, *self.state.dev_free.shape), np.int32)
                grown[:index] = self._per_shape
                self._per_shape = grown
                self._placed = np.concatenate(
                    [self._placed, np.zeros(len(grown) - index, np.int64)]
                )
            self._groups = None
        return index

    def fits_somewhere(self, request: TaskRequest) -> bool:
        """Whether a task of ``request`` fits some node as the cluster is now, by free
        capacity alone."""
        index = self._index(request)
        return bool(self._fit_now()[index])

    def _fit_now(self) -> np.ndarray:
        """:meth:`fits_somewhere` for every request seen, computed once per state change."""
        state = self.state
        if self._fits_tick == state.tick and self._groups is not None:
            return self._fits
        if self._groups is None:
            self._groups = _group(self._requests)
        fits = np.zeros(len(self._requests), np.bool_)
        for (device_class, selector, count), (indexes, cpu, mem, need) in self._groups.items():
            rows = state.active
            if device_class is not None:
                free = np.where(state.device_mask(device_class, selector), state.dev_free, -1)
                if count > 1:
                    # the count-th largest eligible free share per node
                    width = free.shape[1]
                    room = np.partition(free, width - count, axis=1)[:, width - count]
                else:
                    room = free.max(axis=1)
            else:
                room = np.zeros(len(state), np.int64)
            ok = (state.cpu_free >= cpu[:, None]) & (state.mem_free >= mem[:, None])
            ok &= (room >= need[:, None]) & rows
            fits[indexes] = ok.any(axis=1)
        self._fits = fits
        self._fits_tick = state.tick
        self._stuck = None
        return fits

    def stuck(self) -> np.ndarray:
        """Device slots holding a pod that fits nowhere else now (so it cannot move)."""
        fits = self._fit_now()
        if self._stuck is None:
            # only the shapes that have placed pods and fit nowhere now
            placed = self._placed[: len(fits)] > 0
            unfit = np.flatnonzero(placed & ~fits)
            self._stuck = np.asarray((self._per_shape[unfit] > 0).any(axis=0), np.bool_)
        return self._stuck


def _group(requests: Sequence[TaskRequest]) -> dict[_GroupKey, _Group]:
    lists: dict[_GroupKey, list[tuple[int, int, int, int]]] = {}
    for index, request in enumerate(requests):
        key: _GroupKey = (None, None, 0)
        need: int = 0
        if request.devices:
            choice = request.devices[0].primary
            key = (choice.device_class, choice.selector, choice.count)
            need = SHARE_UNITS if choice.whole else choice.share
        lists.setdefault(key, []).append((index, request.cpu_milli, request.memory_mib, need))
    groups: dict[_GroupKey, _Group] = {}
    for key, rows in lists.items():
        table = np.array(rows, np.int64)
        groups[key] = (table[:, 0], table[:, 1], table[:, 2], table[:, 3])
    return groups
