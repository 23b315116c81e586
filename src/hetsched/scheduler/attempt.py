"""One job's attempt in a scheduling cycle (step 4 of ``hetsched.scheduler.cycle``): the
quota pre-check, placement of its gang (keeping its partial hold, if any), the exact quota
check on the chosen devices, then the guards: capacity promised to a preemptor and the
backfill head's reservation must survive the placement; then the Bind plugins.

A placement is allocated on the live state as it is chosen (the next task's placement sees
it), so an attempt that fails gives back what it took (:meth:`Trial.rollback`), and so does
one a plugin error interrupts. A gang that placed only part of what it needs may keep that
part instead (one holder at a time, so two gangs never hold parts of the cluster each).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from hetsched.cluster.placement import Placement
from hetsched.cluster.usage import Usage
from hetsched.framework.cycle import CycleContext
from hetsched.framework.status import Code, PluginError, Status
from hetsched.keys import TaskKey
from hetsched.model.job import TaskRequest
from hetsched.model.lifecycle import JobState
from hetsched.queueing.lanes import Shape
from hetsched.scheduler.backfill import Reservation
from hetsched.scheduler.books import Books
from hetsched.scheduler.explain import Explanation, explain_placement
from hetsched.scheduler.groups import explain_groups
from hetsched.scheduler.preemption import promises_kept
from hetsched.scheduler.quota import QuotaBlock
from hetsched.scheduler.records import BlockedBy, JobRecord
from hetsched.scheduler.topology import TopologyPlan, place_in_domains, unresolvable
from hetsched.scheduler.topology_explain import explain_topology

__all__ = ["Outcome", "Pass", "Trial", "attempt"]

#: what an extension point without plugins answers
_PASSED = Status.success()


@dataclass(slots=True)
class Outcome:
    """How an attempt ended: the placements of a start, or why the job cannot start."""

    placements: list[tuple[int, Placement]] | None
    kind: BlockedBy = BlockedBy.NONE
    explanation: Explanation | None = None


@dataclass(slots=True)
class Pass:
    """What one cycle learned so far."""

    now: float
    #: strict mode: queue -> the job that blocks it
    blocked: dict[str, str] = field(default_factory=dict)
    head: JobRecord | None = None
    reservation: Reservation | None = None
    #: shape -> explanation, for attempts that failed for capacity in this cycle: free
    #: capacity only shrinks during a cycle, so a job of the same shape fails too
    no_room: dict[Shape, Explanation] = field(default_factory=dict)


def _quota_blocked(block: QuotaBlock) -> Outcome:
    """The outcome of an attempt stopped by a queue's quota (before or after placement)."""
    text = f"blocked by the quota of queue {block.queue}"
    return Outcome(None, BlockedBy.QUOTA, Explanation(Code.UNSCHEDULABLE, text, (str(block),)))


@dataclass(slots=True)
class Trial:
    """One attempt's placements: the partial hold it started from, and what it added
    (allocated on the live state, so a failure must roll them back)."""

    sched: Books
    record: JobRecord
    ctx: CycleContext
    run: int
    placed: list[tuple[int, Placement]]
    #: tasks it must place at once (its gang minimum)
    need: int = 1
    new: list[tuple[int, Placement]] = field(default_factory=list)
    #: a job with groups: a context per group request, and the requests whose next task
    #: found no node (-> that task)
    contexts: dict[TaskRequest, CycleContext] = field(default_factory=dict)
    failed: dict[TaskRequest, int] = field(default_factory=dict)
    #: the tasks it tries to place, in order
    tasks: list[int] = field(default_factory=list)

    def context(self, task: int) -> CycleContext:
        request = self.record.job.request_of(task)
        if request == self.ctx.request:
            return self.ctx
        ctx = self.contexts.get(request)
        if ctx is None:
            ctx = self.contexts[request] = CycleContext(
                self.ctx.state, self.ctx.job, request, self.ctx.now
            )
        return ctx

    def place(self) -> None:
        """Place the job's unplaced tasks one by one until one does not fit (a job with
        groups: each with its group's request, and on to the next group, so that the
        explanation can say which groups fit; inside network domains when the job asks:
        :mod:`hetsched.scheduler.topology`)."""
        tasks = [task for task in self.record.unplaced if task not in self.record.held]
        self.tasks = tasks
        job = self.record.job
        if job.topology is not None:
            self.place_topology(tasks)
            return
        framework = self.sched.framework
        for task in tasks:
            ctx = self.context(task) if job.groups else self.ctx
            if ctx.request in self.failed:
                continue
            placement = framework.select(ctx)
            if placement is None and job.groups:
                self.failed[ctx.request] = task
                continue
            if placement is None or not self.take(task, placement):
                break

    def place_topology(self, tasks: list[int]) -> None:
        topology = self.record.job.topology
        assert topology is not None
        net = self.ctx.state.network()
        if unresolvable(net, topology) is not None or net is None:
            return
        running = [*self.record.placements.values(), *self.record.held.values()]
        anchor = self.ctx.state.node_index[running[0].node] if running else None
        plan = TopologyPlan(self.sched.framework, self.ctx, net, self, tasks, anchor)
        if self.record.job.groups:
            plan.context_of = self.context
        place_in_domains(plan, len(tasks), max(0, self.need - len(self.record.held)))

    def take(self, task: int, placement: Placement) -> bool:
        """Allocate and reserve ``placement`` for ``task``; False (nothing kept) when a
        Reserve plugin refuses it."""
        framework = self.sched.framework
        key = TaskKey(self.record.job.id, task, self.run)
        self.sched.allocate(key, placement, self.record.job)
        if framework.reservers:  # nothing to reserve: the point passes
            reserved = framework.reserve(self.ctx, placement)
            if not reserved.ok:
                self.sched.unallocate(key)
                _raise_error(reserved)
                return False
        self.new.append((task, placement))
        self.placed.append((task, placement))
        return True

    def mark(self) -> int:
        return len(self.new)

    def undo_to(self, mark: int) -> None:
        """Give back what was taken after ``mark`` (a value of :meth:`mark`)."""
        while len(self.new) > mark:
            task, placement = self.new.pop()
            self.placed.pop()
            try:
                self.sched.framework.unreserve(self.ctx, placement)
            finally:
                self.sched.unallocate(TaskKey(self.record.id, task, self.run))

    def drop_last(self) -> None:
        """Give back the last task this attempt placed (an elastic job starts smaller)."""
        self.undo_to(len(self.new) - 1)

    def rollback(self) -> None:
        """Give back what this attempt took (once: a second call does nothing)."""
        self.undo_to(0)

    @property
    def placements(self) -> list[Placement]:
        return [p for _, p in self.placed]


