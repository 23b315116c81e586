"""Placing a job's tasks inside network domains (``Job.topology``, see
:mod:`hetsched.model.topology`), as one step of an attempt (:mod:`hetsched.scheduler.attempt`).

**Domain choice** is best fit on the free capacity the cluster state keeps per domain
(:mod:`hetsched.cluster.network`): among the domains that hold all the tasks, the one whose
room is smallest, so large domains stay whole; when none holds them all (a ``preferred``
job's broader levels, the parts of a domain), the largest first, so the tasks span as few
domains as they can. That capacity bounds what fits from above, so a domain is confirmed by
placing the tasks in it; a domain that turns out short is given back and the next is tried
(at most :data:`TRIES` per level).

**Rank contiguity.** Tasks are placed in index order, and a domain's narrower domains are
filled one at a time, so consecutive tasks share the narrowest domain they can: the
previous task's node first, then the narrowest labelled domain (chosen among its nodes by
the profile's scores, fragmentation scores included), then the next one.

**Slices** (``slice_size`` N, ``slice_required`` LABEL2): tasks in groups of N consecutive
indexes, each group inside one domain of LABEL2, all of them inside the job's domain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hetsched.cluster.network import Network
from hetsched.cluster.placement import Placement
from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework
from hetsched.model.topology import TopologyRequest, short_level

__all__ = [
    "TRIES",
    "Taker",
    "TopologyPlan",
    "domain_room",
    "keeps_topology",
    "place_in_domains",
    "unresolvable",
]

IntArray = npt.NDArray[np.int64]

#: domains tried per level before the job waits (each try that fails places and gives back)
TRIES = 16


class Taker(Protocol):
    """What the attempt offers the placement: take a placement for the next task, and give
    back what was taken after a mark."""

    def take(self, task: int, placement: Placement) -> bool: ...

    def mark(self) -> int: ...

    def undo_to(self, mark: int) -> None: ...


@dataclass(slots=True)
class TopologyPlan:
    """One attempt's placement inside domains: the tasks to place in order, and the
    capacity estimates read once per level."""

    framework: Framework
    ctx: CycleContext
    net: Network
    taker: Taker
    tasks: list[int]
    #: the row of a running job's first task: its new tasks go to that node's domains
    anchor: int | None = None
    #: a job with groups: each task's context (its group's request); capacities are still
    #: estimated with ``ctx``'s request, and placing confirms them
    context_of: Callable[[int], CycleContext] | None = None
    done: int = 0
    _capacity: dict[int, IntArray] = field(default_factory=dict)

    def capacity(self, depth: int) -> IntArray:
        found = self._capacity.get(depth)
        if found is None:
            found = self._capacity[depth] = self.net.capacity(
                self.ctx.state, depth, self.ctx.request
            )
        return found

    # -- filling one domain --------------------------------------------------------------

    def fill_rows(self, rows: IntArray, count: int) -> int:
        """Up to ``count`` next tasks on ``rows``, each on the previous one's node while it
        fits, else on the best-scored row."""
        framework, ctx, placed = self.framework, self.ctx, 0
        last: IntArray | None = None
        while placed < count and self.done < len(self.tasks):
            if self.context_of is not None:
                ctx = self.context_of(self.tasks[self.done])
            placement = None if last is None else framework.select_within(ctx, last)
            if placement is None:
                placement = framework.select_within(ctx, rows)
            if placement is None or not self.taker.take(self.tasks[self.done], placement):
                break
            self.done += 1
            placed += 1
            last = np.array([ctx.state.node_index[placement.node]], np.int64)
        return placed

    def fill(self, depth: int, domain: int, count: int) -> int:
        """Up to ``count`` next tasks inside ``domain`` (``depth`` -1: the whole cluster),
        its narrower domains filled one at a time (best fit, else the largest first)."""
        net = self.net
        if depth >= net.host - 1:
            return self.fill_rows(net.members(depth, domain), count)
        kids = net.kids(depth, domain)
        room = self.capacity(depth + 1)[kids].copy()
        placed = 0
        while placed < count:
            pick = best_fit(room, count - placed)
            if pick < 0:
                break
            placed += self.fill(depth + 1, int(kids[pick]), count - placed)
            room[pick] = 0
        return placed

    def fill_slices(self, depth: int, domain: int, count: int, size: int, inner: int) -> int:
        """``count`` next tasks in slices of ``size``, each inside one domain at depth
        ``inner``, all inside ``domain``; the levels between are filled one domain at a
        time as :meth:`fill` does (best fit, else the largest first), so slices stay
        rank-contiguous at every level."""
        if depth + 1 == inner:
            return self.fill_slice_domains(depth, domain, count, size, inner)
        kids = self.net.kids(depth, domain)
        slices = self.capacity(inner) // size
        up = self.net.ancestors(inner, depth + 1)
        per_kid = np.bincount(up, weights=slices, minlength=self.net.size(depth + 1))
        room = per_kid[kids].astype(np.int64)
        placed = 0
        while placed < count:
            pick = best_fit(room, (count - placed) // size)
            if pick < 0:
                break
            want = min(count - placed, int(room[pick]) * size)
            placed += self.fill_slices(depth + 1, int(kids[pick]), want, size, inner)
            room[pick] = 0
        return placed

    def fill_slice_domains(self, depth: int, domain: int, count: int, size: int, inner: int) -> int:
        """:meth:`fill_slices` one level above the slice level: a slice domain takes as
        many slices as it holds before the next is chosen; a slice that does not fit
        whole is given back."""
        inside = np.flatnonzero(self.net.ancestors(inner, depth) == domain)
        room = self.capacity(inner)[inside] // size
        placed = 0
        while placed < count:
            pick = best_fit(room, (count - placed) // size)
            if pick < 0:
                break
            while room[pick] > 0 and placed < count:
                mark, before = self.taker.mark(), self.done
                got = self.fill(inner, int(inside[pick]), size)
                if got < size:
                    self.taker.undo_to(mark)
                    self.done = before
                    break
                placed += got
                room[pick] -= 1
            room[pick] = 0
        return placed

    def fill_domain(self, depth: int, domain: int, count: int) -> int:
        topology = self.topology
        inner = self.slice_depth()
        if topology.slice_size is None or inner is None or inner <= depth:
            return self.fill(depth, domain, count)
        return self.fill_slices(depth, domain, count, topology.slice_size, inner)

    # -- choosing the domain -------------------------------------------------------------

    @property
    def topology(self) -> TopologyRequest:
        topology = self.ctx.job.topology
        assert topology is not None
        return topology

    def slice_depth(self) -> int | None:
        label = self.topology.slice_required
        return None if label is None else self.net.depth(label)

    def room(self, depth: int, empty: bool = False) -> IntArray:
        """Per domain at ``depth``: how many tasks it may hold, slices counted whole (with
        ``empty``: were every task gone)."""
        return domain_room(self.net, self.ctx, depth, empty, self._capacity)

    def within_one(self, depth: int, count: int, need: int) -> bool:
        """Place ``count`` tasks (at least ``need``) inside one domain at ``depth``, chosen
        by best fit and confirmed by placing; False (nothing kept) when none takes them."""
        if self.anchor is not None:
            candidates = np.array([self.net.domain_of(depth, self.anchor)], np.int64)
        else:
            candidates = candidates_by_fit(self.room(depth), count, need)[:TRIES]
        for domain in candidates.tolist():
            mark, before = self.taker.mark(), self.done
            if self.fill_domain(depth, domain, count) >= need:
                return True
            self.taker.undo_to(mark)
            self.done = before
        return False


def domain_room(
    net: Network,
    ctx: CycleContext,
    depth: int,
    empty: bool = False,
    cache: dict[int, IntArray] | None = None,
) -> IntArray:
    """Per domain at ``depth``: how many tasks of ``ctx.job`` it may hold now (or with
    every task gone: ``empty``), slices counted whole. ``cache`` keeps the capacity read per
    depth (not with ``empty``)."""
    topology = ctx.job.topology
    assert topology is not None

    def capacity(level: int) -> IntArray:
        if empty:
            return net.capacity_empty(ctx.state, level, ctx.request)
        found = None if cache is None else cache.get(level)
        if found is None:
            found = net.capacity(ctx.state, level, ctx.request)
            if cache is not None:
                cache[level] = found
        return found

    label, size = topology.slice_required, topology.slice_size
    inner = None if label is None else net.depth(label)
    if size is None or inner is None or inner <= depth:
        return capacity(depth)
    tasks = capacity(inner) // size * size  # whole slices only
    up = net.ancestors(inner, depth)
    return np.bincount(up, weights=tasks, minlength=net.size(depth)).astype(np.int64)


def best_fit(room: IntArray, need: int) -> int:
    """The index of the smallest ``room`` that holds ``need`` (the first on ties), else of
    the largest room that holds any; -1 when none holds any."""
    if need <= 0 or room.size == 0:
        return -1
    holds = room >= need
    if holds.any():
        return int(np.where(holds, room, np.iinfo(np.int64).max).argmin())
    pick = int(room.argmax())
    return pick if room[pick] > 0 else -1


def candidates_by_fit(room: IntArray, count: int, need: int) -> IntArray:
    """Domains to try in order: those that may hold all ``count`` tasks by best fit
    (smallest room first, lower index on ties), then those that may hold ``need`` of them,
    largest first."""
    whole = np.flatnonzero(room >= count)
    whole = whole[np.argsort(room[whole], kind="stable")]
    if need >= count:
        return whole
    part = np.flatnonzero((room >= need) & (room < count))
    part = part[np.argsort(-room[part], kind="stable")]
    return np.concatenate([whole, part])


def place_in_domains(plan: TopologyPlan, count: int, need: int) -> None:
    """Place up to ``count`` tasks as ``plan``'s job asks (see the module docstring): a
    ``required`` job inside one domain of its level or not at all; a ``preferred`` one
    inside one domain of its level, else of the narrowest broader level that holds it, else
    across the cluster, the fewest domains first. The later tasks of a running job go to the
    domains of its first one (a preferred job's, while they hold them). Leaves what it
    placed taken."""
    depth = plan.net.depth(plan.topology.level)
    assert depth is not None
    if plan.topology.required is not None:
        if plan.room(depth, empty=True).max(initial=0) >= need:  # else it can never fit
            plan.within_one(depth, count, need)
        return
    # all of its tasks inside one domain, the narrowest level first; then (a gang minimum
    # below its tasks) as many as one domain takes; then across the cluster
    for want in (count, need) if need < count else (count,):
        for level in range(depth, -1, -1):
            if plan.within_one(level, count, want):
                return
    plan.fill_domain(-1, 0, count)


def unresolvable(net: Network | None, topology: TopologyRequest) -> str | None:
    """Why the cluster can never place a job asking ``topology``, or None."""
    levels = "none" if net is None else ", ".join(net.levels)
    wanted = [topology.level]
    if topology.slice_required is not None:
        wanted.append(topology.slice_required)
    for label in wanted:
        if net is None or net.depth(label) is None:
            return f"topology: the cluster has no level {label!r} (its levels: {levels})"
    assert net is not None
    inner = net.depth(wanted[-1])
    outer = net.depth(wanted[0])
    if inner is not None and outer is not None and inner < outer:
        return (
            f"topology: slice_required {short_level(wanted[-1])} is broader than "
            f"{short_level(wanted[0])}; slices go inside the job's domain"
        )
    return None


def keeps_topology(
    net: Network | None,
    topology: TopologyRequest | None,
    before: Sequence[tuple[int, int]],
    after: Sequence[tuple[int, int]],
) -> bool:
    """Would a running job that asks ``topology`` still have what it asked for if its tasks
    moved from ``before`` to ``after`` ((task, row) pairs)? A required level: one domain of
    it; slices: each inside one domain of its level; a preferred level: no more domains of
    it than now (a move may not spread a gang further)."""
    if topology is None or net is None:
        return True
    depth = net.depth(topology.level)
    if depth is None:
        return True

    def spans(rows: Iterable[int], level: int) -> int:
        return len({net.domain_of(level, row) for row in rows})

    rows = [row for _, row in after]
    if topology.required is not None and spans(rows, depth) > 1:
        return False
    if topology.preferred is not None and spans(rows, depth) > spans(
        (row for _, row in before), depth
    ):
        return False
    inner = None if topology.slice_required is None else net.depth(topology.slice_required)
    if inner is None or not topology.slice_size:
        return True
    slices: dict[int, list[int]] = {}
    for task, row in after:
        slices.setdefault(task // topology.slice_size, []).append(row)
    return all(spans(members, inner) == 1 for members in slices.values())
