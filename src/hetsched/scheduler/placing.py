"""What-if placement: would a job's tasks fit on a (usually forked) cluster state?

Used by backfill (the head job at the reserved time), preemption (the preemptor once its
victims are gone) and the guards that keep that capacity for them. A trial allocates on the
given state and always gives everything back, so the state is unchanged afterwards. Reserve,
Permit and Bind plugins do not run: a trial commits to nothing.
"""

from __future__ import annotations

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocKey, ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework
from hetsched.model.job import Job

__all__ = ["trial", "trial_key"]


def trial_key(job: Job, index: int) -> str:
    """The allocation key of a kept trial placement (not a task: trials have no runs)."""
    return f"{job.id}/trial{index}"


def trial(
    framework: Framework,
    state: ClusterState,
    job: Job,
    count: int,
    now: float,
    keep: bool = False,
) -> list[Placement] | None:
    """Placements for ``count`` tasks of ``job`` chosen as a real attempt would, or None.

    With ``keep`` a successful trial leaves its placements allocated (under keys
    ``<job>/trial<i>``), so that later trials on the same fork see them taken.
    """
    ctx = CycleContext(state, job, job.resources, now, what_if=True)
    if count <= 0:
        return []
    if not framework.prefilter(ctx).ok:
        return None
    # a job with groups: each task with its group's request (tasks in order, all of them)
    contexts = {job.resources: ctx}
    for group in job.groups:
        if group.resources not in contexts:
            contexts[group.resources] = other = CycleContext(
                state, job, group.resources, now, what_if=True
            )
            if not framework.prefilter(other).ok:
                return None
    keys: list[AllocKey] = []
    placed: list[Placement] = []
    try:
        for index in range(count):
            request = job.request_of(index) if job.groups else job.resources
            placement = framework.select(contexts[request])
            if placement is None:
                return None
            key: AllocKey = trial_key(job, index)
            state.allocate(key, placement)
            keys.append(key)
            placed.append(placement)
        if keep:
            keys = []
        return placed
    finally:
        for key in reversed(keys):
            state.release(key)