def attempt(sched: Books, cycle: Pass, record: JobRecord, need: int, now: float) -> Outcome:
    """Place the job's tasks, all-or-nothing up to its gang minimum (``need``, see the
    module doc). A plugin error (PluginError, or a point's ERROR status) is raised with
    everything the attempt allocated given back."""
    job = record.job
    framework = sched.framework
    ctx = CycleContext(sched.state, job, job.resources, now)
    if sched.quotas.enabled:
        use = sched.request_of(job, max(0, need - len(record.held)))
        block = sched.quotas.check(job.queue, use, sched.ledger, sched.state)
        if block is not None:
            return _quota_blocked(block)
    running = record.state is JobState.RUNNING
    run = record.run if running else record.run + 1
    trial = Trial(sched, record, ctx, run, sorted(record.held.items()), need)
    for check in [ctx, *(trial.context(t) for t in _group_starts(record))]:
        status = framework.prefilter(check)
        if not status.ok:
            _raise_error(status)
            code = status.code
            kind = BlockedBy.UNRESOLVABLE if code is Code.UNRESOLVABLE else BlockedBy.CAPACITY
            return Outcome(None, kind, explain_placement(framework, check, 0, need, status))
    try:
        return _place(sched, cycle, trial, need, status, now)
    except PluginError:
        trial.rollback()
        raise


def _group_starts(record: JobRecord) -> list[int]:
    """The first task of each group after the first (none for a job without groups)."""
    starts, start = [], 0
    for group in record.job.groups:
        starts.append(start)
        start += group.replicas
    return starts[1:]


def _place(
    sched: Books, cycle: Pass, trial: Trial, need: int, status: Status, now: float
) -> Outcome:
    """The rest of :func:`_attempt` (``status``: what the PreFilter said), with the trial
    to roll back on a plugin error."""
    record, ctx, framework = trial.record, trial.ctx, sched.framework
    running = record.state is JobState.RUNNING
    trial.place()
    # no Permit plugin: the point passes (without listing the placements for it)
    permit = framework.permit(ctx, trial.placements) if framework.permits else _PASSED
    _raise_error(permit)
    if len(trial.placed) >= need and permit.ok:
        outcome = _complete(sched, cycle, trial, now)
        # an elastic job starts with the largest count its quota and the guards allow
        while outcome.placements is None and _smaller(trial, need, outcome):
            trial.drop_last()
            outcome = _complete(sched, cycle, trial, now)
        if outcome.placements is None:
            trial.rollback()
        return outcome
    if record.job.topology is not None and permit.ok:
        trial.rollback()  # a job placed inside domains never holds part of its gang
        code, explanation = explain_topology(framework, ctx, len(trial.tasks), need, status)
        kind = BlockedBy.UNRESOLVABLE if code is Code.UNRESOLVABLE else BlockedBy.CAPACITY
        return Outcome(None, kind, explanation)
    if record.job.groups:  # which groups fit, with the others' placements still held
        placed = {t for t, _ in trial.placed}
        contexts = {ctx.request: ctx, **trial.contexts}
        explanation = explain_groups(framework, record.job, contexts, placed, trial.failed)
    else:
        explanation = explain_placement(framework, ctx, len(trial.placed), need, status)
    if not permit.ok and len(trial.placed) >= need:
        trial.rollback()
        return Outcome(None, BlockedBy.CAPACITY, Explanation(Code.UNSCHEDULABLE, str(permit)))
    if not running and need > 1:
        held = _hold(sched, cycle, trial, explanation, need, now)
        if held is not None:
            return held
    trial.rollback()
    if need > 1 and sched.holder not in (None, record.id):
        text = f"waiting for its gang; job {sched.holder} holds the one gang reservation"
        explanation = _with_reasons(explanation, (text,))
    return Outcome(None, BlockedBy.CAPACITY, explanation)


