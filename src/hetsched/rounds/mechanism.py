"""Realising an allocation over rounds: which jobs run on which model next round.

``X`` says what fraction of the time each job should spend on each model; a round gives a
job all of a model's devices it needs or nothing. Gavel's mechanism, which this follows:

- a :class:`Ledger` keeps, per job and model, the round time the job received since the
  last reset (starting at ``prior_s``, half a round, so a new job is not infinitely behind)
  and its accumulated deficit;
- ``priority[i, j] = X[i, j] / (received[i, j] / received on model j by everyone)``: the
  jobs furthest behind their share come first; ``X x 1e9`` while model j has no time
  recorded, 0 where ``X`` is 0;
- per model, in the given model order (fastest first for the aware policies; shuffled per
  round for the agnostic ones, as Gavel does), jobs are taken by (priority, deficit, X)
  from the highest, skipping jobs already placed this round, jobs that cannot run there
  and jobs that do not fit in what is left; jobs with ``X`` = 0 come last and use what
  the others leave (work conservation), unless ``work_conserving`` is off (FIFO);
- after the round, :func:`record_round` adds the time each job ran; when the allocation is
  recomputed, :func:`reset_ledger` folds what each job should have received minus what it
  did into its deficit and starts the shares anew.

Every function returns new values; nothing is kept between calls but what the caller
keeps. A driver runs: ``a = choose_round(X, ledger, problem)``; carry out ``a`` for a round
(place, preempt, migrate at the boundary); ``ledger = record_round(ledger, a, seconds)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hetsched.rounds.problem import FloatArray, IntArray, RoundInput

__all__ = ["Ledger", "choose_round", "priorities", "record_round", "reset_ledger", "shuffled"]

#: Gavel's stand-in for "infinitely behind" (finite, so that 2 x it still orders above it)
_UNSEEN = 1e9


@dataclass(frozen=True, slots=True, eq=False)
class Ledger:
    """Round time per (job, model) since the last reset, deficits, and the reset time."""

    job_ids: tuple[str, ...]
    models: tuple[str, ...]
    received: FloatArray
    deficit: FloatArray
    since: float
    prior_s: float

    @classmethod
    def start(
        cls, job_ids: Sequence[str], models: Sequence[str], now: float, prior_s: float = 180.0
    ) -> Ledger:
        n, m = len(job_ids), len(models)
        return cls(
            tuple(job_ids), tuple(models), np.full((n, m), prior_s), np.zeros((n, m)), now, prior_s
        )

    def follow(self, job_ids: Sequence[str]) -> Ledger:
        """The ledger for a new list of active jobs: finished ones leave, new ones join at
        the prior with no deficit, the others keep their rows."""
        index = {job: i for i, job in enumerate(self.job_ids)}
        n, m = len(job_ids), len(self.models)
        received = np.full((n, m), self.prior_s)
        deficit = np.zeros((n, m))
        for row, job in enumerate(job_ids):
            old = index.get(job)
            if old is not None:
                received[row] = self.received[old]
                deficit[row] = self.deficit[old]
        return Ledger(tuple(job_ids), self.models, received, deficit, self.since, self.prior_s)


def priorities(x: FloatArray, ledger: Ledger) -> FloatArray:
    """``X / (share of each model's recorded time)`` per (job, model); see the module."""
    total = ledger.received.sum(axis=0)
    share = np.divide(
        ledger.received, total[None, :], out=np.zeros_like(ledger.received), where=total > 0
    )
    out = np.where(share > 0, x / np.where(share > 0, share, 1.0), x * _UNSEEN)
    return np.asarray(np.where(x > 0, out, 0.0), np.float64)


def shuffled(models: int, seed: int) -> list[int]:
    """A model order drawn with ``seed`` (the agnostic policies' per-round order)."""
    return [int(j) for j in np.random.default_rng(seed).permutation(models)]


def choose_round(
    x: FloatArray,
    ledger: Ledger,
    problem: RoundInput,
    order: Sequence[int] | None = None,
    work_conserving: bool = True,
) -> IntArray:
    """The model index each job runs on next round, -1 for none (see the module).

    ``ledger`` rows must follow ``problem.job_ids``. ``order`` is the order models are
    filled in (default: by index).
    """
    if ledger.job_ids != problem.job_ids:
        raise ValueError("the ledger's jobs are not the problem's: call ledger.follow(job_ids)")
    n, m = problem.n, problem.m
    prio = priorities(x, ledger)
    runnable = problem.runnable()
    free = problem.capacity.astype(np.int64).copy()
    scale = problem.scale
    out = np.full(n, -1, np.int64)
    index = np.arange(n)
    for j in order if order is not None else range(m):
        # highest (priority, deficit, X) first; ties in job order
        ranked = np.lexsort((index, -x[:, j], -ledger.deficit[:, j], -prio[:, j]))
        for i in ranked:
            if free[j] == 0:
                break
            if out[i] >= 0 or not runnable[i, j] or scale[i] > free[j]:
                continue
            if not work_conserving and prio[i, j] <= 0:
                continue
            out[i] = j
            free[j] -= scale[i]
    return out


def record_round(ledger: Ledger, assignment: IntArray, seconds: float | FloatArray) -> Ledger:
    """The ledger after a round in which job i ran on model ``assignment[i]`` for
    ``seconds`` (one number, or one per job: a job that finished early ran less)."""
    ran = np.broadcast_to(np.asarray(seconds, dtype=np.float64), assignment.shape)
    received = ledger.received.copy()
    rows = np.flatnonzero(assignment >= 0)
    received[rows, assignment[rows]] += ran[rows]
    return Ledger(
        ledger.job_ids, ledger.models, received, ledger.deficit, ledger.since, ledger.prior_s
    )


def reset_ledger(ledger: Ledger, x_before: FloatArray, now: float) -> Ledger:
    """Start the shares anew when the allocation is recomputed: each job's deficit grows by
    the time ``x_before`` promised it since the last reset minus what it received."""
    elapsed = max(now - ledger.since, 0.0)
    got = ledger.received - ledger.prior_s
    deficit = ledger.deficit + x_before * elapsed - got
    received = np.full_like(ledger.received, ledger.prior_s)
    return Ledger(ledger.job_ids, ledger.models, received, deficit, now, ledger.prior_s)
