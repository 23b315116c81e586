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

**The work budget.** Without one, an arrival that fits nowhere and that no set lets in
tries every set on every ranked node, levels down, and where most arrivals fail (CPU-heavy
pod lists, where CPU runs out) that is almost all of a run's time. So the planner earns
``work_per_arrival`` units of work per arrival (placed or not) and spends one per node
ranking and one per policy call (placing the pod on a node, or a moved pod anywhere); one
arrival spends at most ``max_work``, and none is planned when less than one unit is left.
A run's planning is then at most ``work_per_arrival`` units (rankings or policy calls) per
arrival on top of the plain run's one policy call. The units an arrival that fits does not
spend are saved, so the first failures, where most pods can still move and most rescues
happen, may spend up to ``max_work`` each. And a request a plan found no room for is not
planned again, nor one that asks for at least as much on the same devices, until a move
has been made: without departures, placements only take capacity, so only a move can make
room that was not there (the planner is greedy, so this is its own rule, not a proof).
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
from hetsched.sim.experiments.openb_shapes import ShapeIndex

__all__ = ["MAX_WORK", "WORK_PER_ARRIVAL", "DefragOption", "OpenbDefrag"]

#: a device that cannot be freed (not eligible, or it holds a pod that could go nowhere)
_NEVER = 1 << 20
#: nodes tried for a moved pod that fits nowhere (a chain of moves)
_NESTED_NODES = 4
#: the work budget's defaults: units earned per arrival, and spent by one arrival at most
WORK_PER_ARRIVAL = 4.0
MAX_WORK = 64


