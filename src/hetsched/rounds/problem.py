"""The input and output of a round's allocation: active jobs x device models.

Columnar, as the rest of the core: one row per active job, one column per device model.
``throughput[i, j]`` is the rate of the whole job ``i`` (all of its tasks) on model ``j``
(steps/s, or the relative unit of its speed map; :mod:`hetsched.model.speed` answers it), 0
where it cannot run. ``scale[i]`` is the devices it holds while it runs (devices per task x
tasks). The allocation ``X[i, j]`` is the fraction of the time until the next solve that
job ``i`` should run on model ``j``; every policy returns one that satisfies

- ``X >= 0``, ``X[i, j] = 0`` where the job cannot run (rate 0) or cannot fit (``scale[i] >
  capacity[j]``),
- per job, ``sum_j X[i, j] <= 1`` (a job runs on one model at a time),
- per model, ``sum_i scale[i] X[i, j] <= capacity[j]`` (no more devices than there are).

Pure: no clock, no solver state, nothing random unless a seed comes in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Allocation", "FloatArray", "IntArray", "RoundInput", "RoundInputError"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class RoundInputError(ValueError):
    """A round input whose arrays do not fit together or hold invalid values."""


def _floats(value: Any, shape: tuple[int, ...], name: str, default: float | None) -> FloatArray:
    if value is None:
        if default is None:
            raise RoundInputError(f"{name}: required")
        return np.full(shape, default, np.float64)
    array = np.asarray(value, dtype=np.float64)
    if array.shape != shape:
        raise RoundInputError(f"{name}: expected shape {shape}, got {array.shape}")
    if not np.isfinite(array).all():
        raise RoundInputError(f"{name}: values must be finite")
    return array


@dataclass(frozen=True, slots=True, eq=False)
class RoundInput:
    """Active jobs and devices for one solve; build it with :meth:`of`, which checks and
    fills the optional columns. Arrays are read-only.

    ``weight``: priority weight (Gavel's ``priority_weight``; 2 gets twice the share of 1).
    ``remaining``: work left (steps; finish-time fairness and makespan need it).
    ``elapsed``: seconds since the job arrived (finish-time fairness, FIFO order).
    ``isolated_time``: seconds the job would have needed for its progress so far on its
    isolated 1/n share of the cluster (finish-time fairness; drivers add
    ``steps done / isolated_rates()`` every round, as Themis and Gavel do).
    ``current``: the model each job runs on now, -1 for none (agnostic FIFO keeps it).
    ``reference``: the model the heterogeneity-agnostic twins assume every job runs at
    (Gavel's V100), by index.
    """

    job_ids: tuple[str, ...]
    models: tuple[str, ...]
    throughput: FloatArray
    scale: IntArray
    capacity: IntArray
    weight: FloatArray
    remaining: FloatArray
    elapsed: FloatArray
    isolated_time: FloatArray
    current: IntArray
    reference: int = 0

    @classmethod
    def of(
        cls,
        job_ids: Sequence[str],
        models: Sequence[str],
        throughput: Any,
        scale: Any,
        capacity: Any,
        *,
        weight: Any = None,
        remaining: Any = None,
        elapsed: Any = None,
        isolated_time: Any = None,
        current: Any = None,
        reference: int = 0,
    ) -> RoundInput:
        """Check the columns and fill the optional ones (weight 1, remaining 1, elapsed 0,
        isolated time 0, nothing running); raises RoundInputError naming the column."""
        ids, names = tuple(job_ids), tuple(models)
        n, m = len(ids), len(names)
        if len(set(ids)) != n:
            raise RoundInputError("job_ids: duplicate ids")
        if m == 0:
            raise RoundInputError("models: at least one device model")
        rates = _floats(throughput, (n, m), "throughput", None)
        if (rates < 0).any():
            raise RoundInputError("throughput: must be >= 0")
        sizes = np.asarray(scale, dtype=np.int64).reshape(-1)
        devices = np.asarray(capacity, dtype=np.int64).reshape(-1)
        if sizes.shape != (n,) or (sizes < 1).any():
            raise RoundInputError(f"scale: expected {n} values >= 1")
        if devices.shape != (m,) or (devices < 0).any():
            raise RoundInputError(f"capacity: expected {m} values >= 0")
        weights = _floats(weight, (n,), "weight", 1.0)
        if (weights <= 0).any():
            raise RoundInputError("weight: must be > 0")
        left = _floats(remaining, (n,), "remaining", 1.0)
        age = _floats(elapsed, (n,), "elapsed", 0.0)
        alone = _floats(isolated_time, (n,), "isolated_time", 0.0)
        if (left < 0).any() or (age < 0).any() or (alone < 0).any():
            raise RoundInputError("remaining, elapsed and isolated_time must be >= 0")
        now = np.full(n, -1, np.int64) if current is None else np.asarray(current, np.int64)
        if now.shape != (n,) or (now < -1).any() or (now >= m).any():
            raise RoundInputError(f"current: expected {n} model indices or -1")
        if not 0 <= reference < m:
            raise RoundInputError(f"reference: expected a model index 0..{m - 1}")
        arrays = [rates, sizes, devices, weights, left, age, alone, now]
        for array in arrays:
            array.setflags(write=False)
        return cls(ids, names, rates, sizes, devices, weights, left, age, alone, now, reference)

    @property
    def n(self) -> int:
        return len(self.job_ids)

    @property
    def m(self) -> int:
        return len(self.models)

    def runnable(self) -> npt.NDArray[np.bool_]:
        """Where a job can run at all: a positive rate and room for all of its devices."""
        return (self.throughput > 0) & (self.scale[:, None] <= self.capacity[None, :])

    def agnostic(self) -> RoundInput:
        """The same jobs as a heterogeneity-agnostic policy sees them: every model where a
        job can run runs it at its rate on the reference model (its fastest rate where it
        cannot run on the reference)."""
        ref = self.throughput[:, self.reference]
        fallback = np.where(ref > 0, ref, self.throughput.max(axis=1, initial=0.0))
        flat = np.where(self.throughput > 0, fallback[:, None], 0.0)
        flat.setflags(write=False)
        return dataclasses.replace(self, throughput=flat)

    def proportional_rates(self) -> FloatArray:
        """Each job's rate under an equal split of every model (Gavel's normalizer for
        max-min fairness): its rates weighted by the models' shares of all devices."""
        total = max(int(self.capacity.sum()), 1)
        return np.asarray(self.throughput @ (self.capacity / total), np.float64)

    def isolated_rates(self) -> FloatArray:
        """Each job's rate on its isolated share: 1/n of every model, divided among its
        devices and capped at running all of the time (finish-time fairness' baseline)."""
        n = max(self.n, 1)
        share = (self.capacity[None, :] / n) / self.scale[:, None]
        share = np.where(self.runnable(), share, 0.0)
        rows = share.sum(axis=1)
        share = share / np.maximum(rows, 1.0)[:, None]
        return np.asarray((self.throughput * share).sum(axis=1), np.float64)

    def best_rates(self) -> FloatArray:
        """Each job's fastest rate on a model it can run on (0 where it can run nowhere)."""
        return np.asarray(
            np.where(self.runnable(), self.throughput, 0.0).max(axis=1, initial=0.0), np.float64
        )


@dataclass(frozen=True, slots=True, eq=False)
class Allocation:
    """The result of a solve: ``X`` (jobs x models) and how it was found.

    ``objective``: the policy's own measure at the optimum (the max-min normalized rate,
    the minimal worst finish-time ratio, the makespan in seconds, ...). ``solves``: LPs
    solved. ``status``: ``optimal`` or a reason the policy fell back.
    """

    policy: str
    job_ids: tuple[str, ...]
    models: tuple[str, ...]
    x: FloatArray
    objective: float = 0.0
    solves: int = 0
    status: str = "optimal"

    def rates(self, throughput: FloatArray) -> FloatArray:
        """Each job's effective rate under this allocation: sum_j X[i, j] x rate[i, j]."""
        return np.asarray((self.x * throughput).sum(axis=1), np.float64)

    def by_job(self) -> dict[str, dict[str, float]]:
        """``{job: {model: fraction}}``, models with a positive fraction only."""
        out: dict[str, dict[str, float]] = {}
        for i, job in enumerate(self.job_ids):
            row = {self.models[j]: float(v) for j, v in enumerate(self.x[i]) if v > 1e-9}
            out[job] = row
        return out

    def check(self, problem: RoundInput, tol: float = 1e-6) -> list[str]:
        """Every way this allocation breaks the constraints of ``problem`` (empty: none)."""
        x = self.x
        out: list[str] = []
        if x.shape != (problem.n, problem.m):
            return [f"shape {x.shape}, expected {(problem.n, problem.m)}"]
        if (x < -tol).any():
            out.append("negative fractions")
        if (x[~problem.runnable()] > tol).any():
            out.append("time on a model a job cannot run on or fit in")
        over_job = np.flatnonzero(x.sum(axis=1) > 1 + tol)
        if over_job.size:
            out.append(f"{over_job.size} job(s) over 100% of the time")
        used = (problem.scale[:, None] * x).sum(axis=0)
        over = np.flatnonzero(used > problem.capacity + tol * max(problem.n, 1))
        out += [f"model {problem.models[j]}: {used[j]:.3f} of {problem.capacity[j]}" for j in over]
        return out
