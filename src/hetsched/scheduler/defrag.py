"""Defragmentation planning: which running jobs to move so that a job that fits nowhere fits.

A what-if shared by the core (which carries a plan out as Migrate actions) and the openb
experiment (which moves pods directly):

1. a task of the pending job that fits as the cluster is takes its place;
2. otherwise, the nodes where it would fit if every *mover* there were gone are the
   candidates. On each, the *targeted* set is what must go for the task to fit there: for
   its device request, the devices that need the least moved share (for a fraction of a
   device: the fewest movers on the one device it needs; for whole devices: every mover on
   the ``count`` least occupied eligible devices), then movers with the most CPU or memory
   when those fall short. Nodes are tried in the order of their targeted sets (fewest
   movers, then least share moved; at most ``max_nodes``). When no targeted set works, the
   first few nodes are also tried with small sets of their smallest movers (one, then
   pairs, ...);
3. the released movers must then fit elsewhere (where the profile would put them, with the
   task placed; the same node is allowed: a move from one device to another repairs
   fragmentation too) and pass ``accept`` (the core checks quotas there); if one does not,
   the next set is tried.

With ``hold_old`` (the core's case) a mover's destination is allocated while its old place
is still held (it stops after its notice), so destinations may use only capacity that is
free now and that the pending job does not need: the part of the movers' old places the
task does not take stays held on the fork. Without it (the openb experiment, where a move
is instantaneous) destinations may use any capacity the movers freed.

A plan moves each mover at most once and at most ``max_moves`` movers in all; the pending
job then fits once the movers have moved, and every mover fits where the plan puts it. The
planner works on a fork, or with ``in_place`` on the state itself, undoing every change
before it returns (cheaper where plugins keep per-state caches, as FGD does).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.cluster.state import AllocKey, ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework
from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import Job

__all__ = ["DefragPlan", "Mover", "MoverIndex", "plan_defrag"]

#: the fallback: nodes tried with small sets of movers, sets per node, movers considered
_FALLBACK_NODES = 4
_SETS_PER_NODE = 16
_MOVERS_PER_NODE = 8
#: candidate nodes whose targeted set is computed, per node tried
_SCAN_FACTOR = 4


@dataclass(frozen=True, slots=True)
class Mover:
    """A running job that may be moved: its id, the job, and what each task holds now."""

    id: str
    job: Job
    tasks: tuple[tuple[AllocKey, Placement], ...]

    @property
    def size(self) -> int:
        """Device milli-units, then CPU: what ordering by size compares."""
        return sum(sum(d.share for d in p.devices) * 10**7 + p.cpu_milli for _, p in self.tasks)


class MoverIndex:
    """Movers by node row, for a caller that keeps them between plans (the openb
    experiment: every placed pod, changed one at a time)."""

    def __init__(self, state: ClusterState, movers: Sequence[Mover] = ()) -> None:
        self._rows = state.node_index
        self.by_id: dict[str, Mover] = {}
        self.by_row: dict[int, dict[str, Mover]] = {}
        for mover in movers:
            self.add(mover)

    def __len__(self) -> int:
        return len(self.by_id)

    def add(self, mover: Mover) -> None:
        self.by_id[mover.id] = mover
        for row in {self._rows[p.node] for _, p in mover.tasks}:
            self.by_row.setdefault(row, {})[mover.id] = mover

    def remove(self, mover_id: str) -> None:
        mover = self.by_id.pop(mover_id, None)
        if mover is not None:
            for row in {self._rows[p.node] for _, p in mover.tasks}:
                self.by_row[row].pop(mover_id, None)


@dataclass(frozen=True, slots=True)
class DefragPlan:
    """Where the pending job's tasks go, and where each mover goes (one placement per
    task, in the order of ``Mover.tasks``)."""

    placements: tuple[Placement, ...]
    moves: tuple[tuple[Mover, tuple[Placement, ...]], ...]


#: a check of a mover's new placements (True: allowed)
Accept = Callable[[Mover, Sequence[Placement]], bool]


def plan_defrag(
    state: ClusterState,
    framework: Framework,
    job: Job,
    needed: int,
    movers: Sequence[Mover] | MoverIndex,
    max_moves: int,
    now: float = 0.0,
    max_nodes: int = 16,
    accept: Accept | None = None,
    hold_old: bool = True,
    candidates: Candidates | None = None,
    in_place: bool = False,
    depth: int = 0,
    within: np.ndarray | None = None,
) -> DefragPlan | None:
    """A plan that lets ``needed`` tasks of ``job`` start by moving at most ``max_moves`` of
    ``movers``, or None (see the module docstring). ``state`` is unchanged afterwards.

    ``candidates(job)``, when the caller knows it (a mask over node rows), is where a task
    of ``job`` would fit with every mover gone; it is computed here otherwise. With
    ``depth`` > 0 a mover that fits nowhere may itself move others to make room (chains of
    moves; only without ``hold_old``, where a move frees its old place at once). With
    ``within`` (a mask over node rows: a network domain) the tasks of ``job`` go there
    only; the movers go anywhere ``accept`` allows."""
    by_row = movers if isinstance(movers, MoverIndex) else MoverIndex(state, movers)
    if needed <= 0 or max_moves <= 0 or not len(by_row):
        return None
    work = state if in_place else state.fork()
    planner = _Planner(work, framework, now, by_row, accept, hold_old, candidates)
    planner.within = None if within is None else (job.id, within)
    depth = 0 if hold_old else depth
    try:
        placements: list[Placement] = []
        for _ in range(needed):
            placement = planner.place(job, max_moves - len(planner.moved), max_nodes, depth)
            if placement is None:
                return None
            placements.append(placement)
        if not planner.moved:
            return None  # it fits without moving anyone
        return DefragPlan(tuple(placements), tuple(planner.moved))
    finally:
        planner.rollback(0, 0)


#: where a job's task would fit with every mover gone (a mask over node rows), or None
Candidates = Callable[[Job], "np.ndarray | None"]


class _Planner:
    def __init__(
        self,
        state: ClusterState,
        framework: Framework,
        now: float,
        movers: MoverIndex,
        accept: Accept | None,
        hold_old: bool,
        candidates: Candidates | None,
    ) -> None:
        self.state = state
        self.hold_old = hold_old
        self.framework = framework
        self.now = now
        self.accept = accept
        self.index = movers
        self.candidates = candidates
        #: a job whose tasks may go to these rows only (its network domain)
        self.within: tuple[str, np.ndarray] | None = None
        self.keys = 0
        #: movers released by this plan (each at most once), and where they went
        self.gone: set[str] = set()
        self.moved: list[tuple[Mover, tuple[Placement, ...]]] = []
        #: every change made to the state, to undo: (allocated?, key, placement)
        self.log: list[tuple[bool, AllocKey, Placement]] = []

    # -- changes, each logged ------------------------------------------------------------

    def _alloc(self, key: AllocKey, placement: Placement) -> None:
        self.state.allocate(key, placement)
        self.log.append((True, key, placement))

    def _free(self, key: AllocKey) -> None:
        self.log.append((False, key, self.state.release(key)))

    def _key(self, owner: str, kind: str) -> str:
        """A fresh allocation key for a what-if placement of ``owner``."""
        self.keys += 1
        return f"{owner}/{kind}{self.keys}"

    def rollback(self, mark: int, moved: int) -> None:
        """Undo the changes logged after position ``mark``, and forget the moves after
        position ``moved``."""
        while len(self.log) > mark:
            allocated, key, placement = self.log.pop()
            if allocated:
                self.state.release(key)
            else:
                self.state.allocate(key, placement)
        for mover, _ in self.moved[moved:]:
            self.gone.discard(mover.id)
        del self.moved[moved:]

    def _ctx(self, job: Job) -> CycleContext:
        return CycleContext(self.state, job, job.resources, self.now, what_if=True)

    def _rows_for(self, job: Job) -> np.ndarray | None:
        """The rows ``job``'s tasks are confined to, or None: anywhere."""
        return self.within[1] if self.within and self.within[0] == job.id else None

    # -- placing a job -------------------------------------------------------------------

    def place(self, job: Job, budget: int, max_nodes: int, depth: int) -> Placement | None:
        """Place a task of ``job`` (allocated on the state), moving movers if it must."""
        placement = self.framework.select(self._ctx(job), candidates=self._rows_for(job))
        if placement is not None:
            self._alloc(self._key(job.id, "task"), placement)
            return placement
        if budget <= 0:
            return None
        return self._make_room(job, budget, max_nodes, depth, fallback=True)

    def _make_room(
        self, job: Job, budget: int, max_nodes: int, depth: int, fallback: bool
    ) -> Placement | None:
        for group, only in self._groups(job, budget, max_nodes, fallback):
            placement = self._try(job, group, only, budget, max_nodes, depth)
            if placement is not None:
                return placement
        return None

    def _groups(
        self, job: Job, budget: int, max_nodes: int, fallback: bool
    ) -> Iterator[tuple[tuple[Mover, ...], np.ndarray]]:
        """Sets of movers to try, with the one node each is for: targeted sets first, then
        small sets on the first few nodes."""
        rows = self._rows(job, max_nodes * _SCAN_FACTOR)
        targeted: list[tuple[int, int, int, tuple[Mover, ...]]] = []
        for row in rows:
            group = self._targeted(job, row)
            if group is not None and len(group) <= budget:
                moved = sum(m.size for m in group)
                targeted.append((len(group), moved, row, group))
        targeted.sort(key=lambda t: (t[0], t[1], t[2]))
        tried: set[tuple[str, ...]] = set()
        for _, _, row, group in targeted[:max_nodes]:
            tried.add(tuple(sorted(m.id for m in group)))
            yield group, _only(len(self.state), row)
        if not fallback:
            return
        for row in rows[:_FALLBACK_NODES]:
            here = sorted(self._here(job, row), key=lambda m: (m.size, m.id))
            sets = 0
            for count in range(1, min(budget, len(here)) + 1):
                for group in itertools.combinations(here[:_MOVERS_PER_NODE], count):
                    ids = tuple(sorted(m.id for m in group))
                    if ids in tried:
                        continue
                    sets += 1
                    if sets > _SETS_PER_NODE:
                        break
                    yield group, _only(len(self.state), row)
                if sets > _SETS_PER_NODE:
                    break

    def _rows(self, job: Job, limit: int) -> list[int]:
        """Nodes where a task of ``job`` would fit with every mover left there gone, the
        most free device capacity first."""
        mask = self.candidates(job) if self.candidates is not None else None
        if mask is None:
            empty = self.state.fork()
            for row in self.index.by_row:
                for mover in self._here(job, row):
                    for key, _ in mover.tasks:
                        if key in empty.allocations:
                            empty.release(key)
            ctx = CycleContext(empty, job, job.resources, self.now, what_if=True)
            mask = self.framework.feasible(ctx)
        confined = self._rows_for(job)
        if confined is not None:
            mask = mask & confined
        state = self.state
        rows = [int(r) for r in np.flatnonzero(mask) if self._here(job, int(r))]
        rows.sort(key=lambda r: (-int(state.dev_free_total[r]), -int(state.cpu_free[r]), r))
        return rows[:limit]

    def _here(self, job: Job, row: int) -> list[Mover]:
        """Movers on ``row`` that may move for ``job``: not moved yet, and not harder to
        place than it (one that is could go nowhere ``job`` cannot)."""
        return [
            m
            for m in self.index.by_row.get(row, {}).values()
            if m.id not in self.gone and m.job.id != job.id and not _harder(m.job, job)
        ]

    def _targeted(self, job: Job, row: int) -> tuple[Mover, ...] | None:
        """What must go for a task of ``job`` to fit on ``row`` (see the module docstring),
        or None when movers alone cannot make room there."""
        state = self.state
        request = job.resources
        node = state.nodes[row].name
        here = self._here(job, row)
        chosen: dict[str, Mover] = {}
        if request.devices:
            group = self._device_group(job, row, node, here)
            if group is None:
                return None
            chosen.update((m.id, m) for m in group)
        for need, dimension in (
            (request.cpu_milli - int(state.cpu_free[row]), 0),
            (request.memory_mib - int(state.mem_free[row]), 1),
        ):
            freed = sum(_held(m, node, dimension) for m in chosen.values())
            rest = sorted(
                (m for m in here if m.id not in chosen), key=lambda m: -_held(m, node, dimension)
            )
            for mover in rest:
                if freed >= need:
                    break
                chosen[mover.id] = mover
                freed += _held(mover, node, dimension)
            if freed < need:
                return None
        return tuple(chosen.values()) or None

    def _device_group(self, job: Job, row: int, node: str, here: list[Mover]) -> list[Mover] | None:
        state = self.state
        choice = job.resources.devices[0].primary
        need = SHARE_UNITS if choice.whole else choice.share
        eligible = state.device_mask(choice.device_class, choice.selector)[row]
        free = state.dev_free[row]
        on_slot: dict[int, list[tuple[int, Mover]]] = {}
        for mover in here:
            for _, placement in mover.tasks:
                if placement.node != node:
                    continue
                for device in placement.devices:
                    at = state.device_index[device.device_id][1]
                    on_slot.setdefault(at, []).append((device.share, mover))
        costs: list[tuple[int, int, int, list[Mover]]] = []
        for found in np.flatnonzero(eligible):
            slot = int(found)
            have = int(free[slot])
            group: list[Mover] = []
            for amount, mover in sorted(on_slot.get(slot, []), key=lambda t: (-t[0], t[1].id)):
                if have >= need:
                    break
                group.append(mover)
                have += amount
            if have >= need:
                costs.append((len(group), need - int(free[slot]), slot, group))
        if len(costs) < choice.count:
            return None
        costs.sort(key=lambda c: (c[0], c[1], c[2]))
        return [m for c in costs[: choice.count] for m in c[3]]

    # -- trying a set ----------------------------------------------------------------------

    def _try(
        self,
        job: Job,
        group: Sequence[Mover],
        only: np.ndarray,
        budget: int,
        max_nodes: int,
        depth: int,
    ) -> Placement | None:
        """Release ``group``; if a task of ``job`` then fits on the node and every mover of
        the group fits again (moving others in turn, ``depth`` levels down), keep it all;
        else undo and return None."""
        mark, moved = len(self.log), len(self.moved)
        released: list[tuple[AllocKey, Placement]] = []
        for mover in group:
            self.gone.add(mover.id)
            for key, old in mover.tasks:
                if key in self.state.allocations:
                    self._free(key)
                    released.append((key, old))
        placement = self.framework.select(self._ctx(job), candidates=only)
        if placement is not None:
            self._alloc(self._key(job.id, "task"), placement)
            if self.hold_old:
                self._hold(released, placement)
            left = budget - len(group)
            if self._rehome(group, left, max_nodes, depth):
                return placement
        self.rollback(mark, moved)
        for mover in group:
            self.gone.discard(mover.id)
        return None

    def _hold(self, released: Sequence[tuple[AllocKey, Placement]], taken: Placement) -> None:
        """Hold what the released movers keep while they stop: per node, their old places
        less what the task took there (see the module docstring)."""
        per_node: dict[str, list[int]] = {}
        devices: dict[str, dict[str, int]] = {}
        for _, placement in released:
            amounts = per_node.setdefault(placement.node, [0, 0])
            amounts[0] += placement.cpu_milli
            amounts[1] += placement.memory_mib
            shares = devices.setdefault(placement.node, {})
            for share in placement.devices:
                shares[share.device_id] = shares.get(share.device_id, 0) + share.share
        if taken.node in per_node:
            amounts = per_node[taken.node]
            amounts[0] -= taken.cpu_milli
            amounts[1] -= taken.memory_mib
            shares = devices[taken.node]
            for share in taken.devices:
                if share.device_id in shares:
                    shares[share.device_id] -= share.share
        for node, (cpu, memory) in sorted(per_node.items()):
            kept = tuple(DeviceShare(d, s) for d, s in sorted(devices[node].items()) if s > 0)
            if cpu > 0 or memory > 0 or kept:
                held = Placement(node, max(0, cpu), max(0, memory), kept)
                self._alloc(self._key(node, "held"), held)

    def _rehome(self, group: Sequence[Mover], budget: int, max_nodes: int, depth: int) -> bool:
        """Place every mover of ``group`` again (allocated; the largest first), moving
        others for one that fits nowhere while ``depth`` and ``budget`` allow. False: the
        caller undoes what was done."""
        for mover in sorted(group, key=lambda m: (-m.size, m.id)):
            placements: list[Placement] = []
            for _ in mover.tasks:
                placement = self.framework.select(self._ctx(mover.job))
                if placement is not None:
                    self._alloc(self._key(mover.id, "moved"), placement)
                elif depth > 0 and budget > 0:
                    before = len(self.moved)
                    placement = self._make_room(
                        mover.job, budget, max(1, max_nodes // 4), depth - 1, fallback=False
                    )
                    budget -= len(self.moved) - before
                    if placement is None:
                        return False
                else:
                    return False
                placements.append(placement)
            if self.accept is not None and not self.accept(mover, placements):
                return False
            self.moved.append((mover, tuple(placements)))
        return True


def _harder(mover: Job, job: Job) -> bool:
    """The mover needs at least what ``job`` needs, on no more devices: where it fits,
    ``job`` fits too."""
    a, b = mover.resources, job.resources
    if a.cpu_milli < b.cpu_milli or a.memory_mib < b.memory_mib:
        return False
    if len(a.devices) != len(b.devices) or a.node_selector != b.node_selector:
        return False
    for mine, theirs in zip(a.devices, b.devices, strict=True):
        if len(mine.choices) != 1 or len(theirs.choices) != 1:
            return False
        x, y = mine.primary, theirs.primary
        if x.device_class != y.device_class or x.count < y.count:
            return False
        if x.share < y.share or (y.selector is not None and x.selector != y.selector):
            return False
    return True


def _held(mover: Mover, node: str, dimension: int) -> int:
    """CPU (dimension 0) or memory (1) the mover holds on ``node``."""
    return sum(
        p.cpu_milli if dimension == 0 else p.memory_mib for _, p in mover.tasks if p.node == node
    )


def _only(rows: int, row: int) -> np.ndarray:
    mask = np.zeros(rows, np.bool_)
    mask[row] = True
    return mask
