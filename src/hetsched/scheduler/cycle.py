"""One scheduling cycle: visit the waiting jobs in queue order and try each, with every
queueing rule.

The cycle, in steps:

1. the waiting queue (``hetsched.queueing.waiting``) files what changed since the last
   cycle, and checks once per request shape whether room appeared for the jobs of that
   shape that failed for capacity;
2. jobs are visited in the profile's QueueSort order; the key of a job is read again
   right before it is tried, so usage-based orders (drf) see the jobs started earlier in
   the cycle. The *incremental* order merges the queue's lanes and visits only the jobs
   that can matter (to try, or to block a strict queue, or to become the backfill head);
   the *reference* order sorts every waiting job and visits all of them. Both take the
   same decisions (a hypothesis property compares their action streams);
3. a visited job is skipped when its strict queue is blocked behind its head, it is in
   backoff after a gang timeout, it waits for its preemption victims to stop, or it is
   parked: nothing it waits for happened (no room appeared for its shape, no capacity was
   freed since it failed, the topology did not change). A parked job blocked by capacity
   may still become the backfill head;
4. otherwise it is attempted: quota pre-check, placement of its gang (keeping its partial
   hold, if any), exact quota check on the chosen devices, then the guards: capacity
   promised to a preemptor and the backfill head's reservation must survive the placement.
   A job whose shape already failed for capacity in this cycle is not placed again;
5. on failure: a partial gang may hold what it placed (one holder at a time, so two gangs
   never hold parts of the cluster each), the PostFilter (preemption) may choose victims,
   the first job blocked by capacity becomes the backfill head, its explanation says why,
   and the queue parks it by why;
6. each Pending action gets the job's place in line, counted from the queue's index.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hetsched.cluster.placement import Placement
from hetsched.framework.cycle import CycleContext
from hetsched.framework.status import Code
from hetsched.model.lifecycle import JobState
from hetsched.queueing.waiting import (
    PREEMPTION_RETRY_S,
    Shape,
    needed,
    preemption_may_help,
    shape_of,
)
from hetsched.scheduler.actions import Action, Pending
from hetsched.scheduler.backfill import Reservation, reserve
from hetsched.scheduler.explain import Explanation, explain_placement
from hetsched.scheduler.preemption import PLAN_KEY, Plan, promises_kept
from hetsched.scheduler.quota import QuotaBlock
from hetsched.scheduler.records import JobRecord
from hetsched.scheduler.usage import Usage, placement_usage, request_usage

if TYPE_CHECKING:
    from hetsched.scheduler.core import Scheduler

__all__ = ["PREEMPTION_RETRY_S", "run_cycle"]


@dataclass(slots=True)
class _Outcome:
    placements: list[tuple[int, Placement]] | None
    kind: str = ""
    explanation: Explanation | None = None


@dataclass(slots=True)
class _Pass:
    """What one cycle learned so far."""

    now: float
    actions: list[Action] = field(default_factory=list)
    #: strict mode: queue -> the job that blocks it
    blocked: dict[str, str] = field(default_factory=dict)
    head: JobRecord | None = None
    reservation: Reservation | None = None
    #: shape -> explanation, for attempts that failed for capacity in this cycle: free
    #: capacity only shrinks during a cycle, so a job of the same shape fails too
    no_room: dict[Shape, Explanation] = field(default_factory=dict)


def run_cycle(sched: Scheduler, now: float) -> list[Action]:
    cycle = _Pass(now)
    queue = sched.queue
    queue.begin_cycle(now)
    try:
        order = _merged(sched, cycle) if sched.incremental and queue.laned else _sorted(sched)
        for record in order:
            _visit(sched, cycle, record)
    finally:
        queue.end_cycle()
    return _placed_in_line(sched, cycle.actions)


def _sorted(sched: Scheduler) -> Iterator[JobRecord]:
    """The reference order: every waiting job, sorted by its key at the start of the
    cycle; a usage-based key (drf, fairshare) is read again before the job is visited, and
    the job goes back in line if it moved."""
    framework = sched.framework
    now = sched.now
    heap = [(framework.sort_key(r, now), r.seq, r) for r in sched.queue.records()]
    heapq.heapify(heap)
    dynamic = bool(getattr(framework.queue_sort, "dynamic", True))
    while heap:
        key, seq, record = heapq.heappop(heap)
        if dynamic:
            fresh = framework.sort_key(record, now)
            if fresh != key:
                heapq.heappush(heap, (fresh, seq, record))
                continue
        if not sched.queue.is_fresh(record):
            yield record


def _merged(sched: Scheduler, cycle: _Pass) -> Iterator[JobRecord]:
    """The incremental order: the queue's lanes merged, only the jobs that can matter."""
    backfill = sched.profile.backfill.enabled

    def need_head() -> bool:
        return backfill and cycle.head is None

    return sched.queue.order(sched.queue.relevance(sched.strict, need_head))


