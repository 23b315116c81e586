"""preemption: a PostFilter that frees room for a job by preempting others.

Points: post_filter. Args: ``grace_s`` (carried by each Preempt action), ``min_runtime_s``
(a job younger than this in its current run is never a victim), ``priority`` and ``reclaim``
(enable each kind, both on), ``max_preemptions`` (a job preempted this many times is not
preempted again; unlimited by default).

Two kinds of victims, found among running, preemptible jobs past their minimum runtime:

- *priority*: jobs of strictly lower (base) priority in the preemptor's queue (any queue when
  the profile declares none);
- *reclaim*: when the preemptor's queue stays within its guarantee with the preemptor added,
  jobs of other queues that use more than their own guarantee (jobs marked borrowing first,
  then the most recently started), never so many that such a queue would drop below its
  guarantee in a flavor it used fully; an elastic job that could not go whole without
  that may still be shrunk by what its queue has room to lose.

Victims are chosen on a fork of the cluster: all candidates are removed; if the preemptor
does not fit then (placement and quota), nothing is preempted. Otherwise candidates are given
back one at a time, most valuable first (higher priority, then more work lost since their
last checkpoint, then smaller), and each stays only if the preemptor still fits. What remains
are the victims, and the preemptor fits once they are gone: a job that checkpointed recently
(or checkpoints continuously) is preempted before one that would lose more, and its
Preempt says so. A checkpointable victim gets its ``notice_s`` first. The freed capacity is kept for
the preemptor: until it starts, the core admits no other job whose placement would stop it
from fitting.

No loops: a job never preempts a job of equal or higher priority (priority kind), a job that
borrows never reclaims (reclaim kind, so a reclaimed job cannot reclaim back while its queue
is above its guarantee), and each pair of jobs preempts at most once, in one direction,
ever: if A preempted B, A never preempts B again and B never preempts A.

Several preemptions may be in flight: a plan is made on a fork where the capacity promised
to earlier preemptors (their victims' resources, and they placed there) is already taken, so
every promise can be kept at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import ClusterState
from hetsched.cluster.usage import (
    Usage,
    capacity,
    dominant_share,
)
from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import Rejection
from hetsched.framework.registry import register
from hetsched.framework.status import Status
from hetsched.keys import TaskKey
from hetsched.model.lifecycle import JobState
from hetsched.model.topology import short_level
from hetsched.scheduler.actions import PreemptionKind
from hetsched.scheduler.books import Books
from hetsched.scheduler.checkpoints import work_lost
from hetsched.scheduler.placing import trial
from hetsched.scheduler.records import JobRecord
from hetsched.scheduler.resize import resizable

__all__ = ["Plan", "Preemption", "PreemptionArgs", "plan"]

#: the CycleContext.data key the plan is handed to the core under
PLAN_KEY = "preemption"


class PreemptionArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    grace_s: float = Field(default=30.0, ge=0)
    min_runtime_s: float = Field(default=0.0, ge=0)
    priority: bool = True
    reclaim: bool = True
    max_preemptions: int | None = Field(default=None, ge=0)


@dataclass(frozen=True, slots=True)
class Plan:
    victims: tuple[JobRecord, ...]
    kinds: dict[str, PreemptionKind]
    grace_s: float
    #: elastic jobs shrunk instead of preempted: job id -> the count it keeps
    shrinks: dict[str, int] = field(default_factory=dict)


@register("preemption", PreemptionArgs)
class Preemption:
    """Priority preemption and quota reclaim, with safeguards and no loops."""

    name = "preemption"

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        self.args = args if isinstance(args, PreemptionArgs) else PreemptionArgs()
        self.handle = handle
        self._core: Books | None = None

    def _books(self) -> Books | None:
        """Part of the core, it plans on the core's books (on forks: it changes nothing),
        which the core's handle offers beyond what other plugins read. Checked on first use:
        the core is still being built when its plugins are."""
        if self._core is None and isinstance(self.handle, Books):
            self._core = self.handle
        return self._core

    def post_filter(self, ctx: CycleContext, diagnosis: Sequence[Rejection]) -> Status:
        """Leaves a :class:`Plan` in ``ctx.data["preemption"]`` on success."""
        core = self._books()
        if core is None:
            return Status.unschedulable("preemption needs the scheduler", plugin=self.name)
        record = core.jobs.get(ctx.job.id)
        if record is None:
            return Status.unschedulable("unknown job", plugin=self.name)
        result = plan(core, self.args, record, ctx.now)
        if isinstance(result, str):
            return Status.unschedulable(result, plugin=self.name)
        ctx.data[PLAN_KEY] = result
        return Status.success()


def _keys(record: JobRecord) -> list[tuple[TaskKey, Placement]]:
    return [(TaskKey(record.id, t, record.run), p) for t, p in record.placements.items()]


def _held_keys(record: JobRecord) -> list[tuple[TaskKey, Placement]]:
    return [(TaskKey(record.id, t, record.run + 1), p) for t, p in record.held.items()]


def _eligible(
    sched: Books, args: PreemptionArgs, preemptor: JobRecord, victim: JobRecord, now: float
) -> bool:
    if victim is preemptor or victim.state is not JobState.RUNNING or not victim.placements:
        return False
    if not victim.job.preemptible or victim.started is None:
        return False
    if now - victim.started < args.min_runtime_s:
        return False
    if victim.id in preemptor.preempted_jobs or victim.id in preemptor.preempted_by:
        return False
    return args.max_preemptions is None or victim.preemptions < args.max_preemptions


def candidates(
    sched: Books, args: PreemptionArgs, preemptor: JobRecord, now: float
) -> tuple[dict[str, PreemptionKind], dict[str, int]]:
    """Eligible victims and their kind, in no particular order, and the elastic ones that
    quota reclaim may only shrink: job -> the count it keeps at least."""
    quotas = sched.quotas
    floors: dict[str, int] = {}
    job = preemptor.job
    out: dict[str, PreemptionKind] = {}
    reclaimer = False
    usage: dict[str, Usage] = {}
    if quotas.enabled and args.reclaim:
        need = sched.request_of(job, min(job.gang_min, len(preemptor.unplaced)))
        usage = quotas.usage(sched.ledger)
        reclaimer = all(
            usage[job.queue].get(f, 0) + amount <= quotas.nominal(job.queue, f)
            for f, amount in need.items()
            if amount > 0 and f in quotas.flavors
        )
    reclaimable: dict[str, list[JobRecord]] = {}
    for victim in sched.holding_jobs():  # a victim runs: it holds resources
        if not _eligible(sched, args, preemptor, victim, now):
            continue
        same = not quotas.enabled or victim.job.queue == job.queue
        if args.priority and same and victim.job.priority < job.priority:
            out[victim.id] = PreemptionKind.PRIORITY
        elif reclaimer and victim.job.queue != job.queue:
            reclaimable.setdefault(victim.job.queue, []).append(victim)
    for queue, jobs in reclaimable.items():
        # keep the queue at or above its guarantee in every flavor it uses fully
        room = {
            f: usage[queue].get(f, 0) - quotas.nominal(queue, f)
            for f in quotas.flavors
            if usage[queue].get(f, 0) >= quotas.nominal(queue, f)
        }
        if not any(v > 0 for v in room.values()):
            continue
        jobs.sort(key=lambda r: (not r.borrowing, -(r.started or 0.0), r.seq))
        taken: Usage = Counter()
        for victim in jobs:
            held = Counter(sched.ledger.by_job.get(victim.id, {}))
            if all(taken[f] + held.get(f, 0) <= r for f, r in room.items()):
                taken.update(held)
                out[victim.id] = PreemptionKind.RECLAIM
            elif (keep := _reclaim_floor(victim, held, taken, room)) is not None:
                out[victim.id] = PreemptionKind.RECLAIM
                floors[victim.id] = keep
    return out, floors


def _reclaim_floor(
    victim: JobRecord, held: Usage, taken: Usage, room: Mapping[str, int]
) -> int | None:
    """An elastic victim whose whole usage would take its queue below its guarantee: the
    count it keeps when it gives up only what the queue has room to lose (its tasks are
    alike), taking that from ``taken``; None when it cannot give up a task."""
    if victim.job.min_replicas is None or not resizable(victim) or victim.count < 1:
        return None
    each = {f: n // victim.count for f, n in held.items()}
    give = victim.count - victim.job.min_replicas
    for f, r in room.items():
        if each.get(f, 0) > 0:
            give = min(give, (r - taken[f]) // each[f])
    if give < 1:
        return None
    taken.update({f: n * give for f, n in each.items()})
    return victim.count - give


def plan(sched: Books, args: PreemptionArgs, preemptor: JobRecord, now: float) -> Plan | str:
    """The victims that let ``preemptor`` start, or why there are none. A job that requires
    one network domain preempts inside one: of the domains whose running jobs alone make
    room for it, the one that needs the fewest victims (the first on ties)."""
    if preemptor.nominated:
        return "already waiting for its victims to stop"
    kinds, floors = candidates(sched, args, preemptor, now)
    if not kinds:
        return "no job may be preempted for it (priority, queue, minimum runtime, history)"
    pool = [sched.jobs[i] for i in kinds]
    pools = _by_domain(sched, preemptor, pool)
    if pools is None:
        return _choose(sched, args, preemptor, pool, (kinds, floors), now)
    best: Plan | str = f"no single {pools[0]} has jobs enough to preempt for it"
    for victims in pools[1]:
        found = _choose(sched, args, preemptor, victims, (kinds, floors), now)
        if isinstance(found, Plan) and (
            not isinstance(best, Plan) or len(found.victims) < len(best.victims)
        ):
            best = found
    return best


def _by_domain(
    sched: Books, preemptor: JobRecord, pool: list[JobRecord]
) -> tuple[str, list[list[JobRecord]]] | None:
    """For a job that requires one network domain: the level's short name and, per domain
    (in domain order), the candidates with a task inside it; None for other jobs."""
    topology = preemptor.job.topology
    net = sched.state.network()
    if topology is None or topology.required is None or net is None:
        return None
    depth = net.depth(topology.required)
    if depth is None:
        return None
    domains: dict[int, list[JobRecord]] = {}
    for victim in pool:
        rows = {sched.state.node_index[p.node] for p in victim.placements.values()}
        for domain in sorted({net.domain_of(depth, row) for row in rows}):
            domains.setdefault(domain, []).append(victim)
    return short_level(topology.required), [domains[d] for d in sorted(domains)]


def _choose(
    sched: Books,
    args: PreemptionArgs,
    preemptor: JobRecord,
    pool: list[JobRecord],
    found: tuple[dict[str, PreemptionKind], dict[str, int]],
    now: float,
) -> Plan | str:
    """The victims among ``pool`` that let ``preemptor`` start (see the module doc); a
    victim with a floor in ``found`` keeps at least that many ranks."""
    kinds, floors = found
    needed = min(preemptor.job.gang_min, len(preemptor.unplaced))
    promises = _promised(sched, now, skip=preemptor)
    fork = promises.fork
    _clear(fork, preemptor, pool, floors)
    removed = {v.id for v in pool if v.id not in floors}
    cut = {v.id: floors[v.id] for v in pool if v.id in floors}
    if not _fits(sched, fork, preemptor, needed, removed, now, promises.minus, cut):
        return f"it would not fit even if all {len(pool)} eligible jobs were preempted"
    total = capacity(sched.state)

    def value(victim: JobRecord) -> tuple[Hashable, ...]:
        size = dominant_share(sched.ledger.by_job.get(victim.id, {}), total)
        # given back first: priority candidates (reclaim borrowers first), higher priority,
        # more work lost, smaller
        return (
            kinds[victim.id] is PreemptionKind.RECLAIM,
            -victim.job.priority,
            -work_lost(victim, now),
            size,
            victim.seq,
        )

    order = sorted(pool, key=value)
    # cut: job -> the rank from which its tasks stay removed
    for victim in (v for v in order if v.id not in floors):
        # first every job at its minimum (an elastic job's ranks below it, else all)
        held = [(k, p) for k, p in _keys(victim) if k.task < _floor(victim)]
        for key, placement in held:
            fork.allocate(key, placement)
        removed.discard(victim.id)
        cut[victim.id] = _floor(victim)
        if not _fits(sched, fork, preemptor, needed, removed, now, promises.minus, cut):
            for key, _ in held:
                fork.release(key)
            removed.add(victim.id)
            del cut[victim.id]
    shrinks = _regrow(sched, fork, preemptor, needed, removed, cut, order, now, promises.minus)
    if not removed and not shrinks:
        return "it fits without preempting anyone"
    if not alone(sched, preemptor, removed, now, shrinks):
        # it would also need what other preemptions in flight free: wait for those instead
        return "it would fit only once other preemptions in flight are done"
    victims = tuple(sorted((sched.jobs[i] for i in removed), key=lambda r: r.seq))
    kept = {v.id: kinds[v.id] for v in victims}
    kept.update((i, kinds[i]) for i in shrinks)
    return Plan(victims, kept, args.grace_s, shrinks)


def _clear(
    fork: ClusterState, preemptor: JobRecord, pool: list[JobRecord], floors: Mapping[str, int]
) -> None:
    """Release on ``fork`` the preemptor's own partial gang hold (it is placed afresh) and
    every candidate's tasks, but a victim's ranks below its floor."""
    for key, _ in _held_keys(preemptor):
        fork.release(key)
    for victim in pool:
        for key, _ in _keys(victim):
            if key.task >= floors.get(victim.id, 0):
                fork.release(key)


def _floor(victim: JobRecord) -> int:
    """The ranks a victim keeps at least unless it is preempted: an elastic job that may
    be resized now keeps its minimum, any other job all its tasks."""
    job = victim.job
    if job.min_replicas is not None and resizable(victim):
        return job.min_replicas
    return victim.count


def _regrow(
    sched: Books,
    fork: ClusterState,
    preemptor: JobRecord,
    needed: int,
    removed: set[str],
    cut: dict[str, int],
    order: list[JobRecord],
    now: float,
    base: Mapping[str, Usage],
) -> dict[str, int]:
    """Give the kept elastic jobs back their ranks above the minimum, rank by rank, while
    the preemptor still fits: what stays cut is how far each is shrunk (job -> count)."""
    shrinks: dict[str, int] = {}
    for victim in order:
        if victim.id not in cut or cut[victim.id] >= victim.count:
            continue
        for key, placement in sorted(_keys(victim), key=lambda kp: kp[0].task):
            if key.task < cut[victim.id]:
                continue
            fork.allocate(key, placement)
            cut[victim.id] = key.task + 1
            if not _fits(sched, fork, preemptor, needed, removed, now, base, cut):
                fork.release(key)
                cut[victim.id] = key.task
                break
        if cut[victim.id] < victim.count:
            shrinks[victim.id] = cut[victim.id]
    return shrinks


def promised_fork(sched: Books, now: float, skip: JobRecord | None = None) -> ClusterState:
    """A fork of the live state as it will be once every preemption in flight is done: the
    victims' held allocations released and each promised preemptor (but ``skip``) placed,
    in arrival order. Use :func:`promises_kept` to know whether all of them fitted."""
    return _promised(sched, now, skip).fork


def promises_kept(sched: Books, now: float, skip: JobRecord | None = None) -> bool:
    """Does every promised preemptor (but ``skip``) still fit, on the nodes and within its
    quotas, given the live state: each as soon as its own victims have stopped (whatever
    the others' do), and all together once every victim has stopped?"""
    for record in sched.promised.values():
        if record is not skip and not alone(sched, record, set(record.nominated), now):
            return False
    return _promised(sched, now, skip).kept


def alone(
    sched: Books,
    preemptor: JobRecord,
    victims: set[str],
    now: float,
    shrinks: Mapping[str, int] | None = None,
) -> bool:
    """Does ``preemptor`` fit once ``victims`` stop (and the ``shrinks`` planned shrink to
    their counts), with every other job as it is now?"""
    fork = sched.state.fork()
    minus: dict[str, Usage] = {}
    cuts = [(j, 0) for j in victims] + list((shrinks or {}).items())
    for job_id, cut in cuts:
        victim = sched.jobs[job_id]
        keys = list(victim.stopping) or [k for k, _ in _keys(victim) if k.task >= cut]
        for key in keys:
            if key in fork.allocations:
                fork.release(key)
                _take(minus, sched, victim, key)
    for key, _ in _held_keys(preemptor):
        fork.release(key)
    needed = min(preemptor.job.gang_min, len(preemptor.unplaced))
    return _fits(sched, fork, preemptor, needed, set(), now, minus)


@dataclass(slots=True)
class _Promises:
    fork: ClusterState
    kept: bool
    #: per leaf queue, usage to take away from the ledger to see the queues as they will
    #: be: victims' stopping tasks and preemptors' holds gone, preemptors running (negative)
    minus: dict[str, Usage]


def _promised(sched: Books, now: float, skip: JobRecord | None) -> _Promises:
    fork = sched.state.fork()
    minus: dict[str, Usage] = {}
    promised = sorted((r for r in sched.promised.values() if r is not skip), key=lambda r: r.seq)
    for record in promised:
        for job_id in record.nominated:
            victim = sched.jobs[job_id]
            for key in victim.stopping:
                if key in fork.allocations:
                    fork.release(key)
                    _take(minus, sched, victim, key)
        for key, _ in _held_keys(record):
            fork.release(key)
            _take(minus, sched, record, key)
    kept = True
    for record in promised:
        needed = min(record.job.gang_min, len(record.unplaced))
        placements = trial(sched.framework, fork, record.job, needed, now, keep=True)
        if placements is None:
            kept = False
            continue
        if sched.quotas.enabled:
            need: Usage = Counter()
            for placement in placements:
                need.update(sched.usage_of(record.job, placement))
            queue = record.job.queue
            if sched.quotas.check(queue, need, sched.ledger, sched.state, minus) is not None:
                kept = False
            minus.setdefault(queue, Counter()).subtract(need)
    return _Promises(fork, kept, minus)


def _take(minus: dict[str, Usage], sched: Books, record: JobRecord, key: TaskKey) -> None:
    entry = sched.ledger.by_key.get(key)
    if entry is not None:
        minus.setdefault(record.job.queue, Counter()).update(entry[1])


def _fits(
    sched: Books,
    fork: ClusterState,
    preemptor: JobRecord,
    needed: int,
    removed: set[str],
    now: float,
    base: Mapping[str, Usage] | None = None,
    cut: Mapping[str, int] | None = None,
) -> bool:
    """Does ``preemptor`` fit on ``fork`` and within its quotas with the ``removed`` jobs'
    usage gone, and the ranks of each job in ``cut`` from its cut up (and ``base``, the
    preemptions in flight, applied)?"""
    placements = trial(sched.framework, fork, preemptor.job, needed, now)
    if placements is None:
        return False
    if not sched.quotas.enabled:
        return True
    minus: dict[str, Usage] = {q: Counter(u) for q, u in (base or {}).items()}
    for job_id in removed:
        record = sched.jobs[job_id]
        minus.setdefault(record.job.queue, Counter()).update(sched.ledger.by_job.get(job_id, {}))
    for job_id, rank in (cut or {}).items():
        record = sched.jobs[job_id]
        for key, _ in _keys(record):
            if key.task >= rank:
                _take(minus, sched, record, key)
    for key, _ in _held_keys(preemptor):  # its hold is placed afresh
        _take(minus, sched, preemptor, key)
    need: Usage = Counter()
    for placement in placements:
        need.update(sched.usage_of(preemptor.job, placement))
    return sched.quotas.check(preemptor.job.queue, need, sched.ledger, sched.state, minus) is None
