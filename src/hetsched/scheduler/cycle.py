"""One scheduling cycle: order the waiting jobs and try each, with every queueing rule.

The cycle, in steps:

1. order waiting jobs by the profile's QueueSort; the key of a job is read again right
   before it is tried, so usage-based orders (drf) see the jobs started earlier in the cycle;
2. skip a job that cannot be tried now: its queue is blocked behind a strict head, it is in
   backoff after a gang timeout, it waits for its preemption victims to stop, or it failed
   at the current capacity epoch (the cheap path: nothing it needs has been freed since);
3. attempt it: quota pre-check, placement of its gang (keeping its partial hold, if any),
   exact quota check on the chosen devices, then the guards: capacity promised to a
   preemptor and the backfill head's reservation must survive the placement;
4. on failure: a partial gang may hold what it placed (one holder at a time, so two gangs
   never hold parts of the cluster each), the PostFilter (preemption) may choose victims,
   the first job blocked by capacity becomes the backfill head, and its explanation says why.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from hetsched.cluster.placement import Placement
from hetsched.framework.cycle import CycleContext
from hetsched.framework.status import Code
from hetsched.model.lifecycle import JobState
from hetsched.scheduler.actions import Action, Pending
from hetsched.scheduler.backfill import Reservation, reserve
from hetsched.scheduler.explain import Explanation, explain_placement
from hetsched.scheduler.preemption import PLAN_KEY, Plan, promises_kept
from hetsched.scheduler.quota import QuotaBlock
from hetsched.scheduler.records import JobRecord
from hetsched.scheduler.usage import Usage, placement_usage, request_usage

if TYPE_CHECKING:
    from hetsched.scheduler.core import Scheduler

__all__ = ["run_cycle"]


@dataclass(slots=True)
class _Outcome:
    placements: list[tuple[int, Placement]] | None
    kind: str = ""
    explanation: Explanation | None = None


@dataclass(slots=True)
class _Pass:
    """What one cycle learned so far."""

    #: strict mode: queue -> the job that blocks it
    blocked: dict[str, str] = field(default_factory=dict)
    #: per queue, the jobs tried so far in this cycle that are still waiting
    waiting_ahead: Counter[str] = field(default_factory=Counter)
    head: JobRecord | None = None
    reservation: Reservation | None = None
    #: (request, tasks needed) -> explanation, for attempts that failed for capacity in this
    #: cycle: free capacity only shrinks during a cycle, so an equal request fails too
    no_room: dict[tuple[object, int], Explanation] = field(default_factory=dict)
    #: (request, growth mark) -> whether a node that grew since the mark holds it now
    room: dict[tuple[object, int], bool] = field(default_factory=dict)


def run_cycle(sched: Scheduler, now: float) -> list[Action]:
    actions: list[Action] = []
    framework = sched.framework
    heap = [(framework.sort_key(r, now), r.seq, r) for r in sched.waiting()]
    heapq.heapify(heap)
    cycle = _Pass()
    # a key that depends only on the job and the time (fifo, priority) cannot move within
    # a cycle; usage-based keys (drf, fairshare) can, and are read again before each try
    dynamic = bool(getattr(framework.queue_sort, "dynamic", True))
    while heap:
        key, seq, record = heapq.heappop(heap)
        if dynamic:
            fresh = framework.sort_key(record, now)
            if fresh != key:
                heapq.heappush(heap, (fresh, seq, record))
                continue
        queue = record.job.queue
        position = cycle.waiting_ahead[queue] + 1
        if record.state is JobState.PENDING:
            # counted now: it stays in line unless it binds below, which undoes this
            cycle.waiting_ahead[queue] += 1
        if queue in cycle.blocked:
            text = f"queue {queue} is strict and its head {cycle.blocked[queue]} cannot start"
            _explain(
                record,
                Explanation(Code.UNSCHEDULABLE, text, position=(queue, position)),
                actions,
            )
            continue
        if now < record.backoff_until or record.nominated:
            _block(sched, cycle, record, now)
            continue
        retry = _preemption_may_help(sched, record, now)
        if (
            not retry
            and record.failed_epoch != sched.capacity_epoch
            and _still_no_room(sched, cycle, record, now)
        ):
            record.failed_epoch = sched.capacity_epoch
            record.failed_growth = sched.state.growth_mark()
            record.failed_version = sched.state.version
        if record.failed_epoch == sched.capacity_epoch and not retry:
            if record.blocked_by in ("capacity", "gang") and cycle.head is None:
                _make_head(sched, cycle, record, now)
            _block(sched, cycle, record, now)
            continue
        same = (record.job.resources, _needed(record))
        if same in cycle.no_room and not record.held and not sched.quotas.enabled:
            outcome = _Outcome(None, "capacity", cycle.no_room[same])
        else:
            outcome = _attempt(sched, cycle, record, now)
            if outcome.kind == "capacity" and outcome.explanation is not None:
                cycle.no_room.setdefault(same, outcome.explanation)
        if outcome.placements is not None:
            if record.state is JobState.PENDING:
                cycle.waiting_ahead[queue] -= 1
            actions.append(sched.bind(record, outcome.placements, now))
            continue
        record.failed_epoch = sched.capacity_epoch
        record.failed_growth = sched.state.growth_mark()
        record.failed_version = sched.state.version
        record.retry_at = now + PREEMPTION_RETRY_S
        record.blocked_by = outcome.kind
        if record.promised and not record.nominated:
            sched.promise(record, False)  # its victims are gone and it still does not fit
        explanation = outcome.explanation or Explanation(Code.UNSCHEDULABLE, "cannot start now")
        extra: list[str] = []
        if outcome.kind in ("capacity", "quota", "gang") and framework.post_filters:
            extra += _preempt(sched, record, now, actions)
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
            position=(queue, position),
        )
        _explain(record, explanation, actions)
        _block(sched, cycle, record, now)
    return actions


#: how often (driver seconds) a waiting job that preemption might help is tried again when
#: no room appeared for it: victims become eligible as they pass their minimum runtime, and
#: lower-priority jobs that started since are new candidates
PREEMPTION_RETRY_S = 1.0


def _preemption_may_help(sched: Scheduler, record: JobRecord, now: float) -> bool:
    """Whether the job is due for another try because preemption is enabled: a failure for
    room, quota or a gang can turn into a preemption without any capacity being freed."""
    return (
        bool(sched.framework.post_filters)
        and record.state is JobState.PENDING
        and record.blocked_by in ("capacity", "quota", "gang")
        and now >= record.retry_at
    )


def _still_no_room(sched: Scheduler, cycle: _Pass, record: JobRecord, now: float) -> bool:
    """A job that last failed for lack of room, where no node that gained capacity since
    can hold one of its tasks now, still fails: every other node has at most the room it had
    then. Saves a full attempt (and its explanation) per waiting job after every release;
    the explanation stays the one of the last real attempt.

    A job no node could hold even empty (unresolvable) waits for the topology to change
    (nodes, devices, health): freed capacity cannot help it."""
    if record.blocked_by == "unresolvable":
        return record.failed_version == sched.state.version
    if record.blocked_by != "capacity" or record.failed_growth < 0 or record.held:
        return False
    rows = sched.state.grown_since(record.failed_growth)
    key = (record.job.resources, record.failed_growth)
    room = cycle.room.get(key)
    if room is None:
        candidates = np.zeros(len(sched.state), np.bool_)
        candidates[rows] = True
        candidates &= sched.state.active
        ctx = CycleContext(sched.state, record.job, record.job.resources, now)
        room = bool(candidates.any()) and bool(sched.framework.feasible(ctx, candidates).any())
        cycle.room[key] = room
    return not room


def _needed(record: JobRecord) -> int:
    if record.state is JobState.RUNNING:
        return 1
    return min(record.job.gang_min, len(record.unplaced))


def _explain(record: JobRecord, explanation: Explanation, actions: list[Action]) -> None:
    """Keep the newest explanation; tell the driver only when the reason changed (a new
    position in line alone is not news, see Explanation.position)."""
    changed = record.explanation != explanation
    record.explanation = explanation
    if changed:
        actions.append(Pending(record.id, explanation))


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
    cycle.head = record
    if not sched.profile.backfill.enabled or record.state is not JobState.PENDING:
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


def _attempt(sched: Scheduler, cycle: _Pass, record: JobRecord, now: float) -> _Outcome:
    """Place the job's tasks, all-or-nothing up to its gang minimum (see the module doc)."""
    from hetsched.scheduler.core import task_key

    job = record.job
    framework = sched.framework
    quotas = sched.quotas
    running = record.state is JobState.RUNNING
    run = record.run if running else record.run + 1
    needed = _needed(record)
    ctx = CycleContext(sched.state, job, job.resources, now)
    if quotas.enabled:
        block = quotas.check(
            job.queue,
            request_usage(job, max(0, needed - len(record.held))),
            sched.ledger,
            sched.state,
        )
        if block is not None:
            return _quota_blocked(block)
    status = framework.prefilter(ctx)
    if not status.ok:
        kind = "unresolvable" if status.code is Code.UNRESOLVABLE else "capacity"
        return _Outcome(None, kind, explain_placement(framework, ctx, 0, needed))
    placed: list[tuple[int, Placement]] = sorted(record.held.items())
    new: list[tuple[int, Placement]] = []
    for task in record.unplaced:
        if task in record.held:
            continue
        placement = framework.select(ctx)
        if placement is None:
            break
        key = task_key(job.id, task, run)
        sched.allocate(key, placement, job)
        if not framework.reserve(ctx, placement).ok:
            sched.unallocate(key)
            break
        new.append((task, placement))
        placed.append((task, placement))

    def rollback() -> None:
        for task, placement in reversed(new):
            framework.unreserve(ctx, placement)
            sched.unallocate(task_key(job.id, task, run))

    permit = framework.permit(ctx, [p for _, p in placed])
    if len(placed) >= needed and permit.ok:
        if quotas.enabled and new:
            use: Usage = Counter()
            for _, placement in new:
                use.update(placement_usage(sched.state, placement))
            block = quotas.check(job.queue, use, sched.ledger, sched.state, {job.queue: use})
            if block is not None:
                rollback()
                return _quota_blocked(block)
        reason = _guard(sched, cycle, record, [p for _, p in placed], now)
        if reason is not None:
            rollback()
            return _Outcome(None, "reservation", Explanation(Code.UNSCHEDULABLE, reason))
        return _Outcome(placed)
    explanation = explain_placement(framework, ctx, len(placed), needed)
    if not permit.ok and len(placed) >= needed:
        rollback()
        return _Outcome(None, "capacity", Explanation(Code.UNSCHEDULABLE, str(permit)))
    gang = sched.profile.gang
    if (
        not running
        and needed > 1
        and placed
        and gang.hold
        and sched.holder in (None, record.id)
        and explanation.code is Code.UNSCHEDULABLE
        and _guard(sched, cycle, record, [p for _, p in placed], now) is None
    ):
        record.held = dict(placed)
        if record.hold_since is None:
            record.hold_since = now
        sched.holder = record.id
        reason = (
            f"waiting for its gang: holds {len(placed)} of the {needed} tasks it needs at once "
            f"since t={record.hold_since:g}; released at t={record.hold_since + gang.timeout_s:g}"
        )
        return _Outcome(
            None,
            "gang",
            Explanation(
                explanation.code,
                explanation.summary,
                (reason,),
                explanation.rejections,
                explanation.suggestions,
            ),
        )
    rollback()
    if needed > 1 and sched.holder not in (None, record.id):
        explanation = Explanation(
            explanation.code,
            explanation.summary,
            (f"waiting for its gang; job {sched.holder} holds the one gang reservation",),
            explanation.rejections,
            explanation.suggestions,
        )
    return _Outcome(None, "capacity", explanation)


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
