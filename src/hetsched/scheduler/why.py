"""The long answer to "why is my job pending", computed on request.

A cycle keeps explanations cheap: it does not work out, for every waiting job, which running
jobs would have to finish or be preempted for it, since that is a what-if over the whole
cluster. :func:`why` does, for one job, when a user or an API asks:

- which running jobs must finish (at their expected runtimes) before it fits, and when that
  would be: the backfill reservation computation, run for this job as if it were the head;
- which running jobs the preemption plugin would preempt for it now, if one is enabled (a dry
  run: nothing is preempted and no history is changed).
"""

from __future__ import annotations

from hetsched.framework.status import Code
from hetsched.model.lifecycle import JobState
from hetsched.scheduler.backfill import reserve
from hetsched.scheduler.books import Books
from hetsched.scheduler.explain import Explanation
from hetsched.scheduler.preemption import Plan, Preemption, plan
from hetsched.scheduler.records import BlockedBy

__all__ = ["why"]


def why(sched: Books, job_id: str) -> Explanation:
    record = sched.record(job_id)
    base = record.explanation
    if record.state is not JobState.PENDING:
        summary = f"job {job_id} is {record.state}"
        return base if base is not None else Explanation(Code.SUCCESS, summary)
    if base is None:
        base = Explanation(Code.UNSCHEDULABLE, "not tried yet")
    if record.id in sched.workflow.held or record.job.array is not None:
        return base  # it waits for other jobs, or it is an array: not for room
    extra: list[str] = []
    if record.blocked_by in (BlockedBy.CAPACITY, BlockedBy.GANG, BlockedBy.RESERVATION):
        reservation = reserve(sched, record, sched.now)
        if reservation is None:
            extra.append("it would not fit even with every running job finished")
        else:
            extra.append(
                "would fit at t={:g} once these finish (expected runtimes): {}".format(
                    reservation.start, ", ".join(reservation.finishing)
                )
            )
    for plugin in sched.framework.post_filters:
        if isinstance(plugin, Preemption) and not record.nominated:
            result = plan(sched, plugin.args, record, sched.now)
            if isinstance(result, Plan):
                names = ", ".join(f"{v.id} ({result.kinds[v.id]})" for v in result.victims)
                extra.append(f"preemption would make room by preempting: {names}")
            else:
                extra.append(f"preemption cannot make room: {result}")
    return Explanation(
        base.code,
        base.summary,
        (*base.reasons, *extra),
        base.rejections,
        base.suggestions,
        position=sched.position(job_id),
    )
