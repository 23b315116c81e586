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
4. otherwise it is attempted (``hetsched.scheduler.attempt``): quota pre-check, placement
   of its gang (keeping its partial hold, if any), exact quota check on the chosen devices,
   then the guards: capacity promised to a preemptor and the backfill head's reservation
   must survive the placement. A job whose shape already failed for capacity in this cycle
   is not placed again;
5. on failure: a partial gang may hold what it placed (one holder at a time, so two gangs
   never hold parts of the cluster each), the PostFilter (preemption) may choose victims,
   the first job blocked by capacity becomes the backfill head, its explanation says why,
   and the queue parks it by why;
6. each Pending action gets the job's place in line, counted from the queue's index.

Decisions go out through ``sched.emit`` (and ``sched.bind`` / ``sched.preempt``, which emit
their own actions) in the order they are taken. A plugin that raises during a job's visit
(a :class:`PluginError`) undoes that job's attempt; the job waits with a ``Code.ERROR``
explanation and is tried again once the cluster changes.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterator

from hetsched.framework.cycle import CycleContext
from hetsched.framework.status import Code, PluginError, Status
from hetsched.model.lifecycle import JobState
from hetsched.queueing.needs import (
    PREEMPTION_RETRY_S,
    needed,
    preemption_may_help,
)
from hetsched.scheduler.actions import Action, Pending
from hetsched.scheduler.attempt import Outcome, Pass, attempt
from hetsched.scheduler.backfill import reserve
from hetsched.scheduler.books import Books
from hetsched.scheduler.explain import Explanation
from hetsched.scheduler.migration import defragment
from hetsched.scheduler.preemption import PLAN_KEY, Plan
from hetsched.scheduler.records import BlockedBy, JobRecord

__all__ = ["PREEMPTION_RETRY_S", "placed_in_line", "run_cycle"]

#: failures that preemption may turn into a start
_PREEMPTION_HELPS = frozenset({BlockedBy.CAPACITY, BlockedBy.QUOTA, BlockedBy.GANG})
#: failures for lack of room: the first such job may become the backfill head
_ROOM = frozenset({BlockedBy.CAPACITY, BlockedBy.GANG})
#: with backfill, a job blocked for these reasons does not block its strict queue
_BACKFILL_PASSES = frozenset({BlockedBy.CAPACITY, BlockedBy.GANG, BlockedBy.RESERVATION})


def run_cycle(sched: Books, now: float) -> None:
    """One cycle; its actions go out through ``sched.emit``. The caller then gives the
    Pending ones their place in line with :func:`placed_in_line`."""
    cycle = Pass(now)
    queue = sched.queue
    queue.begin_cycle(now)
    try:
        order = _merged(sched, cycle) if sched.incremental and queue.laned else _sorted(sched)
        for record in order:
            try:
                _visit(sched, cycle, record)
            except PluginError as exc:
                _plugin_failed(sched, cycle, record, exc.status)
    finally:
        queue.end_cycle()


def _sorted(sched: Books) -> Iterator[JobRecord]:
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


def _merged(sched: Books, cycle: Pass) -> Iterator[JobRecord]:
    """The incremental order: the queue's lanes merged, only the jobs that can matter."""
    backfill = sched.profile.backfill.enabled

    def need_head() -> bool:
        return backfill and cycle.head is None

    return sched.queue.order(sched.queue.relevance(sched.strict, need_head, cycle.blocked))


def _visit(sched: Books, cycle: Pass, record: JobRecord) -> None:
    """Try one job, or say why it is not tried; raises PluginError (with its attempt
    undone) when a plugin fails."""
    now = cycle.now
    queue = record.job.queue
    failures = sched.framework.sort_failures
    if failures and record.id in failures:
        raise PluginError(failures[record.id])
    rounds = sched.rounds
    if rounds is not None and rounds.holds(sched, record):
        _explain(sched, record, Explanation(Code.UNSCHEDULABLE, rounds.explanation(record)))
        return
    if queue in cycle.blocked:
        head = cycle.blocked[queue]
        text = f"queue {queue} is strict and its head {head} cannot start"
        _explain(sched, record, Explanation(Code.UNSCHEDULABLE, text))
        sched.queue.told(record, head)
        return
    if now < record.backoff_until or record.nominated or record.waits_for_stop:
        _block(sched, cycle, record, now)
        return
    if not preemption_may_help(sched, record, now) and sched.queue.parked(record):
        if record.blocked_by in _ROOM and cycle.head is None:
            _make_head(sched, cycle, record, now)
        _block(sched, cycle, record, now)
        return
    need = needed(record)
    job = record.job
    request = job.resources if job.topology is None else (job.resources, job.topology)
    same = (request, job.best_effort, need)  # shape_of(record)
    # a job with groups has no one shape: it is always tried
    alike = not record.held and not sched.quotas.enabled and not job.groups
    if alike and same in cycle.no_room:
        outcome = Outcome(None, BlockedBy.CAPACITY, cycle.no_room[same])
    else:
        outcome = attempt(sched, cycle, record, need, now)
        capacity = outcome.kind is BlockedBy.CAPACITY
        if capacity and outcome.explanation is not None and not record.job.groups:
            cycle.no_room.setdefault(same, outcome.explanation)
    if outcome.placements is not None:
        sched.bind(record, outcome.placements, now)
        sched.started(record)
        return
    _failed(sched, cycle, record, outcome)


