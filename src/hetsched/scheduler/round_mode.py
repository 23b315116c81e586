"""Round-based allocation inside the core: the profile's ``rounds`` section.

Every ``round_s`` (a *boundary*; the core asks for a wakeup there through
``next_wakeup``, and the first boundary is the first call with a job to run) the core:

1. takes the *round jobs*: active jobs whose one device request asks for whole devices of
   ``device_class`` and that can run on some device model of the cluster (a positive rate,
   a model their selector admits, whose nodes can hold every task of the job at once: a
   task's devices are on one node, so a model is offered to a multi-device or gang job
   only if enough of its nodes hold a task's count each). Other jobs (CPU-only,
   fractional devices, or too large for any single model's nodes) are placed by the
   ordinary cycle at any time;
2. charges each round job with the time it ran on its model since the last boundary
   (``rounds.record_round``), builds the problem from its books (``RoundInput``: per job
   its rate on each model from its speed model, its devices, its queue's weight, its
   remaining work as :mod:`~hetsched.scheduler.round_progress` estimates it, its age and
   isolated time; per model its healthy devices) and, when the set of jobs changed,
   solves the policy (``rounds.solve``) for a new allocation ``X`` (with
   ``solve_on_change`` off, only once ``reset_s`` passed since the shares were reset);
3. picks the round's assignment with the mechanism (``rounds.choose_round``): jobs that
   cannot be stopped now are *pinned* where they run and their devices are taken out
   first; the others are chosen from what is left;
4. realises it with its ordinary actions (:mod:`~hetsched.scheduler.round_realise`): a
   running job that gets no device is stopped (``Preempt``, kind ``round``, with its
   checkpoint notice); one given another model is moved (``Migrate``, kind ``round``)
   when its destination is free now, else stopped and placed on its model once the
   devices are free; a waiting job given a model is placed there (``Bind``) as soon as its
   devices are free. Placement on a model runs the profile's filters and scores over the
   nodes that hold that model (``Framework.select`` with a node mask), so a job lands
   where the profile would put it among them.

A job may be stopped or moved only when it is preemptible and checkpointable, runs whole
(nothing stopping, moving or finished) and has run ``min_runtime_s`` in its current run
(default half a round): no job is stopped or moved twice within that time. Any other
running job is pinned until it ends. Between boundaries a waiting round job waits for the
next one (``arrivals: wait``, as in Gavel); with ``arrivals: idle`` it may start on free
devices once the round's chosen jobs have all started, through the ordinary cycle.

State kept between calls (the shares' ledger, ``X``, the round's choices) is part of the
core's books and changes only in ``handle``; nothing here reads a clock.
"""

from __future__ import annotations

import numpy as np

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import ClusterState
from hetsched.framework.profile import RoundsSpec
from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import Job
from hetsched.model.lifecycle import JobState
from hetsched.model.selector import matches
from hetsched.model.speed import SpeedError, Speeds, job_devices, resolve
from hetsched.rounds import (
    Ledger,
    PolicyOptions,
    RoundInput,
    carry_allocation,
    choose_round,
    model_order,
    record_round,
    solve_if_due,
)
from hetsched.rounds.problem import FloatArray, IntArray
from hetsched.scheduler.books import Books
from hetsched.scheduler.records import JobRecord
from hetsched.scheduler.round_progress import ProgressBook
from hetsched.scheduler.round_realise import realise, start_chosen

__all__ = ["RoundBook", "run_rounds"]


