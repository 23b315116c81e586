"""Metrics of a replay: per-job records and the summary that compares policies.

Definitions (docs/simulator.md has the long form):

- wait: first start - submit; JCT: end - submit, for jobs that succeeded.
- makespan: last end - first submit, over jobs that ended.
- utilization of a resource (CPU, or a device model): used / capacity, sampled after every
  step; the mean is weighted by the time to the next sample.
- Jain's index over users: for user u, x_u = the time-average of u's dominant share
  (max over CPU and each device model of u's allocation / capacity) over the time u had
  at least one job in the system; J = (sum x)^2 / (n * sum x^2), in [1/n, 1].
- finish-time fairness (after Themis): T_alone_j is job j's run time alone on 1/N_j of the
  cluster, N_j the users with jobs in the system when it arrived. A job whose dominant
  demand share d_j fits in 1/N_j runs at full speed there; a larger one is assumed to slow
  down in proportion: T_alone_j = duration_j * max(1, N_j d_j). Per user,
  rho_u = sum JCT_j / sum T_alone_j over u's succeeded jobs (so a 3-second job that waited
  an hour does not dominate); the worst (largest) rho_u is reported, with every user's.
  rho_u <= 1 means u did at least as well as on its own 1/N slice.
- stranded accelerators: the fraction of healthy accelerators that are free but whose node
  lacks the CPU or memory their typical job needs (cluster/stranding.py), sampled after
  every step; the mean is weighted by the time to the next sample.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsched.model.lifecycle import JobState
from hetsched.sim.engine import SimResult
from hetsched.sim.outcomes import Columns, JobOutcome, outcome_columns

__all__ = [
    "JOB_COLUMNS",
    "Summary",
    "finish_time_fairness",
    "jain_index",
    "job_rows",
    "percentiles",
    "stranded_mean",
    "summarize",
    "utilization",
]


@dataclass(frozen=True, slots=True)
class Summary:
    """The numbers a replay is judged by. Times in virtual seconds, fractions in 0..1."""

    jobs: int
    states: dict[str, int]
    wait: dict[str, float]
    jct: dict[str, float]
    wait_by_queue: dict[str, dict[str, float]]
    makespan_s: float
    utilization: dict[str, float]
    jain_users: float
    user_share: dict[str, float]
    #: finish-time fairness rho per user
    ftf: dict[str, float]
    #: time-weighted mean fraction of stranded accelerators
    stranded: float
    preemptions: int
    lost_work_s: float
    steps: int
    end_time_s: float
    #: Migrate actions, and task-seconds spent writing checkpoints
    migrations: int = 0
    checkpoint_s: float = 0.0

    @property
    def ftf_worst(self) -> float:
        return max(self.ftf.values(), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "states": self.states,
            "wait_s": self.wait,
            "jct_s": self.jct,
            "wait_s_by_queue": self.wait_by_queue,
            "makespan_s": self.makespan_s,
            "utilization": self.utilization,
            "fairness": {
                "jain_users": self.jain_users,
                "user_share": self.user_share,
                "ftf_worst": self.ftf_worst,
                "ftf_users": self.ftf,
            },
            "stranded_accelerators": self.stranded,
            "preemptions": self.preemptions,
            "lost_work_s": self.lost_work_s,
            "migrations": self.migrations,
            "checkpoint_s": self.checkpoint_s,
            "steps": self.steps,
            "end_time_s": self.end_time_s,
        }


def percentiles(values: Sequence[float] | np.ndarray[Any, Any]) -> dict[str, float]:
    """mean, p50, p99 and max (all 0.0 for no values, with count 0)."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        return {"count": 0, "mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    p50, p99 = np.percentile(data, [50, 99])
    return {
        "count": int(data.size),
        "mean": float(data.mean()),
        "p50": float(p50),
        "p99": float(p99),
        "max": float(data.max()),
    }


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2); 1.0 when all are equal or all zero."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        return 1.0
    square = float((data**2).sum())
    if square == 0.0:
        return 1.0
    return float(data.sum() ** 2 / (data.size * square))


def utilization(result: SimResult) -> dict[str, float]:
    """Time-weighted mean of used / capacity per resource over the sampled span."""
    times = np.asarray(result.series.time, dtype=np.float64)
    out: dict[str, float] = {}
    if times.size < 2:
        return {label: 0.0 for label in result.series.used}
    weights = np.diff(times)
    span = float(weights.sum())
    for label, used in result.series.used.items():
        cap = np.asarray(result.series.capacity[label], dtype=np.float64)[:-1]
        use = np.asarray(used, dtype=np.float64)[:-1]
        ratio = np.divide(use, cap, out=np.zeros_like(use), where=cap > 0)
        out[label] = float((ratio * weights).sum() / span) if span > 0 else 0.0
    return out


