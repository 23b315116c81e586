"""Defragmentation planning: which running jobs to move so that a job that fits nowhere fits.

A pure what-if over a fork of the cluster state, shared by the core (which carries a plan
out as Migrate actions) and the openb experiment (which moves pods directly):

1. a task of the pending job that fits as the cluster is takes its place (on the fork);
2. otherwise, the nodes where it would fit if every *mover* there were gone are the
   candidates (at most ``max_nodes`` of them, those with the fewest movers first). On each,
   sets of up to the remaining budget of movers are released, the smallest sets first (one
   mover, then pairs, ...), until the task fits on that node;
3. the released movers must then fit elsewhere (where the profile would put them, on the
   fork with the task placed; the same node is allowed: a move from one device to another
   repairs fragmentation too) and pass ``accept`` (the core checks quotas there); if one
   does not, the next set is tried.

With ``hold_old`` (the core's case) a mover's destination is allocated while its old place
is still held (it stops after its notice), so destinations may use only capacity that is
free now and that the pending job does not need: the part of the movers' old places the
task does not take stays held on the fork. Without it (the openb experiment, where a move
is instantaneous) destinations may use any capacity the movers freed.

A plan moves each mover at most once and at most ``max_moves`` movers in all; the pending
job then fits once the movers have moved, and every mover fits where the plan puts it. The
fork is the only state touched.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.cluster.state import AllocKey, ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework
from hetsched.model.job import Job

__all__ = ["DefragPlan", "Mover", "plan_defrag"]

#: how many sets of movers one node may be tried with before the next node is tried
_SETS_PER_NODE = 64
#: movers of one node considered for sets (the smallest ones)
_MOVERS_PER_NODE = 12


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
    movers: Sequence[Mover],
    max_moves: int,
    now: float = 0.0,
    max_nodes: int = 16,
    accept: Accept | None = None,
    hold_old: bool = True,
) -> DefragPlan | None:
    """A plan that lets ``needed`` tasks of ``job`` start by moving at most ``max_moves`` of
    ``movers``, or None (see the module docstring). ``state`` is not changed."""
    if needed <= 0 or max_moves <= 0 or not movers:
        return None
    planner = _Planner(state.fork(), framework, job, now, movers, accept, hold_old)
    placements: list[Placement] = []
    for index in range(needed):
        placement = planner.place(index, max_moves - len(planner.moved), max_nodes)
        if placement is None:
            return None
        placements.append(placement)
    if not planner.moved:
        return None  # it fits without moving anyone
    return DefragPlan(tuple(placements), tuple(planner.moved))


class _Planner:
    def __init__(
        self,
        fork: ClusterState,
        framework: Framework,
        job: Job,
        now: float,
        movers: Sequence[Mover],
        accept: Accept | None,
        hold_old: bool,
    ) -> None:
        self.fork = fork
        self.hold_old = hold_old
        self.ghosts = 0
        self.framework = framework
        self.job = job
        self.now = now
        self.accept = accept
        self.left = {m.id: m for m in movers}
        self.moved: list[tuple[Mover, tuple[Placement, ...]]] = []
        self.by_row: dict[int, list[Mover]] = {}
        for mover in movers:
            for row in sorted({fork.node_index[p.node] for _, p in mover.tasks}):
                self.by_row.setdefault(row, []).append(mover)

    def _ctx(self, state: ClusterState) -> CycleContext:
        return CycleContext(state, self.job, self.job.resources, self.now, what_if=True)

    def place(self, index: int, budget: int, max_nodes: int) -> Placement | None:
        """Place task ``index`` of the job on the fork, moving movers if it must."""
        placement = self.framework.select(self._ctx(self.fork))
        if placement is None:
            if budget <= 0:
                return None
            placement = self._make_room(index, budget, max_nodes)
            if placement is None:
                return None
        else:
            self.fork.allocate(self._key(index), placement)
        return placement

    def _key(self, index: int) -> str:
        return f"{self.job.id}/defrag{index}"

    def _rows(self, max_nodes: int) -> list[int]:
        """Nodes where the task would fit with every mover left there gone."""
        empty = self.fork.fork()
        for mover in self.left.values():
            for key, _ in mover.tasks:
                if key in empty.allocations:
                    empty.release(key)
        mask = self.framework.feasible(self._ctx(empty))
        rows = [int(r) for r in np.flatnonzero(mask) if self._here(int(r))]
        rows.sort(key=lambda r: (len(self._here(r)), r))
        return rows[:max_nodes]

    def _here(self, row: int) -> list[Mover]:
        return [m for m in self.by_row.get(row, ()) if m.id in self.left]

    def _make_room(self, index: int, budget: int, max_nodes: int) -> Placement | None:
        for row in self._rows(max_nodes):
            only = np.zeros(len(self.fork), np.bool_)
            only[row] = True
            here = sorted(self._here(row), key=lambda m: (m.size, m.id))[:_MOVERS_PER_NODE]
            tried = 0
            for count in range(1, min(budget, len(here)) + 1):
                for group in itertools.combinations(here, count):
                    tried += 1
                    if tried > _SETS_PER_NODE:
                        break
                    placement = self._try(group, only, index)
                    if placement is not None:
                        return placement
                if tried > _SETS_PER_NODE:
                    break
        return None

    def _try(self, group: Sequence[Mover], only: np.ndarray, index: int) -> Placement | None:
        """Release ``group`` on the fork; if the task then fits on the node and every mover
        of the group fits again, keep it all; else undo and return None."""
        fork = self.fork
        released: list[tuple[AllocKey, Placement]] = []
        for mover in group:
            for key, old in mover.tasks:
                if key in fork.allocations:
                    fork.release(key)
                    released.append((key, old))
        placement = self.framework.select(self._ctx(fork), candidates=only)
        if placement is not None:
            fork.allocate(self._key(index), placement)
            ghosts = self._hold(released, placement) if self.hold_old else []
            homes = self._rehome(group)
            if homes is not None:
                for mover, placements in zip(group, homes, strict=True):
                    del self.left[mover.id]
                    self.moved.append((mover, placements))
                return placement
            for key in reversed(ghosts):
                fork.release(key)
            fork.release(self._key(index))
        for key, old in reversed(released):
            fork.allocate(key, old)
        return None

    def _hold(self, released: Sequence[tuple[AllocKey, Placement]], taken: Placement) -> list[str]:
        """Hold on the fork what the released movers keep while they stop: per node, their
        old places less what the task took there (see the module docstring)."""
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
        keys: list[str] = []
        for node, (cpu, memory) in sorted(per_node.items()):
            kept = tuple(DeviceShare(d, s) for d, s in sorted(devices[node].items()) if s > 0)
            if cpu <= 0 and memory <= 0 and not kept:
                continue
            self.ghosts += 1
            key = f"{self.job.id}/held{self.ghosts}"
            self.fork.allocate(key, Placement(node, max(0, cpu), max(0, memory), kept))
            keys.append(key)
        return keys

    def _rehome(self, group: Sequence[Mover]) -> list[tuple[Placement, ...]] | None:
        """New placements for the movers of ``group`` (allocated on the fork), or None
        with nothing allocated."""
        fork = self.fork
        taken: list[str] = []
        homes: list[tuple[Placement, ...]] = []
        for mover in sorted(group, key=lambda m: (-m.size, m.id)):
            ctx = CycleContext(fork, mover.job, mover.job.resources, self.now, what_if=True)
            placements: list[Placement] = []
            for number, _ in enumerate(mover.tasks):
                placement = self.framework.select(ctx)
                if placement is None:
                    break
                key = f"{mover.id}/moved{number}"
                fork.allocate(key, placement)
                taken.append(key)
                placements.append(placement)
            if len(placements) < len(mover.tasks) or (
                self.accept is not None and not self.accept(mover, placements)
            ):
                for done in reversed(taken):
                    fork.release(done)
                return None
            homes.append(tuple(placements))
        order = sorted(group, key=lambda m: (-m.size, m.id))
        by_id = {m.id: h for m, h in zip(order, homes, strict=True)}
        return [by_id[m.id] for m in group]
