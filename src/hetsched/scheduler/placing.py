"""What-if placement: would a job's tasks fit on a (usually forked) cluster state?

Used by backfill (the head job at the reserved time), preemption (the preemptor once its
victims are gone) and the guards that keep that capacity for them. A trial allocates on the
given state and always gives everything back, so the state is unchanged afterwards. Reserve,
Permit and Bind plugins do not run: a trial commits to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocKey, ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework
from hetsched.model.job import Job
from hetsched.scheduler.topology import TopologyPlan, place_in_domains, unresolvable

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
    if job.topology is not None:
        return _in_domains(framework, ctx, count, keep)
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


@dataclass(slots=True)
class _Taken:
    """What a topology trial took on its state (a :class:`~hetsched.scheduler.topology.Taker`)."""

    state: ClusterState
    job: Job
    keys: list[AllocKey] = field(default_factory=list)
    placed: list[Placement] = field(default_factory=list)

    def take(self, task: int, placement: Placement) -> bool:
        key: AllocKey = trial_key(self.job, len(self.keys))
        self.state.allocate(key, placement)
        self.keys.append(key)
        self.placed.append(placement)
        return True

    def mark(self) -> int:
        return len(self.keys)

    def undo_to(self, mark: int) -> None:
        while len(self.keys) > mark:
            self.state.release(self.keys.pop())
            self.placed.pop()


def _in_domains(
    framework: Framework, ctx: CycleContext, count: int, keep: bool
) -> list[Placement] | None:
    """:func:`trial` for a job that asks for network domains."""
    assert ctx.job.topology is not None
    net = ctx.state.network()
    if net is None or unresolvable(net, ctx.job.topology) is not None:
        return None
    taken = _Taken(ctx.state, ctx.job)
    plan = TopologyPlan(framework, ctx, net, taken, list(range(count)))
    if ctx.job.groups:
        contexts = {ctx.request: ctx}

        def context_of(task: int) -> CycleContext:
            request = ctx.job.request_of(task)
            if request not in contexts:
                contexts[request] = CycleContext(ctx.state, ctx.job, request, ctx.now, what_if=True)
            return contexts[request]

        plan.context_of = context_of
    try:
        place_in_domains(plan, count, count)
        return list(taken.placed) if len(taken.placed) >= count else None
    finally:
        if not keep or len(taken.placed) < count:
            taken.undo_to(0)
