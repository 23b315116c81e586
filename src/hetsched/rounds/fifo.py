"""FIFO as a round policy: whole models for the oldest jobs, no LP.

Jobs go in arrival order (largest ``elapsed`` first, ties by input order). Each takes one
model for all of the time (``X[i, j] = 1``) while that model has room for its devices; the
first job that fits on no model stops the walk, so no job passes an older one (strict FIFO,
as Gavel's). The heterogeneity-aware FIFO picks the fastest model with room for each job
and reconsiders every round (a job moves to a faster model once one frees up); the
agnostic one keeps a running job where it is (``current``) and puts a new one on a model
drawn at random among those with room, seeded by ``seed``.
"""

from __future__ import annotations

import numpy as np

from hetsched.rounds.problem import Allocation, RoundInput

__all__ = ["fifo_allocation"]


def fifo_allocation(name: str, problem: RoundInput, aware: bool, seed: int = 0) -> Allocation:
    """The FIFO allocation of ``problem`` (see the module docstring)."""
    n, m = problem.n, problem.m
    x = np.zeros((n, m))
    free = problem.capacity.astype(np.int64).copy()
    runnable = problem.runnable()
    order = sorted(range(n), key=lambda i: (-problem.elapsed[i], i))
    queue = order
    if not aware:
        # running jobs keep their model first, oldest first
        keep = [i for i in order if problem.current[i] >= 0]
        for i in keep:
            j = int(problem.current[i])
            if runnable[i, j] and problem.scale[i] <= free[j]:
                x[i, j] = 1.0
                free[j] -= problem.scale[i]
        queue = [i for i in order if x[i].sum() == 0]
    rng = np.random.default_rng(seed)
    for i in queue:
        room = np.flatnonzero(runnable[i] & (problem.scale[i] <= free))
        if room.size == 0:
            if runnable[i].any():
                break  # strict FIFO: nobody passes a job that could run but does not fit
            continue  # a job that can run nowhere holds nobody up
        fastest = room[np.argmax(problem.throughput[i, room])]
        j = int(fastest) if aware else int(rng.choice(room))
        x[i, j] = 1.0
        free[j] -= problem.scale[i]
    return Allocation(name, problem.job_ids, problem.models, x, 0.0, 0)