def _plugin_failed(sched: Books, cycle: Pass, record: JobRecord, status: Status) -> None:
    """A plugin raised during the job's visit (its attempt was undone): it waits, explained
    with ``Code.ERROR``, and is tried again once capacity changes."""
    record.retry_at = cycle.now + PREEMPTION_RETRY_S
    record.blocked_by = BlockedBy.ERROR
    _explain(sched, record, Explanation(Code.ERROR, f"a plugin failed: {status}"))
    sched.queue.failed(record, BlockedBy.ERROR)


def _failed(sched: Books, cycle: Pass, record: JobRecord, outcome: Outcome) -> None:
    now = cycle.now
    record.retry_at = now + PREEMPTION_RETRY_S
    record.blocked_by = outcome.kind
    if record.promised and not record.nominated:
        sched.promise(record, False)  # its victims are gone and it still does not fit
    explanation = outcome.explanation or Explanation(Code.UNSCHEDULABLE, "cannot start now")
    extra: list[str] = []
    if outcome.kind is BlockedBy.CAPACITY:
        extra += defragment(sched, record, now)
    if outcome.kind in _PREEMPTION_HELPS and sched.framework.post_filters:
        extra += _preempt(sched, record, now)
    if outcome.kind in _ROOM and cycle.head is None and not record.nominated:
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
    _explain(sched, record, explanation)
    sched.queue.failed(record, outcome.kind)
    _block(sched, cycle, record, now)


def _explain(sched: Books, record: JobRecord, explanation: Explanation) -> None:
    """Keep the newest explanation; tell the driver only when the reason changed (a new
    position in line alone is not news, see Explanation.position)."""
    changed = record.explanation != explanation
    record.explanation = explanation
    if changed:
        sched.emit(Pending(record.id, explanation))


def placed_in_line(sched: Books, actions: list[Action], start: int = 0) -> None:
    """Give each Pending in ``actions[start:]`` (a cycle's, replaced in place) its job's
    place in line as the cycle left it (from the queue's index: a cycle does not count the
    jobs it skips)."""
    for index in range(start, len(actions)):
        action = actions[index]
        if isinstance(action, Pending):
            record = sched.jobs.get(action.job_id)
            if record is None:
                continue  # it ended since, and the book forgot it
            position = sched.queue.position(record)
            explanation = dataclasses.replace(action.explanation, position=position)
            if record.explanation is action.explanation:
                record.explanation = explanation
            actions[index] = Pending(action.job_id, explanation)


def _block(sched: Books, cycle: Pass, record: JobRecord, now: float) -> None:
    """Strict mode: a job that cannot start blocks the rest of its queue. With backfill, a
    job blocked by capacity does not: the head's reservation is what later jobs must not
    delay (EASY backfill), and only the first such job gets one."""
    if not sched.strict or record.state is not JobState.PENDING:
        return
    if sched.profile.backfill.enabled and record.blocked_by in _BACKFILL_PASSES:
        return
    if now < record.backoff_until:
        return  # not eligible now, so it does not hold the head either
    cycle.blocked.setdefault(record.job.queue, record.id)


def _make_head(sched: Books, cycle: Pass, record: JobRecord, now: float) -> None:
    """The first job blocked by capacity holds the backfill reservation (only backfill
    reads the head: without it, choosing one changes nothing)."""
    if not sched.profile.backfill.enabled:
        return
    cycle.head = record
    if record.state is not JobState.PENDING:
        return
    try:
        cycle.reservation = reserve(sched, record, now)
    except PluginError:
        # no reservation this cycle: the jobs' own attempts say what failed
        cycle.reservation = None
    if cycle.reservation is not None:
        start = cycle.reservation.start
        if record.reserved_start != start:
            record.reserved_starts.append(start)


def _preempt(sched: Books, record: JobRecord, now: float) -> list[str]:
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
        sched.preempt(sched.jobs[victim.id], record, kind, plan.grace_s, now)
        names.append(f"{victim.id} ({kind})")
    for job_id, count in sorted(plan.shrinks.items()):
        shrunk = sched.jobs[job_id]
        names.append(f"{job_id} (shrunk from {shrunk.count} to {count} tasks)")
        sched.shrink(shrunk, count, record, plan.grace_s, now)
    sched.promise(record, True)
    verb = "preempting " if plan.victims else "shrinking "
    return [verb + ", ".join(names) + "; it starts when they have stopped"]