def stranded_mean(result: SimResult) -> float:
    """Time-weighted mean of the stranded-accelerator fraction over the sampled span."""
    times = np.asarray(result.series.time, dtype=np.float64)
    values = np.asarray(result.series.stranded, dtype=np.float64)
    if times.size < 2 or values.size != times.size:
        return 0.0
    weights = np.diff(times)
    span = float(weights.sum())
    return float((values[:-1] * weights).sum() / span) if span > 0 else 0.0


def finish_time_fairness(jobs: Sequence[JobOutcome]) -> dict[str, float]:
    """rho per user (see the module docstring), succeeded jobs only."""
    return _ftf(outcome_columns(jobs))


def _ftf(cols: Columns) -> dict[str, float]:
    done = np.flatnonzero(_succeeded(cols))
    jcts = (cols.end[done] - cols.submit[done]).tolist()
    slowdown = np.maximum(1.0, cols.contenders[done] * cols.demand_share[done])
    isolated = (cols.duration_s[done] * slowdown).tolist()
    shared: dict[str, float] = {}
    alone: dict[str, float] = {}
    # summed job by job in workload order, as a report always has been
    for code, jct, single in zip(cols.user[done].tolist(), jcts, isolated, strict=True):
        user = cols.users[code]
        shared[user] = shared.get(user, 0.0) + jct
        alone[user] = alone.get(user, 0.0) + single
    return {u: shared[u] / alone[u] for u in sorted(shared) if alone[u] > 0}


def _succeeded(cols: Columns) -> np.ndarray[Any, Any]:
    code = cols.states.index(JobState.SUCCEEDED)
    return np.asarray((cols.state == code) & ~np.isnan(cols.end))


def summarize(result: SimResult) -> Summary:
    cols = outcome_columns(result.jobs)
    counts = np.bincount(cols.state, minlength=len(cols.states))
    states = {cols.states[code]: int(n) for code, n in enumerate(counts.tolist()) if n}
    started = ~np.isnan(cols.first_start)
    waits = cols.first_start - cols.submit
    done = _succeeded(cols)
    by_queue: dict[str, np.ndarray[Any, Any]] = {}
    for code, queue in enumerate(cols.queues):
        mine = waits[started & (cols.queue == code)]
        if mine.size:
            by_queue[queue] = mine
    ended = ~np.isnan(cols.end)
    makespan = float(cols.end[ended].max() - cols.submit.min()) if ended.any() else 0.0
    shares = {
        user: (result.user_share_integral[user] / active if active > 0 else 0.0)
        for user, active in sorted(result.user_active_s.items())
    }
    return Summary(
        jobs=len(result.jobs),
        states=dict(sorted(states.items())),
        wait=percentiles(waits[started]),
        jct=percentiles((cols.end - cols.submit)[done]),
        wait_by_queue={q: percentiles(v) for q, v in sorted(by_queue.items())},
        makespan_s=makespan,
        utilization=utilization(result),
        jain_users=jain_index(list(shares.values())),
        user_share=shares,
        ftf=_ftf(cols),
        stranded=stranded_mean(result),
        preemptions=result.preemptions,
        lost_work_s=result.lost_work_s,
        steps=result.steps,
        end_time_s=result.end_time,
        migrations=result.migrations,
        checkpoint_s=result.checkpoint_s,
    )


#: columns of the per-job records (jobs.csv and ``-o json`` ``jobs``)
JOB_COLUMNS = (
    "id",
    "user",
    "queue",
    "priority",
    "tasks",
    "devices",
    "state",
    "submit",
    "start",
    "end",
    "wait_s",
    "jct_s",
    "duration_s",
    "preemptions",
    "restarts",
    "lost_work_s",
    "checkpoint_s",
    "migrations",
    "reason",
)


def job_rows(jobs: Sequence[JobOutcome]) -> Iterator[dict[str, Any]]:
    """Per-job records, in submission order, one at a time (a report streams them)."""
    return (
        {
            "id": j.job_id,
            "user": j.user,
            "queue": j.queue,
            "priority": j.priority,
            "tasks": j.tasks,
            "devices": j.devices,
            "state": j.state,
            "submit": j.submit,
            "start": j.first_start,
            "end": j.end,
            "wait_s": j.wait_s,
            "jct_s": j.jct_s,
            "duration_s": j.duration_s,
            "preemptions": j.preemptions,
            "restarts": j.restarts,
            "lost_work_s": j.lost_work_s,
            "checkpoint_s": j.checkpoint_s,
            "migrations": j.migrations,
            "reason": j.reason if j.state != "succeeded" else "",
        }
        for j in jobs
    )
