"""The engine's round mode: Gavel's rounds, decided by the policies of :mod:`hetsched.rounds`.

It runs on the engine's one loop (:mod:`.loop`): each step is a round boundary, and wakes
the loop at the round's end (or at the next arrival when nothing can run). Time moves in
rounds (360 s by default), as in Gavel's simulator:

- at a round boundary, jobs that arrived since the last one join (a job waits for the next
  boundary), and finished jobs leave; when the set of active jobs changed and at least
  ``reset_s`` (Gavel's 1,920 s) passed since the last solve, the shares are reset
  (``rounds.reset_ledger``: what the old allocation promised minus what each job got goes
  into its deficit) and the policy computes a new allocation ``X`` (``rounds.solve``), as
  Gavel's simulator does; in between, new jobs have no share of ``X`` and, as in Gavel's
  mechanism, do not run until the next solve: the mechanism still takes them in its
  order (after every job with a share) and the devices it gives them stay idle for the
  round (Gavel assigns workers only to the jobs of its allocation);
- the mechanism (``rounds.choose_round``) picks the model each job runs on for the round
  from ``X`` and the time each job received since the last reset of the shares;
- a job that runs does ``min(remaining, rate x round_s)`` work at its rate on the model it
  got, and ends within the round when that was all it had left; the round ends when the
  last job of the round does (a full round unless all of them finished early); with no job
  active the clock jumps to the next arrival.

Devices are counted per model (Gavel's 1-GPU servers: which devices of a model a job gets
does not change its speed), so a job runs whenever its model has ``scale`` devices free.
Every round counts as a preemption each job that ran the round before and waits now, and
as a migration each job that runs on another model than the round before; a checkpoint
every round is assumed (Gavel's jobs save at each round's end), so no work is lost.

Measured (over the jobs of ``window``, Gavel's steady-state window, or all jobs): each
job's completion time; its isolated completion time, its work at the rate of a 1/n share
of every model, n being the active jobs just after it arrived (Themis' and Gavel's
baseline); utilization of the devices between the window's first arrival and its last
completion. The job stream is read lazily and the run ends as soon as every measured job
finished, so a window of jobs 4000-4999 needs only the jobs that arrive before then.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from hetsched.rounds import (
    Ledger,
    PolicyOptions,
    RoundInput,
    carry_allocation,
    choose_round,
    model_order,
    priorities,
    record_round,
    solve_if_due,
)
from hetsched.rounds.problem import FloatArray, IntArray
from hetsched.sim.engine.loop import EventLoop
from hetsched.sim.engine.packing import pack_round
from hetsched.sim.engine.round_results import RoundConfig, RoundJob, RoundOutcome, RoundResult

__all__ = ["RoundConfig", "RoundJob", "RoundOutcome", "RoundResult", "RoundSimulator"]


#: callback ``(measured jobs finished, measured jobs, virtual time)`` for progress bars
Progress = Callable[[int, int, float], None]


@dataclass(slots=True)
class _Active:
    """The active jobs, columnar (rows in arrival order); rebuilt when the set changes."""

    ids: list[str] = field(default_factory=list)
    jobs: list[RoundJob] = field(default_factory=list)
    remaining: FloatArray = field(default_factory=lambda: np.zeros(0))
    isolated: FloatArray = field(default_factory=lambda: np.zeros(0))
    last: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: each job's kind in the pair table (-1: never shares)
    kinds: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))


class RoundSimulator:
    """One round-based run of ``jobs`` (in arrival order) on ``capacity[j]`` devices of
    each of ``models``. Call :meth:`run` once."""

    def __init__(
        self,
        models: Sequence[str],
        capacity: Sequence[int],
        jobs: Iterable[RoundJob],
        config: RoundConfig | None = None,
        progress: Progress | None = None,
    ) -> None:
        if len(models) != len(capacity) or not models:
            raise ValueError("models and capacity: one count per model, at least one model")
        if any(c < 0 for c in capacity):
            raise ValueError(f"capacity: counts must be >= 0, got {list(capacity)}")
        self.models = tuple(models)
        self.capacity = np.asarray(capacity, np.int64)
        self.config = config or RoundConfig()
        self._stream: Iterator[RoundJob] = iter(jobs)
        self._progress = progress
        self._options = PolicyOptions(
            alpha=self.config.alpha,
            seed=self.config.seed,
            central=self.config.central,
            catchup_floor=self.config.catchup_floor,
        )
        self._on_change = self.config.on_change()
        pairs = self.config.pairs
        if pairs is not None and pairs.models != self.models:
            raise ValueError(f"pairs: the table is for {pairs.models}, not {self.models}")
        self._kind_index = {} if pairs is None else {k: i for i, k in enumerate(pairs.kinds)}
        #: the engine's one loop: each step is a round boundary (or a wait for an arrival)
        self._loop: EventLoop[None] = EventLoop()
        self._span_start: float | None = None
        self._outcomes: dict[str, RoundOutcome] = {}
        self._measured: list[RoundOutcome] = []
        self._arrived = 0
        self._next: RoundJob | None = None
        self._active = _Active()
        self._problem: RoundInput | None = None
        self._x: FloatArray = np.zeros((0, len(models)))
        self._ledger = Ledger.start([], self.models, 0.0, prior_s=self.config.round_s / 2)
        self._x_ids: list[str] = []
        #: the jobs of the last solve: only they run (see the module)
        self._solved: set[str] = set()
        self._stale = False
        self._busy = np.zeros(len(models))
        self._effective = 0.0
        self.rounds = self.solves = self.lps = 0
        self.solve_wall_s = 0.0
        self.preemptions = self.migrations = 0

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> RoundResult:
        """Run on the engine's loop, one step per round (or wait), until every measured
        job finished, ``until`` passed or nothing is left to run."""
        self._next = next(self._stream, None)
        self._loop.push(0.0, 0, None)
        self._loop.run(self._advance)
        return self._result(self._loop.now, self._span_start)

    def _advance(self, now: float) -> bool:
        """The loop's step at ``now``: admit arrivals, then run a round and wake at its
        end, or wake at the next arrival (or solve) when nothing can run; False to stop."""
        self._loop.pop_due(now)
        changed = self._admit(now)
        if self._span_start is None and self._measured:
            self._span_start = self._measured[0].arrival
        until = self.config.until
        if self._measured_done() or (until is not None and now >= until):
            return False
        if not self._active.ids:
            if self._next is None:
                return False
            return self._wake(max(now, self._next.arrival))
        if changed or self._problem is None:
            self._follow(now)
        self._maybe_solve(now)
        length = self._round(now, self._span_start)
        if length is None:  # nothing can run: wait for an arrival or the next solve
            wake = [self._next.arrival] if self._next is not None else []
            if self._stale:
                # the next solve; past ``now`` by at least one step of the clock, or a
                # rounding of ``since + reset_s - since`` below ``reset_s`` waits forever
                due = self._ledger.since + self.config.reset_s
                wake.append(due if due > now else float(np.nextafter(now, np.inf)))
            return bool(wake) and self._wake(max(now, min(wake)))
        self._report(now + length)
        return self._wake(now + length)

    def _wake(self, time: float) -> bool:
        self._loop.push(time, 0, None)
        return True

    def _measured_done(self) -> bool:
        window = self.config.window
        if window is None:
            return (
                self._next is None and not self._active.ids and self._arrived == len(self._outcomes)
            )
        if self._arrived < window[1] and self._next is not None:
            return False
        return all(o.end is not None for o in self._measured)

    def _admit(self, now: float) -> bool:
        """Jobs that arrived by ``now`` join; True if any did."""
        new: list[RoundJob] = []
        while self._next is not None and self._next.arrival <= now:
            job = self._next
            if len(job.rates) != len(self.models):
                raise ValueError(f"job {job.id}: {len(job.rates)} rates for {len(self.models)}")
            new.append(job)
            self._next = next(self._stream, None)
        if not new:
            return False
        active = self._active
        n = len(active.ids) + len(new)
        for job in new:
            outcome = RoundOutcome(job.id, job.user or job.id, job.arrival, job.work, 0.0)
            outcome.isolated_s = job.work / max(self._isolated_rate(job, n), 1e-300)
            if job.id in self._outcomes:
                raise ValueError(f"duplicate job id {job.id!r}")
            self._outcomes[job.id] = outcome
            window = self.config.window
            if window is None or window[0] <= self._arrived < window[1]:
                self._measured.append(outcome)
            self._arrived += 1
        active.ids += [job.id for job in new]
        active.jobs += new
        active.remaining = np.concatenate([active.remaining, [job.work for job in new]])
        active.isolated = np.concatenate([active.isolated, np.zeros(len(new))])
        active.last = np.concatenate([active.last, np.full(len(new), -1, np.int64)])
        kinds = [self._kind_index.get(job.kind, -1) if job.kind else -1 for job in new]
        active.kinds = np.concatenate([active.kinds, np.asarray(kinds, np.int64)])
        return True

    def _isolated_rate(self, job: RoundJob, n: int) -> float:
        rates = np.asarray(job.rates)
        fits = (rates > 0) & (job.scale <= self.capacity)
        share = np.where(fits, self.capacity / max(n, 1) / job.scale, 0.0)
        share = share / max(float(share.sum()), 1.0)
        return float((rates * share).sum())

    def _follow(self, now: float) -> None:
        """The round input for the active jobs (the set changed): the allocation keeps the
        rows of jobs still active, new jobs have none until the next solve."""
        active = self._active
        jobs = active.jobs
        self._x = carry_allocation(self._x, self._x_ids, active.ids, len(self.models))
        self._x_ids = list(active.ids)
        self._problem = RoundInput.of(
            active.ids,
            self.models,
            np.array([job.rates for job in jobs], np.float64).reshape(len(jobs), len(self.models)),
            [job.scale for job in jobs],
            self.capacity,
            weight=[job.weight for job in jobs],
            remaining=np.maximum(active.remaining, 0.0),
            elapsed=[max(now - job.arrival, 0.0) for job in jobs],
            isolated_time=active.isolated.copy(),
            current=active.last.copy(),
        )
        self._ledger = self._ledger.follow(active.ids)
        self._stale = True

    def _maybe_solve(self, now: float) -> None:
        """Solve when the active set changed, by Gavel's rule (:func:`rounds.solve_if_due`)."""
        if not self._stale:
            return
        problem = self._problem
        assert problem is not None
        started = time.perf_counter()
        ledger, allocation = solve_if_due(
            self.config.policy,
            problem,
            self._options,
            self._ledger,
            self._x,
            now,
            reset_s=self.config.reset_s,
            first=self.solves == 0,
            on_change=self._on_change,
        )
        self._ledger = ledger
        if allocation is None:
            return
        self.solve_wall_s += time.perf_counter() - started
        self.solves += 1
        self.lps += allocation.solves
        self._x = allocation.x
        self._solved = set(self._active.ids)
        self._stale = False

    def _order(self) -> list[int]:
        """The order models are filled (:func:`rounds.model_order`)."""
        assert self._problem is not None
        seed, rounds = self.config.seed, self.rounds
        return model_order(self.config.policy, self._problem.throughput, seed, rounds)

    def _round(self, now: float, span_start: float | None) -> float | None:
        """Run one round from ``now``; its length, or None when no job could run."""
        problem = self._problem
        assert problem is not None
        ledger = self._ledger
        fifo = self.config.policy.endswith("fifo")
        assignment = choose_round(self._x, ledger, problem, self._order(), not fifo)
        unsolved = [i for i, job in enumerate(self._active.ids) if job not in self._solved]
        assignment[unsolved] = -1  # they hold the devices the mechanism gave them
        if not (assignment >= 0).any():
            self._ledger = ledger
            return None
        placed, speed, host = self._pack(assignment, problem, ledger)
        rows = np.flatnonzero(placed >= 0)
        active = self._active
        rates = speed[rows]
        work = np.minimum(active.remaining[rows], rates * self.config.round_s)
        ran = np.zeros(len(active.ids))
        ran[rows] = work / rates
        # the ledger counts time at the rate alone: a shared round counts in part
        alone = problem.throughput[rows, placed[rows]]
        charged = np.zeros(len(active.ids))
        charged[rows] = ran[rows] * rates / alone
        self._ledger = record_round(ledger, placed, charged)
        active.remaining[rows] -= work
        iso = problem.isolated_rates()[rows]
        active.isolated[rows] += np.where(iso > 0, work / np.where(iso > 0, iso, 1.0), 0.0)
        self._count_moves(placed)
        if span_start is not None and now >= span_start:
            held = ran.copy()  # device time: a pair holds the host's devices once
            guests = np.flatnonzero(host >= 0)
            np.maximum.at(held, host[guests], ran[guests])
            held[guests] = 0.0
            np.add.at(self._busy, placed[rows], held[rows] * problem.scale[rows])
            best = problem.best_rates()[rows]
            self._effective += float((ran[rows] * problem.scale[rows] * rates / best).sum())
        length = float(ran.max())
        self._finish(now, ran, rows)
        self.rounds += 1
        return length

    def _pack(
        self, assignment: IntArray, problem: RoundInput, ledger: Ledger
    ) -> tuple[IntArray, FloatArray, IntArray]:
        """The model each job runs on, its rate this round and the job it shares with
        (-1: none); without a pair table, the mechanism's assignment at the rates alone."""
        pairs = self.config.pairs
        n = problem.n
        if pairs is None:
            speed = np.zeros(n)
            rows = np.flatnonzero(assignment >= 0)
            speed[rows] = problem.throughput[rows, assignment[rows]]
            return assignment, speed, np.full(n, -1, np.int64)
        need = priorities(self._x, ledger).max(axis=1, initial=0.0)
        host, speed = pack_round(
            assignment, need, self._active.kinds, problem.scale, problem.throughput, pairs
        )
        placed = assignment.copy()
        guests = np.flatnonzero(host >= 0)
        placed[guests] = assignment[host[guests]]
        return placed, speed, host

    def _count_moves(self, assignment: IntArray) -> None:
        active = self._active
        before = active.last
        stopped = (before >= 0) & (assignment < 0)
        moved = (before >= 0) & (assignment >= 0) & (assignment != before)
        for i in np.flatnonzero(stopped | moved):
            outcome = self._outcomes[active.ids[i]]
            if stopped[i]:
                outcome.preemptions += 1
            else:
                outcome.migrations += 1
        self.preemptions += int(stopped.sum())
        self.migrations += int(moved.sum())
        for i in np.flatnonzero(assignment >= 0):
            self._outcomes[active.ids[i]].rounds += 1
        active.last = assignment.astype(np.int64)

    def _finish(self, now: float, ran: FloatArray, rows: IntArray) -> None:
        """Jobs whose work is done leave, ending when their last piece of work did."""
        active = self._active
        done = rows[active.remaining[rows] <= 1e-9 * np.maximum(1.0, ran[rows])]
        if done.size == 0:
            return
        for i in done:
            self._outcomes[active.ids[i]].end = now + float(ran[i])
        keep = np.ones(len(active.ids), bool)
        keep[done] = False
        active.ids = [job for job, k in zip(active.ids, keep, strict=True) if k]
        active.jobs = [job for job, k in zip(active.jobs, keep, strict=True) if k]
        active.remaining = active.remaining[keep]
        active.isolated = active.isolated[keep]
        active.last = active.last[keep]
        active.kinds = active.kinds[keep]
        self._problem = None  # the set changed: a new allocation next round

    def _report(self, now: float) -> None:
        if self._progress is not None and self.rounds % 50 == 0:
            done = sum(1 for o in self._measured if o.end is not None)
            self._progress(done, self._total_measured(), now)

    def _total_measured(self) -> int:
        window = self.config.window
        return len(self._measured) if window is None else window[1] - window[0]

    def _result(self, now: float, span_start: float | None) -> RoundResult:
        measured = tuple(self._measured)
        complete = bool(measured) and all(o.end is not None for o in measured)
        if self.config.window is not None and len(measured) < self._total_measured():
            complete = False
        ends = [o.end for o in measured if o.end is not None]
        span_end = max(ends) if ends else now
        if self._progress is not None:
            self._progress(len(ends), self._total_measured(), now)
        return RoundResult(
            self.config.policy,
            self.models,
            tuple(int(c) for c in self.capacity),
            tuple(self._outcomes.values()),
            measured,
            now,
            self.rounds,
            self.solves,
            self.lps,
            self.solve_wall_s,
            tuple(float(b) for b in self._busy),
            (span_start if span_start is not None else 0.0, span_end),
            self.preemptions,
            self.migrations,
            complete,
            self._effective,
        )