class RoundBook:
    """The core's round state (see the module docstring)."""

    def __init__(self, spec: RoundsSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.options = PolicyOptions(alpha=spec.alpha, seed=seed, catchup_floor=spec.catchup_floor)
        #: the next boundary (None: no round job, the next one starts a round at once)
        self.next_at: float | None = None
        self.last_at: float | None = None
        self.rounds = 0
        self.solves = 0
        self.models: tuple[str, ...] = ()
        self.ledger = Ledger.start([], (), 0.0, prior_s=spec.round_s / 2)
        self.x: FloatArray = np.zeros((0, 0))
        self.ids: tuple[str, ...] = ()
        self.stale = False
        #: this round's choices still to start: job -> model
        self.plan: dict[str, str] = {}
        #: isolated time earned per job (finish-time fairness), and work done estimates
        self.isolated: dict[str, float] = {}
        self.progress = ProgressBook()
        #: job -> (topology version, runs in rounds?)
        self._member: dict[str, tuple[int, bool]] = {}

    # -- which jobs take part ------------------------------------------------------------

    def member(self, state: ClusterState, job: Job) -> bool:
        """Does ``job`` run in rounds (one whole-device request of the class, and some
        model of the cluster it can run on)? Cached until the topology changes."""
        known = self._member.get(job.id)
        if known is not None and known[0] == state.version:
            return known[1]
        answer = bool(_choices(job, self.spec.device_class)) and any(
            _hosts(job, self.spec.device_class, model, state) for model in _models(state, self)
        )
        self._member[job.id] = (state.version, answer)
        return answer

    def prune(self, live: set[str]) -> None:
        """Forget what is cached of jobs that ended."""
        if len(self._member) > 2 * len(live) + 64:
            self._member = {j: v for j, v in self._member.items() if j in live}

    def holds(self, sched: Books, record: JobRecord) -> bool:
        """Keep this waiting job from the ordinary cycle: it waits for a round (or was
        chosen for this one and is placed by the round)."""
        if record.state is not JobState.PENDING:
            return False
        if not self.member(sched.state, record.job):
            return False
        return self.spec.arrivals == "wait" or bool(self.plan)

    def explanation(self, record: JobRecord) -> str:
        model = self.plan.get(record.id)
        if model is not None:
            return f"chosen for {model} in this round: starts when its devices are free"
        policy = self.spec.policy
        if self.spec.arrivals == "idle":
            return f"round policy {policy}: the jobs chosen for this round start first"
        return (
            f"waits for a round: round policy {policy} allocates devices every "
            f"{self.spec.round_s:g}s and did not choose it for this one"
        )

    def wakeup(self) -> float | None:
        return self.next_at


# -- the cluster's models and the jobs' requests ---------------------------------------------


def _models(state: ClusterState, book: RoundBook) -> list[str]:
    cls = book.spec.device_class
    return [m for m in state.models(cls) if state.device_count(cls, m) > 0]


def _choices(job: Job, device_class: str) -> list[tuple[str | None, int]]:
    """The selectors and per-task counts of the whole-device alternatives of the job's one
    device request of the class (empty: it does not run in rounds)."""
    requests = job.resources.devices
    if len(requests) != 1:
        return []
    return [
        (c.selector, c.count)
        for c in requests[0].choices
        if c.device_class == device_class and c.share == SHARE_UNITS and c.count >= 1
    ]


def _hosts(job: Job, device_class: str, model: str, state: ClusterState) -> bool:
    """Could the cluster's devices of ``model`` hold all the job's tasks at once, each task
    on one node (an alternative of its request admits them), were nothing else running?
    A model whose devices add up to the job's size but are spread over nodes none of which
    holds a task's count does not: a round that chose it would leave the job waiting."""
    for selector, count in _choices(job, device_class):
        if _tasks_held(state, device_class, model, selector, count) >= job.replicas:
            return True
    return False


def _tasks_held(
    state: ClusterState, device_class: str, model: str, selector: str | None, count: int
) -> int:
    """How many tasks of ``count`` whole devices of ``model`` (that ``selector`` admits)
    the healthy devices of active nodes hold, each task on one node (cached until the
    topology or health changes)."""

    def compute() -> int:
        per_kind = np.array(
            [
                k.device_class == device_class
                and k.model == model
                and (selector is None or matches(selector, k.attributes))
                for k in state.kinds
            ]
            + [False]
        )
        per_node = (per_kind[state.dev_kind] & state.dev_healthy).sum(axis=1)
        return int((np.where(state.active, per_node, 0) // count).sum())

    return state.memo(("round_tasks", device_class, model, selector, count), compute)


def _model_of(state: ClusterState, placements: list[Placement]) -> str | None:
    """The device model a running job's tasks use (the first device's), None without."""
    for placement in placements:
        if placement.devices:
            return state.device_of(placement.devices[0].device_id).model
    return None


def _speeds(sched: Books, job: Job) -> Speeds:
    try:
        return resolve(job, sched.speed_table)
    except SpeedError:
        return Speeds({}, 1.0, 0.0)


def _weight(sched: Books, job: Job) -> float:
    """A job's share weight: its priority (at least 1, as Gavel's priority weights and
    the round engine read it) times its queue's weight."""
    return float(max(job.priority, 1)) * sched.queue_weight(job.queue)


def _movable(sched: Books, book: RoundBook, record: JobRecord, now: float) -> bool:
    job = record.job
    if record.state is not JobState.RUNNING:
        return True
    if job.checkpoint is None or not job.preemptible or not job.movable:
        return False
    if record.moving or record.stopping or record.finished or record.has_unplaced:
        return False
    if record.id in sched.nominations or record.started is None:
        return False
    return now - record.started >= book.spec.min_runtime


# -- the boundary ----------------------------------------------------------------------------


def run_rounds(sched: Books, book: RoundBook, now: float) -> None:
    """The round work of one ``handle`` call: a boundary if one is due, then the round's
    chosen jobs whose devices are free start. Between boundaries it costs nothing per job
    (the active jobs are scanned only at a boundary, or while no round is under way)."""
    if book.next_at is None or now >= book.next_at:
        active = sched.active_jobs()
        book.prune({r.id for r in active})
        members = [
            r
            for r in active
            if r.state in (JobState.PENDING, JobState.RUNNING) and book.member(sched.state, r.job)
        ]
        if members or book.next_at is not None:
            _boundary(sched, book, members, now)
    if book.plan:
        start_chosen(sched, book, now)


def _boundary(sched: Books, book: RoundBook, members: list[JobRecord], now: float) -> None:
    spec = book.spec
    book.plan.clear()
    models = tuple(_models(sched.state, book))
    if not members or not models:
        book.next_at = None
        book.last_at = now
        return
    book.next_at = now + spec.round_s
    if models != book.models:
        book.models = models
        book.ledger = Ledger.start([], models, now, prior_s=spec.round_s / 2)
        book.x, book.ids, book.stale = np.zeros((0, len(models))), (), True
    rows = _Rows.of(sched, book, members, now)
    _charge(sched, book, rows, now)
    problem = rows.problem(sched, book, now)
    _follow(book, problem, now)
    assignment = _choose(book, problem, rows)
    book.last_at = now
    book.rounds += 1
    realise(sched, book, rows.records, rows.models, assignment, rows.current, rows.pinned, now)


class _Rows:
    """The round jobs of one boundary, columnar, in arrival order."""

    def __init__(self, records: list[JobRecord], models: tuple[str, ...]) -> None:
        self.records = records
        self.models = models
        n, m = len(records), len(models)
        self.rates = np.zeros((n, m))
        self.scale = np.ones(n, np.int64)
        self.current = np.full(n, -1, np.int64)
        self.pinned = np.zeros(n, np.bool_)
        self.remaining = np.ones(n)
        self.ran = np.zeros(n)

    @classmethod
    def of(cls, sched: Books, book: RoundBook, records: list[JobRecord], now: float) -> _Rows:
        state, spec = sched.state, book.spec
        out = cls(records, book.models)
        index = {m: j for j, m in enumerate(book.models)}
        since = book.last_at if book.last_at is not None else now
        for i, record in enumerate(records):
            speeds = _speeds(sched, record.job)
            for j, model in enumerate(book.models):
                if _hosts(record.job, spec.device_class, model, state):
                    out.rates[i, j] = speeds.on(model)
            out.scale[i] = job_devices(record.job)
            held = list(record.placements.values()) or list(record.moving.values())
            where = _model_of(state, held)
            rate = 0.0
            if record.state is JobState.RUNNING and where is not None and where in index:
                out.current[i] = index[where]
                rate = speeds.on(where)
                started = record.started if record.started is not None else now
                out.ran[i] = max(now - max(started, since), 0.0) if record.placements else 0.0
            out.pinned[i] = not _movable(sched, book, record, now)
            if speeds.work > 0:
                done = book.progress.done(record, rate, now)
                out.remaining[i] = max(speeds.work - done, 0.0)
        book.progress.keep_only({r.id for r in records})
        return out

    def problem(self, sched: Books, book: RoundBook, now: float) -> RoundInput:
        state, cls = sched.state, book.spec.device_class
        capacity = [state.device_count(cls, m) for m in self.models]
        ids = [r.id for r in self.records]
        return RoundInput.of(
            ids,
            self.models,
            self.rates,
            self.scale,
            capacity,
            weight=[_weight(sched, r.job) for r in self.records],
            remaining=self.remaining,
            elapsed=[max(now - r.job.submit_time, 0.0) for r in self.records],
            isolated_time=[book.isolated.get(job, 0.0) for job in ids],
            current=self.current,
        )


def _charge(sched: Books, book: RoundBook, rows: _Rows, now: float) -> None:
    """Charge the shares with the time each job ran on its model since the last boundary,
    and credit its isolated time (what that work would have taken on a 1/n share)."""
    if book.ledger.job_ids:
        ids = {r.id: i for i, r in enumerate(rows.records)}
        where = np.full(len(book.ledger.job_ids), -1, np.int64)
        ran = np.zeros(len(book.ledger.job_ids))
        for row, job in enumerate(book.ledger.job_ids):
            i = ids.get(job)
            if i is not None and rows.current[i] >= 0:
                where[row], ran[row] = rows.current[i], rows.ran[i]
        book.ledger = record_round(book.ledger, where, ran)
    if not rows.records:
        return
    state, cls = sched.state, book.spec.device_class
    capacity = np.array([state.device_count(cls, m) for m in rows.models], np.int64)
    n = max(len(rows.records), 1)
    fits = (rows.rates > 0) & (rows.scale[:, None] <= capacity[None, :])
    share = np.where(fits, (capacity[None, :] / n) / rows.scale[:, None], 0.0)
    share = share / np.maximum(share.sum(axis=1), 1.0)[:, None]
    iso = (rows.rates * share).sum(axis=1)
    live = {r.id for r in rows.records}
    book.isolated = {j: t for j, t in book.isolated.items() if j in live}
    for i, record in enumerate(rows.records):
        j = rows.current[i]
        if j >= 0 and iso[i] > 0:
            work = rows.ran[i] * rows.rates[i, j]
            book.isolated[record.id] = book.isolated.get(record.id, 0.0) + work / iso[i]


def _follow(book: RoundBook, problem: RoundInput, now: float) -> None:
    """Follow the set of jobs; solve anew when it changed (Gavel's rule, see the module)."""
    spec = book.spec
    x = carry_allocation(book.x, book.ids, problem.job_ids, problem.m)
    if problem.job_ids != book.ids:
        book.stale = True
    book.x, book.ids = x, problem.job_ids
    book.ledger = book.ledger.follow(problem.job_ids)
    if not book.stale:
        return
    book.ledger, allocation = solve_if_due(
        spec.policy,
        problem,
        book.options,
        book.ledger,
        book.x,
        now,
        reset_s=spec.reset_s,
        first=book.solves == 0,
        on_change=spec.solve_on_change,
    )
    if allocation is None:
        return
    book.x = allocation.x
    book.solves += 1
    book.stale = False


def _choose(book: RoundBook, problem: RoundInput, rows: _Rows) -> IntArray:
    """The model of each job for the round (-1: none): pinned jobs where they run, the
    others by the mechanism over what the pinned ones leave."""
    assignment = np.where(rows.pinned, rows.current, -1).astype(np.int64)
    free = np.flatnonzero(~rows.pinned)
    if free.size == 0:
        return assignment
    used = np.zeros(problem.m, np.int64)
    held = np.flatnonzero(rows.pinned & (rows.current >= 0))
    np.add.at(used, rows.current[held], rows.scale[held])
    ids = [problem.job_ids[i] for i in free]
    sub = RoundInput.of(
        ids,
        problem.models,
        problem.throughput[free],
        problem.scale[free],
        np.maximum(problem.capacity - used, 0),
        weight=problem.weight[free],
        remaining=problem.remaining[free],
        elapsed=problem.elapsed[free],
        isolated_time=problem.isolated_time[free],
        current=problem.current[free],
    )
    policy = book.spec.policy
    order = model_order(policy, problem.throughput, book.seed, book.rounds)
    chosen = choose_round(
        book.x[free], book.ledger.follow(ids), sub, order, not policy.endswith("fifo")
    )
    assignment[free] = chosen
    _stay(assignment, rows)
    return assignment


def _stay(assignment: IntArray, rows: _Rows) -> None:
    """Undo moves that gain nothing: a running job sent from model p to q, where it runs
    at the same rate, trades places with a job of the same size sent to p that runs at the
    same rate on both (it stays; the other takes q). The devices used per model and every
    job's rate stay as the mechanism chose them; stops and moves are saved."""
    n = len(rows.records)
    for i in range(n):
        p, q = int(rows.current[i]), int(assignment[i])
        if rows.pinned[i] or p < 0 or q < 0 or p == q or rows.rates[i, p] != rows.rates[i, q]:
            continue
        for k in range(n):
            if (
                k != i
                and not rows.pinned[k]
                and assignment[k] == p
                and rows.current[k] != p
                and rows.scale[k] == rows.scale[i]
                and rows.rates[k, p] == rows.rates[k, q]
            ):
                assignment[i], assignment[k] = p, q
                break
