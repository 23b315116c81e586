"""The linear programs behind the round policies, solved with HiGHS (scipy.optimize.linprog).

Variables are the allocation ``X`` flattened row by row (``x[i * m + j]``), then any extra
scalars a policy needs (the max-min level, the makespan rate, ...). Every program carries
the base constraints of :mod:`hetsched.rounds.problem`: per-model capacity, per-job time,
and ``X[i, j] = 0`` where the job cannot run or fit. The matrices are sparse and built with
numpy in one pass: a 1,000-job, 3-model program has 3,000 variables and about 2,000 rows.

Rows that bound a job's rate are scaled by the job's fastest rate, so coefficients are
fractions of "running on its best model all the time" whatever the unit of the rates.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hetsched.rounds.problem import FloatArray, RoundInput

if TYPE_CHECKING:
    import scipy.sparse

__all__ = ["LinearProgram", "Solution", "SolveError"]

# scipy is imported where a program is built, not with this module: every CLI command
# imports the round policies' names, and scipy.optimize alone costs about half a second


class SolveError(RuntimeError):
    """HiGHS found no solution (a program built here is always feasible, so this means a
    numerical failure); the message has HiGHS' status."""


@dataclass(frozen=True, slots=True)
class Solution:
    x: FloatArray
    extras: FloatArray
    objective: float


class LinearProgram:
    """max ``objective . v`` over ``v = [X, extras]`` subject to the base constraints plus
    rows added with :meth:`at_least`. ``counts[i]``: how many identical jobs row i stands
    for (its devices count that many times against capacity; default 1)."""

    def __init__(
        self, problem: RoundInput, extras: int = 0, counts: FloatArray | None = None
    ) -> None:
        self.problem = problem
        n, m = problem.n, problem.m
        self.size = n * m
        self.extras = extras
        self.objective = np.zeros(self.size + extras)
        self._rows: list[scipy.sparse.coo_matrix] = []
        self._rhs: list[FloatArray] = []
        cols = np.arange(self.size)
        # capacity: sum_i scale_i X[i, j] <= capacity_j; a row that stands for ``counts[i]``
        # identical jobs (one class, see policies) holds their devices together
        held = problem.scale.astype(np.float64)
        if counts is not None:
            held = held * np.asarray(counts, np.float64)
        self._add(cols % m, cols, np.repeat(held, m), problem.capacity)
        # time: sum_j X[i, j] <= 1
        self._add(cols // m, cols, np.ones(self.size), np.ones(n))
        upper = problem.runnable().reshape(-1).astype(np.float64)
        self.bounds = np.zeros((self.size + extras, 2))
        self.bounds[: self.size, 1] = upper
        self.bounds[self.size :, 1] = np.inf

    def _add(self, rows: np.ndarray, cols: np.ndarray, values: np.ndarray, rhs: np.ndarray) -> None:
        shape = (len(rhs), self.size + self.extras)
        import scipy.sparse

        self._rows.append(scipy.sparse.coo_matrix((values, (rows, cols)), shape=shape))
        self._rhs.append(np.asarray(rhs, dtype=np.float64))

    def at_least(
        self,
        jobs: np.ndarray,
        coef: FloatArray,
        floor: FloatArray | None = None,
        extra: int | None = None,
        extra_coef: FloatArray | None = None,
    ) -> None:
        """For every job i in ``jobs`` (indices):
        ``sum_j coef[i, j] X[i, j] >= floor[i] + extra_coef[i] * v``, where ``v`` is extra
        scalar ``extra`` (left out when None). Arrays are indexed by job, not by row."""
        problem = self.problem
        m = problem.m
        k = len(jobs)
        if k == 0:
            return
        block = -np.asarray(coef, dtype=np.float64)[jobs]
        rows = np.repeat(np.arange(k), m)
        cols = (np.asarray(jobs)[:, None] * m + np.arange(m)[None, :]).reshape(-1)
        values = block.reshape(-1)
        keep = values != 0
        rows, cols, values = rows[keep], cols[keep], values[keep]
        if extra is not None:
            scale = np.ones(k) if extra_coef is None else np.asarray(extra_coef, np.float64)[jobs]
            rows = np.concatenate([rows, np.arange(k)])
            cols = np.concatenate([cols, np.full(k, self.size + extra)])
            values = np.concatenate([values, scale])
        rhs = np.zeros(k) if floor is None else -np.asarray(floor, dtype=np.float64)[jobs]
        self._add(rows, cols, values, rhs)

    def solve(self, central: bool = False) -> Solution:
        """An optimal vertex (HiGHS' dual simplex); with ``central``, an interior point of
        the optimal set instead (HiGHS' interior-point method without crossover), as an
        interior-point solver such as Gavel's ECOS returns: among equally good
        allocations, one that spreads time over every (job, model) pair it can."""
        import scipy.optimize
        import scipy.sparse

        a_ub = scipy.sparse.vstack(self._rows, format="csr")
        b_ub = np.concatenate(self._rhs)
        result = None
        if central:
            with warnings.catch_warnings():
                # scipy passes HiGHS options it does not know on verbatim, with a warning
                warnings.simplefilter("ignore", scipy.optimize.OptimizeWarning)
                result = scipy.optimize.linprog(
                    -self.objective,
                    A_ub=a_ub,
                    b_ub=b_ub,
                    bounds=self.bounds,
                    method="highs-ipm",
                    options={"run_crossover": "off"},
                )
        if result is None or result.status != 0 or result.x is None:
            # the interior-point method may stop short on a degenerate program: the
            # simplex answer is optimal too
            result = scipy.optimize.linprog(
                -self.objective, A_ub=a_ub, b_ub=b_ub, bounds=self.bounds, method="highs"
            )
        if result.status != 0 or result.x is None:
            raise SolveError(f"HiGHS: {result.message} (status {result.status})")
        values = np.asarray(result.x, dtype=np.float64)
        x = np.clip(values[: self.size], 0.0, 1.0).reshape(self.problem.n, self.problem.m)
        return Solution(x, values[self.size :], float(-result.fun))