def _raise_error(status: Status) -> None:
    """A point whose plugin raised fails the whole attempt, as the exception would have."""
    if status.code is Code.ERROR:
        raise PluginError(status)


def _smaller(trial: Trial, need: int, outcome: Outcome) -> bool:
    """May a pending elastic job try again with one task fewer (its quota or a guard
    refused this count, and it is still above the count it needs)?"""
    record = trial.record
    return (
        record.job.elastic
        and record.state is JobState.PENDING
        and outcome.kind in (BlockedBy.QUOTA, BlockedBy.RESERVATION)
        and len(trial.placed) > need
        and bool(trial.new)
    )


def _complete(sched: Books, cycle: Pass, trial: Trial, now: float) -> Outcome:
    """Every task the job needs is placed: the exact quota check on the chosen devices,
    the guards (promised capacity, the backfill reservation), then the Bind plugins. On a
    refusal the placements stay allocated: the caller rolls them back (or tries fewer)."""
    record = trial.record
    if sched.quotas.enabled and trial.new:
        use: Usage = Counter()
        for _, placement in trial.new:
            use.update(sched.usage_of(record.job, placement))
        queue = record.job.queue
        block = sched.quotas.check(queue, use, sched.ledger, sched.state, {queue: use})
        if block is not None:
            return _quota_blocked(block)
    reason = _guard(sched, cycle, record, trial.placements, now)
    if reason is not None:
        return Outcome(None, BlockedBy.RESERVATION, Explanation(Code.UNSCHEDULABLE, reason))
    framework = sched.framework
    bound = framework.bind(trial.ctx, trial.placements) if framework.binders else _PASSED
    _raise_error(bound)
    if not bound.ok:
        return Outcome(None, BlockedBy.CAPACITY, Explanation(bound.code, str(bound)))
    return Outcome(trial.placed)


def _hold(
    sched: Books,
    cycle: Pass,
    trial: Trial,
    explanation: Explanation,
    need: int,
    now: float,
) -> Outcome | None:
    """A gang that placed only part of what it needs keeps that part, when gang holds are
    on and no other job holds one; None when it may not."""
    record = trial.record
    gang = sched.profile.gang
    if (
        not trial.placed
        or not gang.hold
        or record.job.groups  # its groups place anew each try (their first fit changes)
        or sched.holder not in (None, record.id)
        or explanation.code is not Code.UNSCHEDULABLE
        or _guard(sched, cycle, record, trial.placements, now) is not None
    ):
        return None
    record.held = dict(trial.placed)
    if record.hold_since is None:
        record.hold_since = now
    sched.holder = record.id
    reason = (
        f"waiting for its gang: holds {len(trial.placed)} of the {need} tasks it needs at "
        f"once since t={record.hold_since:g}; released at t={record.hold_since + gang.timeout_s:g}"
    )
    replaced = dataclasses.replace(explanation, reasons=(reason,))
    return Outcome(None, BlockedBy.GANG, replaced)


def _with_reasons(explanation: Explanation, reasons: tuple[str, ...]) -> Explanation:
    return dataclasses.replace(explanation, reasons=reasons)


def _guard(
    sched: Books, cycle: Pass, record: JobRecord, placements: list[Placement], now: float
) -> str | None:
    """Why ``record`` may not take ``placements`` (already allocated on the live state):
    capacity promised to a preemptor, or the backfill head's reservation."""
    if sched.promising and not promises_kept(sched, now, skip=record):
        return (
            "held back: the capacity it needs is kept for jobs that preempted others to "
            "start: " + ", ".join(sorted(sched.promised))
        )
    head = cycle.head
    if (
        cycle.reservation is not None
        and head is not None
        and head is not record
        and not record.promised  # the reservation was planned around it
        and not cycle.reservation.admits(sched, record, placements, now)
    ):
        return (
            f"held back by the backfill reservation of job {head.id} "
            f"(starts at t={cycle.reservation.start:g}); it would delay it"
        )
    return None
