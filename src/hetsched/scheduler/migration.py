"""Moving running jobs: defragmentation and upgrades, on the core's ``Migrate``.

A job may move when it is checkpointable (it declares ``checkpoint``), preemptible, movable
(``Job.movable``: its driver can start it again elsewhere, which a Kubernetes pod that no
controller recreates is not), runs whole (every task placed, none finished, no move in
progress, not stopping for anyone) and has run at least the profile's
``migration.min_runtime_s`` in its current run. A move starts a new run, so no job moves
twice within that time.

**Defragmentation** (:func:`defragment`, the profile's ``migration.defrag``): when a
pending job fails for room, the planner (:mod:`hetsched.scheduler.defrag`) looks for at
most ``max_moves`` movable jobs whose move lets it fit. Their destinations are allocated at
once (capacity free now, which the moved jobs' old places, still held while they stop, do
not count towards), the moved jobs get their notice, and the room they leave is kept for
the pending job as for a preemptor (it waits for them, then starts). Rate limits: a plan is
made at most every ``min_interval_s`` (a job whose plan failed is not tried again within
it either), and at most ``max_moved_fraction`` of the running jobs (at least
``min_budget``) move in one cycle.

**No loops.** Every move is paid for by a pending job that starts once the moves are done
(its room is kept for it), a moved job does not move again within its minimum runtime, and
only a job that waits moves others: so each job start causes at most ``max_moves`` moves,
and a finite workload causes finitely many.

**Upgrade** (:func:`upgrade`, the hook for round-based policies, and the profile's
``migration.upgrade`` pass when capacity frees and nothing waits): a movable job moves to
a placement on which the speed model says it runs at least ``min_speedup`` times faster.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError, ClusterState
from hetsched.cluster.usage import Usage
from hetsched.framework.cycle import CycleContext
from hetsched.keys import TaskKey
from hetsched.model.job import Job
from hetsched.model.lifecycle import JobState
from hetsched.model.speed import SpeedError, Speeds, resolve
from hetsched.scheduler.actions import MigrationKind
from hetsched.scheduler.books import Books
from hetsched.scheduler.defrag import Mover, MoverIndex, plan_defrag
from hetsched.scheduler.records import JobRecord
from hetsched.scheduler.topology import keeps_topology

__all__ = ["defragment", "movable", "run_upgrades", "upgrade"]

#: domains defragmentation tries for a job that requires one (the most free devices first)
_DEFRAG_DOMAINS = 4


def movable(sched: Books, record: JobRecord, now: float) -> bool:
    """May ``record`` move now (see the module docstring)?"""
    job = record.job
    if job.checkpoint is None or not job.preemptible or not job.movable:
        return False
    if job.groups:  # moves place every task with one request
        return False
    if record.state is not JobState.RUNNING:
        return False
    if record.moving or record.stopping or record.finished or record.has_unplaced:
        return False
    if record.started is None or now - record.started < sched.profile.migration.min_runtime_s:
        return False
    return record.id not in sched.nominations and not record.promised


def _candidates(sched: Books, record: JobRecord, now: float) -> tuple[list[Mover], list[str]]:
    """The jobs that may move for ``record`` now, and the running checkpointable ones that
    never may (``Job.movable``), by id."""
    movers: list[Mover] = []
    pinned: list[str] = []
    for other in sched.active_jobs():
        if other is record:
            continue
        if movable(sched, other, now):
            movers.append(_mover(other))
        elif (
            not other.job.movable
            and other.job.checkpoint is not None
            and other.state is JobState.RUNNING
        ):
            pinned.append(other.id)
    return movers, pinned


def _unmovable(pinned: list[str]) -> list[str]:
    """The checkpointable jobs defragmentation may not move, as their driver cannot start
    them again elsewhere (``Job.movable``): part of why it moved nothing."""
    if not pinned:
        return []
    names = ", ".join(pinned[:5]) + (f" and {len(pinned) - 5} more" if len(pinned) > 5 else "")
    return [
        f"defragmentation: checkpointable {names} may not move, as its driver "
        "could not start it again elsewhere (a Kubernetes pod that no controller recreates)"
    ]


def _mover(record: JobRecord) -> Mover:
    tasks = tuple(
        (TaskKey(record.id, t, record.run), p) for t, p in sorted(record.placements.items())
    )
    return Mover(record.id, record.job, tasks)


def _budget(sched: Books, now: float) -> int:
    spec = sched.profile.migration.defrag
    running = sum(1 for r in sched.active_jobs() if r.state is JobState.RUNNING)
    allowed = max(spec.min_budget, math.floor(spec.max_moved_fraction * running))
    return allowed - sched.moves.count(now)


def _usage(sched: Books, job: Job, placements: Sequence[Placement]) -> Usage:
    total: Usage = Counter()
    for placement in placements:
        total.update(sched.usage_of(job, placement))
    return +total


def _defrag_budget(sched: Books, record: JobRecord, now: float) -> int:
    """How many jobs defragmentation may move for ``record`` now: 0 (or less) when it is
    off, the job is not a pending one that waits for room alone, or a plan is not due."""
    spec = sched.profile.migration
    if not spec.defrag.enabled or record.state is not JobState.PENDING:
        return 0
    if record.nominated or record.promised or record.waits_for_stop:
        return 0
    book = sched.moves
    interval = spec.defrag.min_interval_s
    if book.planned_at is not None and now - book.planned_at < interval:
        return 0
    tried = book.failed.get(record.id)
    if tried is not None and now - tried < interval:
        return 0
    return min(spec.defrag.max_moves, _budget(sched, now))


def defragment(sched: Books, record: JobRecord, now: float) -> list[str]:
    """Move running jobs so that ``record`` (pending, failed for room) fits; explanation
    lines, empty when defragmentation is off or not due (or ``record`` has groups: plans
    place one request)."""
    if record.job.groups:
        return []
    budget = _defrag_budget(sched, record, now)
    if budget <= 0:
        return []
    movers, pinned = _candidates(sched, record, now)
    if not movers:
        return _unmovable(pinned)
    spec = sched.profile.migration

    def accept(mover: Mover, placements: Sequence[Placement]) -> bool:
        # a move may not take a gang out of the network domains it asked for
        tasks = [key.task for key, _ in mover.tasks if isinstance(key, TaskKey)]
        old = [p for _, p in mover.tasks]
        if not _keeps_topology(sched, mover.job, tasks, old, placements):
            return False
        # a move may not change what a queue is charged for (a device model flavor)
        if not sched.quotas.enabled:
            return True
        job = mover.job
        return _usage(sched, job, placements) == _usage(sched, job, [p for _, p in mover.tasks])

    needed = min(record.job.gang_min, len(record.unplaced))
    index = MoverIndex(sched.state, movers)
    plan = None
    for within in _domains_to_try(sched, record):
        found = plan_defrag(
            sched.state,
            sched.framework,
            record.job,
            needed,
            index,
            budget,
            now,
            spec.defrag.max_nodes,
            accept,
            within=within,
        )
        if found is not None and _fits_its_domains(sched, record, found.placements):
            plan = found
            break
    if plan is None:
        sched.moves.fail(record.id, now, spec.defrag.min_interval_s)
        return [
            f"defragmentation: moving at most {budget} checkpointable job(s) would not make room",
            *_unmovable(pinned),
        ]
    return _carry_out(sched, record, plan.moves, now)


def _carry_out(
    sched: Books,
    record: JobRecord,
    moves: Sequence[tuple[Mover, Sequence[Placement]]],
    now: float,
) -> list[str]:
    """Start the plan's moves for ``record``, which waits for them (promised); a move
    that no longer fits is left out, and the rest of the plan goes on."""
    book = sched.moves
    moved: list[str] = []
    for mover, placements in moves:
        victim = sched.jobs[mover.id]
        tasks = [key.task for key, _ in mover.tasks if isinstance(key, TaskKey)]
        try:
            sched.migrate(
                victim,
                list(zip(tasks, placements, strict=True)),
                MigrationKind.DEFRAG,
                record,
                sched.profile.migration.grace_s,
                now,
            )
        except AllocationError:
            continue  # the rest of the plan no longer holds: the job tries again later
        book.moved += 1
        moved.append(mover.id)
    if not moved:
        return []
    book.planned_at = now
    book.failed.pop(record.id, None)
    sched.promise(record, True)
    return [f"defragmentation: moving {', '.join(moved)}; it starts when they have moved"]


def _keeps_topology(
    sched: Books,
    job: Job,
    tasks: Sequence[int],
    old: Sequence[Placement],
    new: Sequence[Placement],
) -> bool:
    """Do ``tasks`` moved from ``old`` to ``new`` placements keep what ``job`` asked of the
    network (:func:`hetsched.scheduler.topology.keeps_topology`)?"""
    if job.topology is None:
        return True
    index = sched.state.node_index
    before = [(t, index[p.node]) for t, p in zip(tasks, old, strict=True)]
    after = [(t, index[p.node]) for t, p in zip(tasks, new, strict=True)]
    return keeps_topology(sched.state.network(), job.topology, before, after)


def _domains_to_try(sched: Books, record: JobRecord) -> list[npt.NDArray[np.bool_] | None]:
    """Where defragmentation may seat ``record``: anywhere (None); for a job that requires
    a network level, the rows of each of the few domains of it with the most free devices
    (the domain its placed tasks hold, if any)."""
    topology = record.job.topology
    net = sched.state.network()
    if topology is None or topology.required is None or net is None:
        return [None]
    depth = net.depth(topology.required)
    if depth is None or depth == net.host:
        return [None]  # a node at a time is how the planner works anyway
    of = net.of[depth]
    if record.placements:
        row = sched.state.node_index[next(iter(record.placements.values())).node]
        chosen = [int(of[row])]
    else:
        free = np.bincount(of, weights=sched.state.dev_free_total, minlength=net.size(depth))
        chosen = [int(d) for d in np.argsort(-free, kind="stable")[:_DEFRAG_DOMAINS]]
    return [of == domain for domain in chosen]


def _fits_its_domains(sched: Books, record: JobRecord, placements: Sequence[Placement]) -> bool:
    """Would ``record``'s next tasks on ``placements`` (with those it holds) be inside the
    network domains it asked for? A plan that makes room elsewhere moves jobs for nothing."""
    if record.job.topology is None:
        return True
    held = sorted(record.placements.items())
    tasks = [t for t, _ in held] + sorted(record.unplaced)[: len(placements)]
    every = [p for _, p in held] + list(placements)
    return _keeps_topology(sched, record.job, tasks, every, every)


# -- upgrades ------------------------------------------------------------------------------


def _model_of(state: ClusterState, placement: Placement) -> str:
    if not placement.devices:
        return ""
    return state.device_of(placement.devices[0].device_id).model


def _rate(state: ClusterState, speeds: Speeds, placements: Sequence[Placement]) -> float:
    """The whole job's rate on these placements: the slowest task's model sets it."""
    return min((speeds.on(_model_of(state, p)) for p in placements), default=0.0)


def _fast_rows(state: ClusterState, speeds: Speeds, target: float) -> np.ndarray:
    mask = np.zeros(len(state), np.bool_)
    for row, node in enumerate(state.nodes):
        if state.active[row] and any(speeds.on(d.model) >= target for d in node.devices):
            mask[row] = True
    return mask


def upgrade(sched: Books, record: JobRecord, now: float, min_speedup: float | None = None) -> bool:
    """Move ``record`` to a placement where it runs at least ``min_speedup`` (default: the
    profile's) times faster, if it may move and one is free now; True if it moves."""
    spec = sched.profile.migration
    if not movable(sched, record, now) or not record.job.resources.devices:
        return False
    try:
        speeds = resolve(record.job, sched.speed_table)
    except SpeedError:
        return False
    if speeds.uniform:
        return False
    state = sched.state
    current = _rate(state, speeds, list(record.placements.values()))
    # a job that makes no progress where it is gains from any positive rate
    target = current * (min_speedup or spec.upgrade.min_speedup) if current > 0 else 1e-12
    mask = _fast_rows(state, speeds, target)
    if not mask.any():
        return False
    fork = state.fork()
    ctx = CycleContext(fork, record.job, record.job.resources, now, what_if=True)
    placed: list[tuple[int, Placement]] = []
    for task in sorted(record.placements):
        placement = sched.framework.select(ctx, candidates=mask)
        if placement is None:
            return False
        fork.allocate(f"{record.id}/upgrade{task}", placement)
        placed.append((task, placement))
    if _rate(state, speeds, [p for _, p in placed]) < target:
        return False
    tasks, new = [t for t, _ in placed], [p for _, p in placed]
    old = [record.placements[t] for t in tasks]
    if not _keeps_topology(sched, record.job, tasks, old, new):
        return False
    if sched.quotas.enabled and _usage(sched, record.job, [p for _, p in placed]) != _usage(
        sched, record.job, list(record.placements.values())
    ):
        return False
    try:
        sched.migrate(record, placed, MigrationKind.UPGRADE, None, spec.grace_s, now)
    except AllocationError:
        return False
    return True


def run_upgrades(sched: Books, now: float) -> int:
    """The profile's upgrade pass: when capacity was freed since the last pass and no job
    waits, move up to ``max_moves`` jobs to faster models (largest speedup first is not
    promised: jobs are tried in arrival order). Returns how many moved."""
    spec = sched.profile.migration.upgrade
    book = sched.moves
    if not spec.enabled or book.upgrade_epoch == sched.capacity_epoch:
        return 0
    book.upgrade_epoch = sched.capacity_epoch
    if sched.queue.pending():
        return 0
    moved = 0
    for record in sched.active_jobs():
        if moved >= spec.max_moves:
            break
        if upgrade(sched, record, now):
            moved += 1
    return moved
