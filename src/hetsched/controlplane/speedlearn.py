"""Online speed learning: per-(job type, device model) throughput estimates from progress.

A task reports the steps its job has done (``hetsched progress --steps N``, or the
``PROGRESS`` file: controlplane/checkpointing.py). Per run of a job, the learner keeps the last
report; the next one gives a **rate**, ``(steps - last steps) / (time - last time)``, of the
whole job on the device model its tasks hold. The first report of a run only sets the
baseline: the interval from the start of the run to it holds the start-up (loading data,
compiling), not the job's speed. A rate is taken over at least ``min_interval_s``: reports
closer together wait for a later one, so bursts of reports do not weigh more than steady
ones. A report whose steps went down (the task restarted its counter) starts a new
baseline.

The estimate of a (job type, model) is an exponentially weighted mean of those rates,
``estimate = (1 - alpha) x estimate + alpha x rate`` (the first rate sets it), per device of
the job: a job of ``d`` devices (replicas x devices per task) that makes ``r`` steps/s counts
``r / d``, and a later job of the type is assumed to scale linearly with its device count,
as the profile's throughput table does. A rate is learned only for a job that names a
``job_type`` and whose reporting task holds devices of one model.

Later jobs of the type use the estimates as their rates (the ``speed`` score, upgrades,
normalized fair shares) when they give no ``speed`` map and the profile's table does not
list the type (the operator's table wins over measurements; a job's own map over both).
Without any estimate nothing changes: every model is equal, as before.

The learner owns no clock: every report carries its time. It is fed by the reconcile loop's
thread and read by the API's threads: updates replace the published snapshot at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from hetsched.model.speed import SpeedTable

__all__ = ["Estimate", "Measured", "SpeedLearner"]


@dataclass(frozen=True, slots=True)
class Estimate:
    """The learned rate of one device of ``model`` for jobs of ``job_type`` (steps/s)."""

    job_type: str
    model: str
    rate: float
    samples: int
    updated_at: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_type": self.job_type,
            "model": self.model,
            "steps_per_second": self.rate,
            "samples": self.samples,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True, slots=True)
class Measured:
    """What the learner saw of one run: its last report and the rate of its last interval."""

    model: str
    steps: int
    at: float
    #: steps/s of the whole job over the last interval (None: no interval measured yet)
    rate: float | None = None


class SpeedLearner:
    """Per-(job type, model) estimates from progress reports (see the module docstring)."""

    def __init__(
        self,
        base: SpeedTable | None = None,
        estimates: Iterable[Estimate] = (),
        alpha: float = 0.3,
        min_interval_s: float = 0.5,
    ) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha: expected 0 < alpha <= 1, got {alpha}")
        if not math.isfinite(min_interval_s) or min_interval_s < 0:
            raise ValueError(f"min_interval_s: expected a finite number >= 0, got {min_interval_s}")
        #: the profile's table (job types it lists are never overridden)
        self.base = base
        self.alpha = alpha
        self.min_interval_s = min_interval_s
        self._estimates: Mapping[tuple[str, str], Estimate] = MappingProxyType(
            {(e.job_type, e.model): e for e in estimates}
        )
        #: (job id, run) -> the run's baseline and last measured rate
        self._runs: dict[tuple[str, int], Measured] = {}
        self._table = self._build()

    # -- reading (any thread) -------------------------------------------------------------

    def estimates(self, job_type: str | None = None) -> list[Estimate]:
        """Every estimate (or those of one job type), by job type and model."""
        found = self._estimates.values()
        return sorted(
            (e for e in found if job_type is None or e.job_type == job_type),
            key=lambda e: (e.job_type, e.model),
        )

    def measured(self, job_id: str, run: int) -> Measured | None:
        return self._runs.get((job_id, run))

    def table(self) -> SpeedTable | None:
        """The table the core resolves job types in: the profile's, plus the learned rates
        of the types it does not list (None when both are empty)."""
        return self._table

    def source(self, job_type: str) -> str:
        """Where a job type's rates come from: ``profile``, ``learned`` or ``none``."""
        if self.base is not None and job_type in self.base.job_types():
            return "profile"
        return "learned" if any(k[0] == job_type for k in self._estimates) else "none"

    # -- learning (the loop's thread) -------------------------------------------------------

    def observe(
        self,
        job_id: str,
        run: int,
        job_type: str | None,
        model: str,
        devices: int,
        steps: int,
        at: float,
    ) -> Estimate | None:
        """A progress report of run ``run`` of ``job_id`` (whose tasks hold ``devices``
        devices of ``model``): the estimate it changed, or None."""
        key = (job_id, run)
        last = self._runs.get(key)
        if last is None or steps < last.steps or at < last.at or model != last.model:
            self._runs[key] = Measured(model, steps, at)
            return None
        elapsed = at - last.at
        if elapsed <= 0 or elapsed < self.min_interval_s:
            return None
        rate = (steps - last.steps) / elapsed
        self._runs[key] = Measured(model, steps, at, rate)
        if job_type is None:
            return None
        return self._learn(job_type, model, rate / max(devices, 1), at)

    def forget(self, job_id: str) -> None:
        """The job ended: drop what was kept of its runs."""
        for key in [k for k in self._runs if k[0] == job_id]:
            del self._runs[key]

    def _learn(self, job_type: str, model: str, rate: float, at: float) -> Estimate:
        old = self._estimates.get((job_type, model))
        if old is None:
            new = Estimate(job_type, model, rate, 1, at)
        else:
            mean = (1 - self.alpha) * old.rate + self.alpha * rate
            new = Estimate(job_type, model, mean, old.samples + 1, at)
        self._estimates = MappingProxyType({**self._estimates, (job_type, model): new})
        self._table = self._build()
        return new

    def _build(self) -> SpeedTable | None:
        listed = set(self.base.job_types()) if self.base is not None else set()
        learned: dict[str, dict[str, float]] = {}
        for (job_type, model), estimate in self._estimates.items():
            if job_type not in listed:
                learned.setdefault(job_type, {})[model] = estimate.rate
        extra = SpeedTable.of(learned)
        if self.base is None:
            return extra if len(extra) else None
        return self.base.merged(extra) if len(extra) else self.base