@dataclass(frozen=True, slots=True)
class DefragOption:
    """How much an arrival may move: at most ``max_moved_fraction`` of the placed pods and,
    if set, at most ``max_moves`` pods; ``max_nodes`` candidate nodes are tried per pod, and
    a moved pod that fits nowhere may move others in turn, ``depth`` levels down.

    How much the planner may work (see the module docstring): it earns
    ``work_per_arrival`` units per arrival and one arrival's plan spends at most
    ``max_work``; None plans every arrival that fits nowhere in full (the unbudgeted
    planner, whose cost has no bound)."""

    max_moved_fraction: float = 0.01
    max_moves: int | None = None
    max_nodes: int = 8
    depth: int = 2
    work_per_arrival: float | None = WORK_PER_ARRIVAL
    max_work: int = MAX_WORK

    def __post_init__(self) -> None:
        if not 0 < self.max_moved_fraction <= 1:
            raise ValueError(f"max_moved_fraction must be in (0, 1], got {self.max_moved_fraction}")
        if self.max_moves is not None and self.max_moves < 1:
            raise ValueError(f"max_moves must be at least 1, got {self.max_moves}")
        if self.max_nodes < 1:
            raise ValueError(f"max_nodes must be at least 1, got {self.max_nodes}")
        if self.depth < 0:
            raise ValueError(f"depth must be at least 0, got {self.depth}")
        if self.work_per_arrival is not None and not self.work_per_arrival > 0:
            raise ValueError(f"work_per_arrival must be above 0, got {self.work_per_arrival}")
        if self.max_work < 1:
            raise ValueError(f"max_work must be at least 1, got {self.max_work}")


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
        #: arrivals seen (placed or refused), work units spent, arrivals not planned (a
        #: refused request since the last move, or no work left), and the most work one
        #: arrival spent
        self.arrivals = 0
        self.work = 0
        self.skipped = 0
        self.most_work = 0
        #: requests refused since the ``_refused_at``-th rescue
        self._refused: list[TaskRequest] = []
        self._refused_at = 0
        self._pods: dict[str, _Pod] = {}
        self._on_row: dict[int, set[str]] = {}
        self._on_slot: dict[tuple[int, int], dict[str, int]] = {}
        #: per device slot: pods on it, in all and per request (the index of fragments)
        self._count = np.zeros(state.dev_free.shape, np.int64)
        self._shapes = ShapeIndex(state)
        #: request -> rows where it fits an empty node (every placed pod may move)
        self._fits_empty: dict[TaskRequest, np.ndarray] = {}
        self._empty = ClusterState(state.nodes)

    def __len__(self) -> int:
        return len(self._pods)

    # -- the index -----------------------------------------------------------------------

    def placed(self, name: str, job: Job, placement: Placement) -> None:
        """An arriving pod was placed (allocated under ``name``)."""
        self.arrivals += 1
        self._index(name, job, placement)

    def _index(self, name: str, job: Job, placement: Placement) -> None:
        pod = _Pod(name, job, placement)
        self._pods[name] = pod
        row = self.state.node_index[placement.node]
        self._on_row.setdefault(row, set()).add(name)
        slots = [self.state.device_index[d.device_id] for d in placement.devices]
        for at, device in zip(slots, placement.devices, strict=True):
            self._on_slot.setdefault(at, {})[name] = device.share
            self._count[at] += 1
        self._shapes.add(job.resources, slots)

    def _forget(self, name: str) -> _Pod:
        pod = self._pods.pop(name)
        self._on_row[self.state.node_index[pod.placement.node]].discard(name)
        slots = [self.state.device_index[d.device_id] for d in pod.placement.devices]
        for at in slots:
            del self._on_slot[at][name]
            self._count[at] -= 1
        self._shapes.add(pod.job.resources, slots, -1)
        return pod

    def fits_somewhere(self, request: TaskRequest) -> bool:
        """Whether a task of ``request`` fits some node as the cluster is now, by free
        capacity alone (an estimate for ranking: the policy's own filter decides)."""
        return self._shapes.fits_somewhere(request)

    def budget(self) -> int:
        """Pods the next arrival may move."""
        budget = math.floor(self.option.max_moved_fraction * len(self._pods))
        if self.option.max_moves is not None:
            budget = min(budget, self.option.max_moves)
        return budget

    # -- making room ---------------------------------------------------------------------

    def work_left(self) -> int | None:
        """Work units the next arrival may spend (None: no bound)."""
        per_arrival = self.option.work_per_arrival
        if per_arrival is None:
            return None
        earned = math.floor(per_arrival * self.arrivals) - self.work
        return max(0, min(self.option.max_work, earned))

    def place(self, name: str, job: Job) -> Placement | None:
        """Make room for a pod that fits nowhere, moving placed pods; its placement (not
        allocated), or None when no allowed set of moves makes room. On success the moves
        are made (allocated) and counted; the caller then reports the pod ``placed``."""
        budget, limit = self.budget(), self.work_left()
        if budget <= 0 or limit == 0 or self._was_refused(job.resources):
            self.skipped += budget > 0
            self.arrivals += 1
            return None
        trial = _Trial(self, budget, limit)
        placement = trial.make_room(name, job, self.option.depth)
        self.work += trial.spent
        self.most_work = max(self.most_work, trial.spent)
        if placement is None:
            self.arrivals += 1
            if limit is not None:
                self._refused.append(job.resources)
            return None
        self.state.release(name)
        count = 0
        for moved, (pod_job, new) in trial.landed.items():
            count += self._forget(moved).placement != new
            self._index(moved, pod_job, new)
        self.moved += count
        self.most_moved = max(self.most_moved, (count, budget))
        self.rescued += 1
        return placement

    def _was_refused(self, request: TaskRequest) -> bool:
        """Whether a budgeted plan found no room, since the last move, for a request that
        ``request`` needs at least as much as (allocations alone never make room)."""
        if self.option.work_per_arrival is None:
            return False
        if self._refused_at != self.rescued:
            self._refused.clear()
            self._refused_at = self.rescued
        return any(_at_least(request, refused) for refused in self._refused)

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
            cost = np.where(eligible & ~self._shapes.stuck(), cost, _NEVER)
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

    def __init__(self, owner: OpenbDefrag, budget: int, limit: int | None) -> None:
        self.owner = owner
        self.budget = budget
        #: work units this trial may spend (None: no bound), and spent
        self.limit = limit
        self.spent = 0
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

    def _spend(self) -> bool:
        """Spend a unit of work (a node ranking or a policy call); False when none is left."""
        if self.limit is not None and self.spent >= self.limit:
            return False
        self.spent += 1
        return True

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
        if not self._spend():
            return None
        for row in owner.ranked_rows(job.resources, limit):
            group = self._evictees(job.resources, row)
            if group is None or len(self.moved) + len(group) > self.budget:
                continue
            if not self._spend():
                return None
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
            if not self._spend():
                return False
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


def _at_least(request: TaskRequest, other: TaskRequest) -> bool:
    """``request`` asks for at least what ``other`` does, on the same devices: where no
    room can be made for ``other``, none can for ``request``."""
    if request.cpu_milli < other.cpu_milli or request.memory_mib < other.memory_mib:
        return False
    if request.node_selector != other.node_selector or request.tolerations != other.tolerations:
        return False
    if len(request.devices) != len(other.devices):
        return False
    for mine, theirs in zip(request.devices, other.devices, strict=True):
        if mine == theirs:
            continue
        if len(mine.choices) != 1 or len(theirs.choices) != 1:
            return False
        x, y = mine.primary, theirs.primary
        if (x.device_class, x.selector, x.count) != (y.device_class, y.selector, y.count):
            return False
        if x.share < y.share:
            return False
    return True


def _held(pod: _Pod, dimension: int) -> int:
    return pod.placement.cpu_milli if dimension == 0 else pod.placement.memory_mib


def _hardness(pod: _Pod) -> tuple[int, int, int]:
    """The hardest pods to place first: more devices, a larger share, more CPU."""
    return (-len(pod.placement.devices), -pod.share, -pod.placement.cpu_milli)