def _visit(sched: Scheduler, cycle: _Pass, record: JobRecord) -> None:
    now = cycle.now
    queue = record.job.queue
    if queue in cycle.blocked:
        text = f"queue {queue} is strict and its head {cycle.blocked[queue]} cannot start"
        _explain(record, Explanation(Code.UNSCHEDULABLE, text), cycle.actions)
        return
    if now < record.backoff_until or record.nominated:
        _block(sched, cycle, record, now)
        return
    if not preemption_may_help(sched, record, now) and sched.queue.parked(record):
        if record.blocked_by in ("capacity", "gang") and cycle.head is None:
            _make_head(sched, cycle, record, now)
        _block(sched, cycle, record, now)
        return
    same = shape_of(record)
    if same in cycle.no_room and not record.held and not sched.quotas.enabled:
        outcome = _Outcome(None, "capacity", cycle.no_room[same])
    else:
        outcome = _attempt(sched, cycle, record, now)
        if outcome.kind == "capacity" and outcome.explanation is not None:
            cycle.no_room.setdefault(same, outcome.explanation)
    if outcome.placements is not None:
        cycle.actions.append(sched.bind(record, outcome.placements, now))
        sched.started(record)
        return
    _failed(sched, cycle, record, outcome)


def _failed(sched: Scheduler, cycle: _Pass, record: JobRecord, outcome: _Outcome) -> None:
    now = cycle.now
    record.retry_at = now + PREEMPTION_RETRY_S
    record.blocked_by = outcome.kind
    if record.promised and not record.nominated:
        sched.promise(record, False)  # its victims are gone and it still does not fit
    explanation = outcome.explanation or Explanation(Code.UNSCHEDULABLE, "cannot start now")
    extra: list[str] = []
    if outcome.kind in ("capacity", "quota", "gang") and sched.framework.post_filters:
        extra += _preempt(sched, record, now, cycle.actions)
    if outcome.kind in ("capacity", "gang") and cycle.head is None and not record.nominated:
        _make_head(sched, cycle, record, now)
        if cycle.reservation is not None and cycle.reservation.head is record:
            extra.append(cycle.reservation.describe())
    explanation = Explanation(
        explanation.code,
        explanation.summary,
        (*extra, *explanation.reasons),
        explanation.rejections,
        explanation.suggestions,
    )
    _explain(record, explanation, cycle.actions)
    sched.queue.failed(record, outcome.kind)
    _block(sched, cycle, record, now)


def _explain(record: JobRecord, explanation: Explanation, actions: list[Action]) -> None:
    """Keep the newest explanation; tell the driver only when the reason changed (a new
    position in line alone is not news, see Explanation.position)."""
    changed = record.explanation != explanation
    record.explanation = explanation
    if changed:
        actions.append(Pending(record.id, explanation))


def _placed_in_line(sched: Scheduler, actions: list[Action]) -> list[Action]:
    """Give each Pending its job's place in line as the cycle left it (from the queue's
    index: a cycle does not count the jobs it skips)."""
    out: list[Action] = []
    for action in actions:
        if isinstance(action, Pending):
            record = sched.jobs[action.job_id]
            position = sched.queue.position(record)
            explanation = dataclasses.replace(action.explanation, position=position)
            if record.explanation is action.explanation:
                record.explanation = explanation
            action = Pending(action.job_id, explanation)
        out.append(action)
    return out


def _block(sched: Scheduler, cycle: _Pass, record: JobRecord, now: float) -> None:
    """Strict mode: a job that cannot start blocks the rest of its queue. With backfill, a
    job blocked by capacity does not: the head's reservation is what later jobs must not
    delay (EASY backfill), and only the first such job gets one."""
    if not sched.strict or record.state is not JobState.PENDING:
        return
    if sched.profile.backfill.enabled and record.blocked_by in ("capacity", "gang", "reservation"):
        return
    if now < record.backoff_until:
        return  # not eligible now, so it does not hold the head either
    cycle.blocked.setdefault(record.job.queue, record.id)


def _make_head(sched: Scheduler, cycle: _Pass, record: JobRecord, now: float) -> None:
    """The first job blocked by capacity holds the backfill reservation (only backfill
    reads the head: without it, choosing one changes nothing)."""
    if not sched.profile.backfill.enabled:
        return
    cycle.head = record
    if record.state is not JobState.PENDING:
        return
    cycle.reservation = reserve(sched, record, now)
    if cycle.reservation is not None:
        start = cycle.reservation.start
        if record.reserved_start != start:
            record.reserved_starts.append(start)


def _quota_blocked(block: QuotaBlock) -> _Outcome:
    """The outcome of an attempt stopped by a queue's quota (before or after placement)."""
    text = f"blocked by the quota of queue {block.queue}"
    return _Outcome(None, "quota", Explanation(Code.UNSCHEDULABLE, text, (str(block),)))


