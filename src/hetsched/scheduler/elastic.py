"""The grow pass: idle capacity goes to running elastic jobs, never ahead of a waiting job
with a better claim.

Runs after each scheduling cycle, so every waiting job had its try first. A running elastic
job below its ``replicas`` (and not resizing) asks for more as a *new request* would: its
claim is the queue order's key of the job as if it were submitted now (behind every job of
equal standing that waits already; for a usage-based order, its user's usage counts what it
runs). It grows only when no waiting job that is blocked for room (capacity, its gang, the
backfill reservation, or its own queue's quota) has a key ahead of that claim or a higher
priority, and no preemption is in flight. It then takes, task by task, what the placement
finds for its next ranks (at most up to ``replicas``) within its queue's quota.

Together with preemption's shrink (``hetsched.scheduler.preemption``) this cannot loop: a
grow only takes capacity nobody with a better claim waits for, and a shrink gives it back
only to a job that may preempt the grown one, once per pair.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, replace

from hetsched.cluster.placement import Placement
from hetsched.cluster.usage import Usage
from hetsched.framework.cycle import CycleContext
from hetsched.framework.status import PluginError
from hetsched.keys import TaskKey
from hetsched.model.job import Job, ResizeMode
from hetsched.model.lifecycle import JobState
from hetsched.scheduler.books import Books
from hetsched.scheduler.records import BlockedBy, JobRecord
from hetsched.scheduler.resize import resizable

__all__ = ["grow_elastic"]

#: a waiting job blocked for one of these waits for room a grow would take
_ROOM = frozenset({BlockedBy.CAPACITY, BlockedBy.GANG, BlockedBy.RESERVATION})


@dataclass(frozen=True, slots=True)
class _Claim:
    """A grow request as the queue sort sees it: the job, submitted now, last in arrival."""

    job: Job
    seq: int
    queued_since: float


def grow_elastic(sched: Books, now: float, grace_s: float = 30.0) -> None:
    """Give idle capacity to running elastic jobs below their maximum (module docstring)."""
    growing = [r for r in sched.elastic.values() if r.count < r.job.replicas and resizable(r)]
    if not growing or sched.promising:
        return
    blockers = [r for r in sched.waiting() if _waits_for_room(r)]
    framework = sched.framework
    claims = []
    for record in growing:
        job = replace(record.job, submit_time=now)
        claims.append((framework.sort_key(_Claim(job, 1 << 62, now), now), record.seq, record))
    claims.sort(key=lambda c: (c[0], c[1]))
    for key, _, record in claims:
        if any(_ahead(sched, b, record, key, now) for b in blockers):
            continue
        try:
            new = _place(sched, record, now)
        except PluginError:
            continue  # the placement failed: it grows at a later pass
        if new:
            sched.grow(record, new, grace_s, now)


def _waits_for_room(record: JobRecord) -> bool:
    if record.state is not JobState.PENDING:
        return False
    return record.blocked_by in _ROOM or record.blocked_by is BlockedBy.QUOTA or record.promised


def _ahead(
    sched: Books, waiting: JobRecord, grower: JobRecord, claim: tuple[Hashable, ...], now: float
) -> bool:
    """Does ``waiting`` have a better claim than ``grower``'s grow request ``claim``?"""
    if waiting.blocked_by is BlockedBy.QUOTA and waiting.job.queue != grower.job.queue:
        return False  # its own queue's quota holds it, not room a grow would take
    if waiting.job.priority > grower.job.priority:
        return True
    try:
        return bool(sched.framework.sort_key(waiting, now) < claim)
    except TypeError:
        return True  # keys that do not compare (a failed sort): the waiting job first


def _place(sched: Books, record: JobRecord, now: float) -> dict[int, Placement]:
    """Allocate the next ranks of ``record`` that fit, task by task, within its queue's
    quota; rank ``count`` first, so ranks stay contiguous."""
    job = record.job
    framework = sched.framework
    ctx = CycleContext(sched.state, job, job.resources, now)
    if not framework.prefilter(ctx).ok:
        return {}
    run = record.run if job.resize is ResizeMode.LIVE else record.run + 1
    new: dict[int, Placement] = {}
    for task in range(record.count, job.replicas):
        placement = framework.select(ctx)
        if placement is None:
            break
        sched.allocate(TaskKey(job.id, task, run), placement, job)
        new[task] = placement
    if sched.quotas.enabled:
        while new and not _within_quota(sched, job, new):
            task = max(new)
            sched.unallocate(TaskKey(job.id, task, run))
            del new[task]
    return new


def _within_quota(sched: Books, job: Job, new: dict[int, Placement]) -> bool:
    use: Usage = Counter()
    for placement in new.values():
        use.update(sched.usage_of(job, placement))
    # the new tasks are charged already: the check sees the queue without them
    queue = job.queue
    minus: dict[str, Usage] = {queue: use}
    return sched.quotas.check(queue, use, sched.ledger, sched.state, minus) is None
