"""Consolidation: a running job spread over several network domains moves into one.

A job that asked for a ``preferred`` level (:mod:`hetsched.model.topology`) and started
spread over several of its domains, because none held it then, moves into one domain of
that level once one holds it (the profile's ``migration.consolidate``). It moves as other
migrations do (:mod:`hetsched.scheduler.migration`): only a job that may move, to capacity
free now (its old places stay held while it stops), within its queue's quota as before.
The pass runs when capacity was freed since the last one and no job waits, at most
``max_moves`` jobs per cycle, in arrival order.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError
from hetsched.cluster.usage import Usage
from hetsched.model.topology import TopologyRequest
from hetsched.scheduler.actions import MigrationKind
from hetsched.scheduler.books import Books
from hetsched.scheduler.migration import movable
from hetsched.scheduler.placing import trial
from hetsched.scheduler.records import JobRecord

__all__ = ["consolidate", "run_consolidation", "spread"]


def spread(sched: Books, record: JobRecord) -> bool:
    """Does ``record``, which prefers a level, run in more than one domain of it?"""
    topology = record.job.topology
    net = sched.state.network()
    if topology is None or topology.preferred is None or net is None:
        return False
    depth = net.depth(topology.preferred)
    if depth is None:
        return False
    rows = {sched.state.node_index[p.node] for p in record.placements.values()}
    return len({net.domain_of(depth, row) for row in rows}) > 1


def consolidate(sched: Books, record: JobRecord, now: float) -> bool:
    """Move ``record`` into one domain of the level it prefers, if it runs spread over
    several, may move and one holds it now; True if it moves."""
    topology = record.job.topology
    if topology is None or not spread(sched, record) or not movable(sched, record, now):
        return False
    required = TopologyRequest(
        topology.preferred, None, topology.slice_size, topology.slice_required
    )
    job = dataclasses.replace(record.job, topology=required)
    tasks = sorted(record.placements)
    placements = trial(sched.framework, sched.state.fork(), job, len(tasks), now)
    if placements is None:
        return False
    old = list(record.placements.values())
    if sched.quotas.enabled and _usage(sched, record, placements) != _usage(sched, record, old):
        return False
    grace = sched.profile.migration.grace_s
    try:
        sched.migrate(
            record,
            list(zip(tasks, placements, strict=True)),
            MigrationKind.CONSOLIDATE,
            None,
            grace,
            now,
        )
    except AllocationError:
        return False
    return True


def _usage(sched: Books, record: JobRecord, placements: Sequence[Placement]) -> Usage:
    total: Usage = Counter()
    for placement in placements:
        total.update(sched.usage_of(record.job, placement))
    return +total


def run_consolidation(sched: Books, now: float) -> int:
    """The profile's consolidation pass (see the module docstring); how many jobs moved."""
    spec = sched.profile.migration.consolidate
    book = sched.moves
    if not spec.enabled or book.consolidate_epoch == sched.capacity_epoch:
        return 0
    book.consolidate_epoch = sched.capacity_epoch
    if sched.queue.pending() or sched.state.network() is None:
        return 0
    moved = 0
    for record in sched.active_jobs():
        if moved >= spec.max_moves:
            break
        if consolidate(sched, record, now):
            moved += 1
    return moved
