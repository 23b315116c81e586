"""Defragmentation in the openb experiment: when an arriving pod fits nowhere, move a few
placed pods so that it fits.

The experiment has no time and no departures, so a move is instantaneous (every pod of the
study is taken to checkpoint and resume at once elsewhere), and the only guard that applies
is the budget: an arrival moves at most ``max_moved_fraction`` of the pods placed so far (at
most 1 % of the running pods per arrival by default), and each pod at most once. Moves are
made only for an arrival that fits nowhere and that they let in, so a run makes finitely
many (no loop).

The planner, per arrival that fits nowhere:

1. **Rank the nodes** (one numpy pass over all of them): on a node where the pod would fit
   empty, the moves a device request needs are, per eligible device, how many pods hold it
   when its free share is short (0 when it has room), summed over the ``count`` cheapest
   devices; a device holding a pod larger than the largest free share anywhere is out (that
   pod could go nowhere). A node short of CPU or memory needs at least one more move. The
   per-device pod counts and largest shares are kept as the pods come and go, an index of
   the fragments rather than a scan of the placements.
2. **On the cheapest nodes** (at most ``max_nodes``) the exact set: the fewest pods (largest
   shares first) that free the devices, then the pods with the most CPU (memory) until the
   pod fits; sets over the budget are skipped.
3. **Try a set**: release it, place the pod on that node, then put every released pod where
   the policy would (the hardest first; the same node on another device counts); a released
   pod that fits nowhere may in turn move others the same way, ``depth`` levels down, within
   the budget. The first set whose pods all land is kept; otherwise every change is undone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework
from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import Job, TaskRequest

__all__ = ["DefragOption", "OpenbDefrag"]

#: a device that cannot be freed (not eligible, or it holds a pod that could go nowhere)
_NEVER = 1 << 20
#: nodes tried for a moved pod that fits nowhere (a chain of moves)
_NESTED_NODES = 4
#: nodes tried for a moved pod that fits nowhere (a chain of moves)


@dataclass(frozen=True, slots=True)
class DefragOption:
    """How much an arrival may move: at most ``max_moved_fraction`` of the placed pods and,
    if set, at most ``max_moves`` pods; ``max_nodes`` candidate nodes are tried per pod, and
    a moved pod that fits nowhere may move others in turn, ``depth`` levels down."""

    max_moved_fraction: float = 0.01
    max_moves: int | None = None
    max_nodes: int = 8
    depth: int = 2

    def __post_init__(self) -> None:
        if not 0 < self.max_moved_fraction <= 1:
            raise ValueError(f"max_moved_fraction must be in (0, 1], got {self.max_moved_fraction}")
        if self.max_moves is not None and self.max_moves < 1:
            raise ValueError(f"max_moves must be at least 1, got {self.max_moves}")
        if self.max_nodes < 1:
            raise ValueError(f"max_nodes must be at least 1, got {self.max_nodes}")
        if self.depth < 0:
            raise ValueError(f"depth must be at least 0, got {self.depth}")


@dataclass(frozen=True, slots=True)
class _Pod:
    name: str
    job: Job
    placement: Placement

    @property
    def share(self) -> int:
        return sum(d.share for d in self.placement.devices)


class OpenbDefrag:
    """The placed pods of one run, indexed by node and device, and the moves made for
    arrivals that did not fit."""

    def __init__(self, state: ClusterState, framework: Framework, option: DefragOption) -> None:
        self.state = state
        self.framework = framework
        self.option = option
        #: pods moved, arrivals placed only thanks to moves, and the most pods one arrival
        #: moved with the budget it had then
        self.moved = 0
        self.rescued = 0
        self.most_moved = (0, 0)
        self._pods: dict[str, _Pod] = {}
        self._on_row: dict[int, set[str]] = {}
        self._on_slot: dict[tuple[int, int], dict[str, int]] = {}
        #: per device slot: pods on it, in all and per request (the index of fragments)
        self._count = np.zeros(state.dev_free.shape, np.int64)
        self._shapes: dict[TaskRequest, int] = {}
        self._requests: list[TaskRequest] = []
        self._per_shape = np.zeros((0, *state.dev_free.shape), np.int32)
        self._placed_per_shape = np.zeros(0, np.int64)
        self._groups: dict[_GroupKey, _Group] | None = None
        #: request -> rows where it fits an empty node (every placed pod may move)
        self._fits_empty: dict[TaskRequest, np.ndarray] = {}
        self._empty = ClusterState(state.nodes)
        #: per request seen: whether it fits somewhere, valid while the state's tick is
        #: ``_fits_tick``; and the slots it makes stuck
        self._fits = np.zeros(0, np.bool_)
        self._fits_tick = -1
        self._stuck_now: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._pods)

    # -- the index -----------------------------------------------------------------------

    def placed(self, name: str, job: Job, placement: Placement) -> None:
        """A pod was placed (allocated under ``name``)."""
        pod = _Pod(name, job, placement)
        self._pods[name] = pod
        on_shape = self._shape(job.resources)
        self._placed_per_shape[self._shapes[job.resources]] += 1
        row = self.state.node_index[placement.node]
        self._on_row.setdefault(row, set()).add(name)
        for device in placement.devices:
            at = self.state.device_index[device.device_id]
            self._on_slot.setdefault(at, {})[name] = device.share
            self._count[at] += 1
            on_shape[at] += 1

    def _forget(self, name: str) -> _Pod:
        pod = self._pods.pop(name)
        on_shape = self._per_shape[self._shapes[pod.job.resources]]
        self._placed_per_shape[self._shapes[pod.job.resources]] -= 1
        self._on_row[self.state.node_index[pod.placement.node]].discard(name)
        for device in pod.placement.devices:
            at = self.state.device_index[device.device_id]
            held = self._on_slot[at]
            del held[name]
            self._count[at] -= 1
            on_shape[at] -= 1
        return pod

    def _shape(self, request: TaskRequest) -> np.ndarray:
        """Pods of ``request`` per device slot (a view into the per-request counts)."""
        index = self._shapes.get(request)
        if index is None:
            index = self._shapes[request] = len(self._requests)
            self._requests.append(request)
            if index == len(self._per_shape):
                grown = np.zeros((2 * index + 8, *self.state.dev_free.shape), np.int32)
                grown[:index] = self._per_shape
                self._per_shape = grown
                self._placed_per_shape = np.concatenate(
                    [self._placed_per_shape, np.zeros(len(grown) - index, np.int64)]
                )
            self._groups = None
        counts: np.ndarray = self._per_shape[index]
        return counts

    def fits_somewhere(self, request: TaskRequest) -> bool:
        """Whether a task of ``request`` fits some node as the cluster is now, by free
        capacity alone (an estimate for ranking: the policy's own filter decides)."""
        self._shape(request)
        return bool(self._fit_now()[self._shapes[request]])

    def _fit_now(self) -> np.ndarray:
        """:meth:`fits_somewhere` for every request seen, computed once per state change:
        one pass over the nodes per group of requests for the same devices."""
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
        self._stuck_now = None
        return fits

    def _stuck(self) -> np.ndarray:
        """Device slots holding a pod that fits nowhere else now (so it cannot move)."""
        fits = self._fit_now()
        if self._stuck_now is None:
            # only the shapes that have placed pods and fit nowhere now
            placed = self._placed_per_shape[: len(fits)] > 0
            unfit = np.flatnonzero(placed & ~fits)
            stuck = np.asarray((self._per_shape[unfit] > 0).any(axis=0), np.bool_)
            self._stuck_now = stuck
        return self._stuck_now

    def budget(self) -> int:
        """Pods the next arrival may move."""
        budget = math.floor(self.option.max_moved_fraction * len(self._pods))
        if self.option.max_moves is not None:
            budget = min(budget, self.option.max_moves)
        return budget

    # -- making room ---------------------------------------------------------------------

    def place(self, name: str, job: Job) -> Placement | None:
        """Make room for a pod that fits nowhere, moving placed pods; its placement (not
        allocated), or None when no allowed set of moves makes room. On success the moves
        are made (allocated) and counted."""
        budget = self.budget()
        if budget <= 0:
            return None
        trial = _Trial(self, budget)
        placement = trial.make_room(name, job, self.option.depth)
        if placement is None:
            return None
        self.state.release(name)
        count = 0
        for moved, (pod_job, new) in trial.landed.items():
            count += self._forget(moved).placement != new
            self.placed(moved, pod_job, new)
        self.moved += count
        self.most_moved = max(self.most_moved, (count, budget))
        self.rescued += 1
        return placement

    def fits_empty(self, request: TaskRequest) -> np.ndarray:
        """Rows where a task of ``request`` fits an empty node."""
        mask = self._fits_empty.get(request)
        if mask is None:
            job = Job("probe", request)
            ctx = CycleContext(self._empty, job, request, what_if=True)
            mask = self._fits_empty[request] = self.framework.feasible(ctx).copy()
        return mask

    def ranked_rows(self, request: TaskRequest, limit: int) -> list[int]:
        """The nodes to try for ``request``, cheapest estimated moves first (see the module
        docstring), at most ``limit``."""
        state = self.state
        estimate = np.zeros(len(state), np.int64)
        if request.devices:
            choice = request.devices[0].primary
            need = SHARE_UNITS if choice.whole else choice.share
            eligible = state.device_mask(choice.device_class, choice.selector)
            free = state.dev_free
            cost = np.where(free >= need, 0, self._count)
            cost = np.where(eligible & ~self._stuck(), cost, _NEVER)
            if choice.count > 1:
                cost = np.sort(cost, axis=1)[:, : choice.count].sum(axis=1)
            else:
                cost = cost.min(axis=1)
            estimate += cost
        estimate += state.cpu_free < request.cpu_milli
        estimate += state.mem_free < request.memory_mib
        mask = self.fits_empty(request) & (estimate < _NEVER) & (estimate > 0)
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            return []
        order = np.lexsort((rows, -state.cpu_free[rows], estimate[rows]))
        return [int(r) for r in rows[order[:limit]]]


class _Trial:
    """The changes of one attempt to make room, each logged so that all can be undone."""

    def __init__(self, owner: OpenbDefrag, budget: int) -> None:
        self.owner = owner
        self.budget = budget
        self.state = owner.state
        #: pods released by this trial (each at most once), and where each landed
        self.moved: list[str] = []
        self.gone: set[str] = set()
        self.landed: dict[str, tuple[Job, Placement]] = {}
        self._log: list[tuple[bool, str, Placement]] = []

    def _alloc(self, key: str, placement: Placement) -> None:
        self.state.allocate(key, placement)
        self._log.append((True, key, placement))

    def _free(self, key: str) -> None:
        self._log.append((False, key, self.state.release(key)))

    def _undo(self, mark: int, moved: int) -> None:
        while len(self._log) > mark:
            allocated, key, placement = self._log.pop()
            if allocated:
                self.state.release(key)
            else:
                self.state.allocate(key, placement)
        for name in self.moved[moved:]:
            self.landed.pop(name, None)
            self.gone.discard(name)
        del self.moved[moved:]

    def make_room(
        self, name: str, job: Job, depth: int, nodes: int | None = None
    ) -> Placement | None:
        """Allocate ``job`` under ``name`` on one of the ``nodes`` cheapest nodes, moving
        pods within the budget (``depth`` levels of moves); its placement, or None with
        nothing changed."""
        owner = self.owner
        limit = owner.option.max_nodes if nodes is None else nodes
        for row in owner.ranked_rows(job.resources, limit):
            group = self._evictees(job.resources, row)
            if group is None or len(self.moved) + len(group) > self.budget:
                continue
            placement = self._try(name, job, row, group, depth)
            if placement is not None:
                return placement
        return None

    def _evictees(self, request: TaskRequest, row: int) -> list[_Pod] | None:
        """The fewest pods on ``row`` whose move lets ``request`` fit there (see the module
        docstring), or None; pods this trial moved already stay."""
        owner, state = self.owner, self.state
        here = [owner._pods[n] for n in owner._on_row.get(row, ()) if n not in self.gone]
        chosen: dict[str, _Pod] = {}
        if request.devices:
            group = self._device_evictees(request, row)
            if group is None:
                return None
            chosen.update((p.name, p) for p in group)
        for need, dimension in (
            (request.cpu_milli - int(state.cpu_free[row]), 0),
            (request.memory_mib - int(state.mem_free[row]), 1),
        ):
            freed = sum(_held(p, dimension) for p in chosen.values())
            rest = sorted(
                (p for p in here if p.name not in chosen),
                key=lambda p: (p.share, -_held(p, dimension)),
            )
            for pod in rest:
                if freed >= need:
                    break
                if _held(pod, dimension) > 0:
                    chosen[pod.name] = pod
                    freed += _held(pod, dimension)
            if freed < need:
                return None
        return list(chosen.values())

    def _device_evictees(self, request: TaskRequest, row: int) -> list[_Pod] | None:
        owner, state = self.owner, self.state
        choice = request.devices[0].primary
        need = SHARE_UNITS if choice.whole else choice.share
        eligible = state.device_mask(choice.device_class, choice.selector)[row]
        costs: list[tuple[int, int, list[_Pod]]] = []
        for found in np.flatnonzero(eligible):
            slot = int(found)
            have = int(state.dev_free[row, slot])
            held = owner._on_slot.get((row, slot), {})
            group: list[_Pod] = []
            for pod_name, share in sorted(held.items(), key=lambda t: (-t[1], t[0])):
                if have >= need:
                    break
                if pod_name in self.gone:
                    continue
                group.append(owner._pods[pod_name])
                have += share
            if have >= need:
                costs.append((len(group), slot, group))
        if len(costs) < choice.count:
            return None
        costs.sort(key=lambda c: (c[0], c[1]))
        return [p for c in costs[: choice.count] for p in c[2]]

    def _try(
        self, name: str, job: Job, row: int, group: Sequence[_Pod], depth: int
    ) -> Placement | None:
        """Release ``group``, place ``job`` on ``row``, then place every released pod
        elsewhere; undo it all unless everything lands."""
        mark, moved = len(self._log), len(self.moved)
        for pod in group:
            self._free(pod.name)
            self.moved.append(pod.name)
            self.gone.add(pod.name)
        only = np.zeros(len(self.state), np.bool_)
        only[row] = True
        ctx = CycleContext(self.state, job, job.resources, what_if=True)
        placement = self.owner.framework.select(ctx, candidates=only)
        if placement is not None:
            self._alloc(name, placement)
            if self._rehome(sorted(group, key=_hardness), depth):
                return placement
        self._undo(mark, moved)
        return None

    def _rehome(self, group: Sequence[_Pod], depth: int) -> bool:
        """Place every released pod of ``group`` where the policy would (allocated); one
        that fits nowhere makes room for itself, ``depth`` levels down."""
        framework = self.owner.framework
        for pod in group:
            ctx = CycleContext(self.state, pod.job, pod.job.resources, what_if=True)
            placement = framework.select(ctx)
            if placement is not None:
                self._alloc(pod.name, placement)
            elif depth > 0:
                placement = self.make_room(pod.name, pod.job, depth - 1, _NESTED_NODES)
            if placement is None:
                return False
            self.landed[pod.name] = (pod.job, placement)
        return True


#: requests for the same devices: (device class or None, selector, count)
_GroupKey = tuple[str | None, str | None, int]
#: their indexes, CPU, memory and per-device share needed, as arrays
_Group = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


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


def _held(pod: _Pod, dimension: int) -> int:
    return pod.placement.cpu_milli if dimension == 0 else pod.placement.memory_mib


def _hardness(pod: _Pod) -> tuple[int, int, int]:
    """The hardest pods to place first: more devices, a larger share, more CPU."""
    return (-len(pod.placement.devices), -pod.share, -pod.placement.cpu_milli)
