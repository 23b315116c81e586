"""Would a job fit, and when: a what-if for a job the core does not hold.

A federation asks each member cluster this before it sends a job there ("could you start
it now, and if not, when?"). The answer is computed on the member's own books, as a real
attempt would place the job, and commits to nothing:

- **now**: the job's gang (its minimum of tasks at once) fits on a fork of the cluster as
  it is, chosen by the profile's filters and scores;
- **later**: it would fit once running jobs finish at their expected runtimes (the backfill
  reservation computation, with this job as the head); ``start`` says when;
- **never**: it would not fit even with every running job finished; ``reason`` says why
  (the per-filter rejections on the cluster as it is).

Jobs already waiting in the member's queue are not counted ahead of it, and quotas are not
checked: the answer is about capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsched.framework.cycle import CycleContext
from hetsched.model.job import Job
from hetsched.scheduler.backfill import reserve
from hetsched.scheduler.books import Books
from hetsched.scheduler.explain import explain_placement
from hetsched.scheduler.placing import trial
from hetsched.scheduler.records import JobRecord

__all__ = ["WhatIf", "what_if"]


@dataclass(frozen=True, slots=True)
class WhatIf:
    """The answer for one job. ``start`` is when it would fit (``now`` when it fits now;
    None when never); ``finishing`` the running jobs that must end first."""

    fits_now: bool
    start: float | None
    reason: str
    finishing: tuple[str, ...] = ()

    @property
    def ever(self) -> bool:
        return self.start is not None

    def to_dict(self, now: float) -> dict[str, object]:
        return {
            "fits_now": self.fits_now,
            "fits_ever": self.ever,
            "start_in_s": None if self.start is None else max(0.0, self.start - now),
            "reason": self.reason,
            "finishing": list(self.finishing),
        }


def what_if(sched: Books, job: Job, now: float) -> WhatIf:
    """Whether ``job`` (not in the core) would fit now, when, or never; see the module
    docstring. Leaves the core's books as they were."""
    fork = sched.state.fork()
    if trial(sched.framework, fork, job, job.gang_min, now) is not None:
        return WhatIf(True, now, "fits now")
    probe = JobRecord(job, -1, queued_since=now)
    reservation = reserve(sched, probe, now)
    if reservation is not None:
        who = ", ".join(reservation.finishing[:5])
        more = " ..." if len(reservation.finishing) > 5 else ""
        return WhatIf(
            False,
            reservation.start,
            f"would fit in {max(0.0, reservation.start - now):.0f}s once {who}{more} finish",
            tuple(reservation.finishing),
        )
    ctx = CycleContext(fork, job, job.resources, now, what_if=True)
    explanation = explain_placement(sched.framework, ctx, 0, job.gang_min)
    lines = [explanation.summary, *(str(r) for r in explanation.rejections)]
    return WhatIf(False, None, "never: " + "; ".join(lines))