@dataclass(slots=True)
class _Trial:
    """One attempt's placements: the partial hold it started from, and what it added
    (allocated on the live state, so a failure must roll them back)."""

    sched: Scheduler
    record: JobRecord
    ctx: CycleContext
    run: int
    placed: list[tuple[int, Placement]]
    new: list[tuple[int, Placement]] = field(default_factory=list)

    def place(self) -> None:
        """Place the job's unplaced tasks one by one until one does not fit."""
        from hetsched.scheduler.core import task_key

        framework = self.sched.framework
        job = self.record.job
        for task in self.record.unplaced:
            if task in self.record.held:
                continue
            placement = framework.select(self.ctx)
            if placement is None:
                break
            key = task_key(job.id, task, self.run)
            self.sched.allocate(key, placement, job)
            if not framework.reserve(self.ctx, placement).ok:
                self.sched.unallocate(key)
                break
            self.new.append((task, placement))
            self.placed.append((task, placement))

    def rollback(self) -> None:
        from hetsched.scheduler.core import task_key

        for task, placement in reversed(self.new):
            self.sched.framework.unreserve(self.ctx, placement)
            self.sched.unallocate(task_key(self.record.id, task, self.run))

    @property
    def placements(self) -> list[Placement]:
        return [p for _, p in self.placed]


def _attempt(sched: Scheduler, cycle: _Pass, record: JobRecord, now: float) -> _Outcome:
    """Place the job's tasks, all-or-nothing up to its gang minimum (see the module doc)."""
    job = record.job
    framework = sched.framework
    need = needed(record)
    ctx = CycleContext(sched.state, job, job.resources, now)
    if sched.quotas.enabled:
        use = request_usage(job, max(0, need - len(record.held)))
        block = sched.quotas.check(job.queue, use, sched.ledger, sched.state)
        if block is not None:
            return _quota_blocked(block)
    status = framework.prefilter(ctx)
    if not status.ok:
        kind = "unresolvable" if status.code is Code.UNRESOLVABLE else "capacity"
        return _Outcome(None, kind, explain_placement(framework, ctx, 0, need, status))
    running = record.state is JobState.RUNNING
    run = record.run if running else record.run + 1
    trial = _Trial(sched, record, ctx, run, sorted(record.held.items()))
    trial.place()
    permit = framework.permit(ctx, trial.placements)
    if len(trial.placed) >= need and permit.ok:
        return _complete(sched, cycle, trial, now)
    explanation = explain_placement(framework, ctx, len(trial.placed), need, status)
    if not permit.ok and len(trial.placed) >= need:
        trial.rollback()
        return _Outcome(None, "capacity", Explanation(Code.UNSCHEDULABLE, str(permit)))
    if not running and need > 1:
        held = _hold(sched, cycle, trial, explanation, need, now)
        if held is not None:
            return held
    trial.rollback()
    if need > 1 and sched.holder not in (None, record.id):
        text = f"waiting for its gang; job {sched.holder} holds the one gang reservation"
        explanation = _with_reasons(explanation, (text,))
    return _Outcome(None, "capacity", explanation)


def _complete(sched: Scheduler, cycle: _Pass, trial: _Trial, now: float) -> _Outcome:
    """Every task the job needs is placed: the exact quota check on the chosen devices,
    then the guards (promised capacity, the backfill reservation)."""
    record = trial.record
    if sched.quotas.enabled and trial.new:
        use: Usage = Counter()
        for _, placement in trial.new:
            use.update(placement_usage(sched.state, placement))
        queue = record.job.queue
        block = sched.quotas.check(queue, use, sched.ledger, sched.state, {queue: use})
        if block is not None:
            trial.rollback()
            return _quota_blocked(block)
    reason = _guard(sched, cycle, record, trial.placements, now)
    if reason is not None:
        trial.rollback()
        return _Outcome(None, "reservation", Explanation(Code.UNSCHEDULABLE, reason))
    return _Outcome(trial.placed)


def _hold(
    sched: Scheduler,
    cycle: _Pass,
    trial: _Trial,
    explanation: Explanation,
    need: int,
    now: float,
) -> _Outcome | None:
    """A gang that placed only part of what it needs keeps that part, when gang holds are
    on and no other job holds one; None when it may not."""
    record = trial.record
    gang = sched.profile.gang
    if (
        not trial.placed
        or not gang.hold
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
    return _Outcome(None, "gang", replaced)


def _with_reasons(explanation: Explanation, reasons: tuple[str, ...]) -> Explanation:
    return dataclasses.replace(explanation, reasons=reasons)


def _guard(
    sched: Scheduler, cycle: _Pass, record: JobRecord, placements: list[Placement], now: float
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


def _preempt(sched: Scheduler, record: JobRecord, now: float, actions: list[Action]) -> list[str]:
    """Run the PostFilter; carry out a preemption plan. Returns explanation lines."""
    if record.nominated or record.state is not JobState.PENDING:
        return []
    ctx = CycleContext(sched.state, record.job, record.job.resources, now)
    status = sched.framework.post_filter(ctx, [])
    plan = ctx.data.get(PLAN_KEY)
    if not status.ok or not isinstance(plan, Plan):
        # a status names its plugin itself ("preemption: ..."); say it once
        return [str(status) if status.plugin else f"preemption: {status}"]
    names = []
    for victim in plan.victims:
        kind = plan.kinds[victim.id]
        actions.append(sched.preempt(victim, record, kind, plan.grace_s, now))
        names.append(f"{victim.id} ({kind})")
    sched.promise(record, True)
    return ["preempting " + ", ".join(names) + "; it starts when they have stopped"]
