"""Round-based allocation policies: ``X`` for the next round from the active jobs.

Every policy has a heterogeneity-agnostic twin (``agnostic-`` prefix) that solves the same
program on :meth:`RoundInput.agnostic` (every model runs a job at its reference-model rate),
as Gavel's baselines do. Each is a function ``(problem, options) -> Allocation``:

``las``
    Max-min fairness over normalized effective throughput (Gavel's LAS): maximize the
    smallest ``sum_j rate[i, j] X[i, j] x scale[i] / (weight[i] x proportional[i])``, where
    ``proportional`` is the job's rate under an equal split of every model. Multiplying by
    ``scale`` makes the fairness one of device time (a 1-GPU job gets 4x the time of a
    4-GPU job at equal rates).
``ftf``
    Finish-time fairness (Themis, as Gavel formulates it): minimize the largest
    ``rho = (elapsed + remaining / rate(X)) / (isolated_time + remaining / isolated_rate)``.
    Not linear in ``X``, but every level ``rho <= c`` is an LP (maximize ``s`` with every
    job at ``s`` x the rate it needs for ``c``; feasible iff ``s >= 1``), so ``c`` is found
    by a safeguarded secant search; each solution also bounds the optimum from above (at
    ``c / s``), so a few LPs reach the requested precision.
``max-throughput``
    Maximize the cluster's effective throughput in best-device equivalents:
    ``sum_ij scale[i] X[i, j] rate[i, j] / best[i]`` (1 per device running a job at its
    fastest rate). Gavel sums raw steps/s, which lets job types with small steps dominate;
    this is the unit-free version.
``min-makespan``
    Minimize the time until every active job finishes: maximize ``s`` with
    ``rate_i(X) >= remaining_i x s`` (``s`` = 1 / makespan), one LP.
``fifo``
    Jobs in arrival order each take a whole model while devices last, stopping at the first
    that fits nowhere; the aware one picks the fastest model with room, the agnostic one a
    random one (seeded) and keeps a running job where it is.
``fair-throughput``
    The knob: ``alpha`` = 0 is ``las``, 1 is ``max-throughput``; in between, the
    throughput objective under the floor ``(1 - alpha) x`` the max-min level.
``fair-srtf``
    Beyond Gavel: every job keeps ``(1 - alpha) x`` the max-min level (its LAS share), and
    what is left goes to the jobs closest to the end first: the second LP maximizes
    effective throughput weighted by ``1 / (remaining / best rate)``, the time each job
    still needs on its fastest model (shortest remaining time first, heterogeneity-aware).
    It needs ``remaining`` (the jobs' declared work, as ``ftf`` and ``min-makespan`` do).
``fair-catchup``
    Beyond Gavel: every job keeps its whole LAS share (the max-min level is a floor; the
    knob ``catchup_floor`` < 1 keeps only that fraction of it), and
    the second LP spends what LAS leaves on effective throughput weighted by each job's
    **need**: its finish-time fairness so far, ``rho = (elapsed + s) / (isolated_time +
    s)`` (``s`` = 360 s), clipped to 1/4..4 and squared. A job behind the pace of its
    isolated 1/n share (rho > 1) gets the devices LAS does not need first, one ahead of it
    last; so the throughput a second stage gains (each job where it is relatively fast)
    goes where it evens out finish-time fairness instead of to whichever jobs a vertex
    happens to favour. It reads only ``elapsed`` and ``isolated_time`` (no declared work),
    and is meant to be solved whenever the active jobs change (:func:`solves_on_change`):
    its weights follow the jobs' progress.

After the policy's own optimum is found, a second LP spends what is left: it maximizes the
effective throughput while keeping every job at least at its optimal level (max-min
floor, finish-time bound, makespan rate). A single LP would leave devices idle whenever
more time does not improve the worst job; HiGHS returns a vertex, not a spread-out interior
point, so this step is needed, and it is what makes the allocation work-conserving.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from hetsched.rounds.fifo import fifo_allocation
from hetsched.rounds.lp import LinearProgram
from hetsched.rounds.problem import Allocation, FloatArray, RoundInput

__all__ = ["POLICIES", "PolicyOptions", "catchup_need", "policy_names", "solve", "solves_on_change"]

#: floors of the second stage are the first stage's optimum minus this fraction, so the
#: second LP stays feasible under HiGHS' tolerances
_SLACK = 1e-6


@dataclass(frozen=True, slots=True)
class PolicyOptions:
    """``alpha``: the fairness-throughput knob (0 max-min fairness .. 1 throughput).
    ``rtol``: relative precision of the finish-time bisection. ``seed``: the agnostic
    FIFO's random model choice (vary it per round). ``central``: solve ``las``,
    ``max-throughput`` and ``fair-throughput`` as Gavel does, one program for the policy's
    own objective solved to an interior point of its optimal set (no second stage, see the
    module); the default finds an optimal vertex and then spends what is left on
    effective throughput. ``catchup_floor``: ``fair-catchup``'s knob, the fraction of the
    max-min level every job keeps (1: its whole ``las`` share; 0: the need-weighted
    throughput stage alone)."""

    alpha: float = 0.5
    rtol: float = 0.01
    seed: int = 0
    central: bool = False
    catchup_floor: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in 0..1, got {self.alpha}")
        if not 0.0 <= self.catchup_floor <= 1.0:
            raise ValueError(f"catchup_floor must be in 0..1, got {self.catchup_floor}")
        if not 0.0 < self.rtol < 1.0:
            raise ValueError(f"rtol must be in (0, 1), got {self.rtol}")


def _best(problem: RoundInput) -> FloatArray:
    return problem.best_rates()


def _by_best(problem: RoundInput) -> FloatArray:
    """Rates as fractions of each job's fastest rate (0 where it cannot run)."""
    best = _best(problem)
    runnable = problem.runnable()
    ratio = problem.throughput / np.where(best > 0, best, 1.0)[:, None]
    return np.asarray(np.where(runnable, ratio, 0.0), np.float64)


def _efficiency(problem: RoundInput) -> FloatArray:
    """Best-device equivalents per unit of X: scale x rate / fastest rate."""
    return np.asarray(problem.scale[:, None] * _by_best(problem), np.float64)


def _fill(
    problem: RoundInput,
    jobs: np.ndarray,
    coef: FloatArray,
    floor: FloatArray,
    counts: FloatArray | None = None,
    central: bool = False,
) -> tuple[FloatArray, int]:
    """Maximize effective throughput with ``coef . X[i] >= floor[i]`` for ``jobs``
    (``counts``: rows that stand for several identical jobs, see :func:`_classes`)."""
    lp = LinearProgram(problem, counts=counts)
    gain = _efficiency(problem)
    if counts is not None:
        gain = gain * counts[:, None]
    lp.objective[: lp.size] = gain.reshape(-1)
    lp.at_least(jobs, coef, floor)
    return lp.solve(central).x, 1


def _classes(
    problem: RoundInput, coef: FloatArray
) -> tuple[RoundInput, FloatArray, np.ndarray, FloatArray]:
    """Identical jobs (same rates, devices and policy coefficients) as one row each: the
    reduced problem (one representative per class), its coefficients, each job's class
    and each class's size.

    The programs solved here are symmetric in identical jobs, so averaging an optimum
    over them is an optimum too: solving one row per class and giving every job of a
    class that row is exact, and gives identical jobs identical shares (as Gavel's
    interior-point solver does; a vertex gives one job all and its twin nothing). Gavel's
    workload has at most 83 (job type, GPUs) classes, so hundreds of active jobs solve
    as at most 83 rows.
    """
    key = np.concatenate(
        [coef, problem.throughput, problem.scale[:, None].astype(np.float64)], axis=1
    )
    _, first, inverse, counts = np.unique(
        key, axis=0, return_index=True, return_inverse=True, return_counts=True
    )
    reduced = RoundInput.of(
        [problem.job_ids[i] for i in first],
        problem.models,
        problem.throughput[first],
        problem.scale[first],
        problem.capacity,
        weight=problem.weight[first],
        remaining=problem.remaining[first],
        elapsed=problem.elapsed[first],
        isolated_time=problem.isolated_time[first],
        current=problem.current[first],
        reference=problem.reference,
    )
    return reduced, np.asarray(coef[first]), inverse.reshape(-1), counts.astype(np.float64)


def _empty(name: str, problem: RoundInput, objective: float = 0.0) -> Allocation:
    x = np.zeros((problem.n, problem.m))
    return Allocation(name, problem.job_ids, problem.models, x, objective, 0, "nothing to run")


def _las_coef(problem: RoundInput) -> FloatArray:
    prop = problem.proportional_rates()
    norm = problem.scale / (problem.weight * np.where(prop > 0, prop, 1.0))
    return np.asarray(np.where(problem.runnable(), problem.throughput * norm[:, None], 0.0))


def _fair_throughput(
    name: str, problem: RoundInput, alpha: float, central: bool = False
) -> Allocation:
    if not problem.runnable().any():
        return _empty(name, problem)
    reduced, coef, inverse, counts = _classes(problem, _las_coef(problem))
    jobs = np.flatnonzero(reduced.runnable().any(axis=1))
    level, solves = 0.0, 0
    if alpha < 1.0:
        lp = LinearProgram(reduced, extras=1, counts=counts)
        lp.objective[lp.size] = 1.0
        lp.at_least(jobs, coef, extra=0)
        solution = lp.solve(central)
        level = float(solution.extras[0])
        solves += 1
        if central and alpha == 0.0:  # Gavel's LAS: the max-min program alone
            x = solution.x[inverse]
            return Allocation(name, problem.job_ids, problem.models, x, level, solves)
    floor = np.full(reduced.n, max(level * (1.0 - alpha) * (1.0 - _SLACK), 0.0))
    x, more = _fill(reduced, jobs, coef, floor, counts, central)
    return Allocation(name, problem.job_ids, problem.models, x[inverse], level, solves + more)


def fair_srtf(problem: RoundInput, options: PolicyOptions) -> Allocation:
    jobs = np.flatnonzero(problem.runnable().any(axis=1))
    if jobs.size == 0:
        return _empty("fair-srtf", problem)
    coef = _las_coef(problem)
    lp = LinearProgram(problem, extras=1)
    lp.objective[lp.size] = 1.0
    lp.at_least(jobs, coef, extra=0)
    level = float(lp.solve().extras[0])
    best = _best(problem)
    left = problem.remaining / np.where(best > 0, best, 1.0)  # seconds on its best model
    urgency = 1.0 / np.maximum(left, 1.0)
    urgency = urgency / max(float(urgency[jobs].max()), 1e-300)
    fill = LinearProgram(problem)
    fill.objective[: fill.size] = (_efficiency(problem) * urgency[:, None]).reshape(-1)
    floor = np.full(problem.n, max(level * (1.0 - options.alpha) * (1.0 - _SLACK), 0.0))
    fill.at_least(jobs, coef, floor)
    x = fill.solve().x
    return Allocation("fair-srtf", problem.job_ids, problem.models, x, level, 2)


#: fair-catchup's need: ``clip(rho, 1/_CATCHUP_CAP, _CATCHUP_CAP) ** _CATCHUP_POWER``
_CATCHUP_POWER = 2.0
_CATCHUP_CAP = 4.0
#: seconds added to both sides of rho: a job's first minutes (the wait for a round
#: boundary, its first round) do not swing its need, while a job that waits round after
#: round without progress becomes needy within a few rounds
_CATCHUP_SETTLE_S = 360.0


def catchup_need(problem: RoundInput) -> FloatArray:
    """``fair-catchup``'s weight per job: its finish-time fairness so far (elapsed time over
    the time its progress would have taken on its isolated share), clipped and squared."""
    rho = (problem.elapsed + _CATCHUP_SETTLE_S) / (problem.isolated_time + _CATCHUP_SETTLE_S)
    clipped = np.clip(rho, 1.0 / _CATCHUP_CAP, _CATCHUP_CAP)
    return np.asarray(clipped**_CATCHUP_POWER, np.float64)


def fair_catchup(problem: RoundInput, options: PolicyOptions) -> Allocation:
    if not problem.runnable().any():
        return _empty("fair-catchup", problem)
    # the max-min level (identical jobs as one row: the level is the same, see _classes)
    reduced, coef, _, counts = _classes(problem, _las_coef(problem))
    lp = LinearProgram(reduced, extras=1, counts=counts)
    lp.objective[lp.size] = 1.0
    lp.at_least(np.flatnonzero(reduced.runnable().any(axis=1)), coef, extra=0)
    level = float(lp.solve().extras[0])
    # what is left, by need: every job its own row (needs differ)
    jobs = np.flatnonzero(problem.runnable().any(axis=1))
    fill = LinearProgram(problem)
    gain = _efficiency(problem) * catchup_need(problem)[:, None]
    fill.objective[: fill.size] = gain.reshape(-1)
    floor = np.full(problem.n, max(level * options.catchup_floor * (1.0 - _SLACK), 0.0))
    fill.at_least(jobs, _las_coef(problem), floor)
    x = fill.solve().x
    return Allocation("fair-catchup", problem.job_ids, problem.models, x, level, 2)


def las(problem: RoundInput, options: PolicyOptions) -> Allocation:
    return _fair_throughput("las", problem, 0.0, options.central)


def fair_throughput(problem: RoundInput, options: PolicyOptions) -> Allocation:
    return _fair_throughput("fair-throughput", problem, options.alpha, options.central)


def max_throughput(problem: RoundInput, options: PolicyOptions) -> Allocation:
    return _fair_throughput("max-throughput", problem, 1.0, options.central)


def min_makespan(problem: RoundInput, options: PolicyOptions) -> Allocation:
    best = _best(problem)
    jobs = np.flatnonzero((best > 0) & (problem.remaining > 0))
    if jobs.size == 0:
        return _empty("min-makespan", problem)
    alone = np.where(best > 0, problem.remaining / np.where(best > 0, best, 1.0), 0.0)
    horizon = float(alone[jobs].max())  # the longest job alone on its best model
    coef = _by_best(problem)
    lp = LinearProgram(problem, extras=1)
    lp.objective[lp.size] = 1.0
    lp.at_least(jobs, coef, extra=0, extra_coef=alone / horizon)
    rate = float(lp.solve().extras[0])  # horizon / makespan
    x, more = _fill(problem, jobs, coef, alone / horizon * rate * (1.0 - _SLACK))
    makespan = horizon / rate if rate > 0 else float("inf")
    return Allocation("min-makespan", problem.job_ids, problem.models, x, makespan, 1 + more)


def _worst_ratio(problem: RoundInput, x: FloatArray, jobs: np.ndarray, base: FloatArray) -> float:
    rates = (x * problem.throughput).sum(axis=1)[jobs]
    if (rates <= 0).any():
        return float("inf")
    finish = problem.elapsed[jobs] + problem.remaining[jobs] / rates
    return float((finish / base[jobs]).max())


def _next_level(
    low: float, reach_low: float, probe: float, reach_probe: float | None, high: float, rtol: float
) -> float:
    """The next level to try: where the line through the last infeasible and feasible
    (level, reach) points crosses reach 1, kept at least ``rtol`` inside the bracket; just
    below ``high`` when no feasible reach is known (one LP then often proves ``high``
    optimal within ``rtol``)."""
    top = high / (1.0 + rtol)
    if reach_probe is None or reach_probe <= reach_low or probe <= low:
        return max(top, low)
    guess = low + (1.0 - reach_low) * (probe - low) / (reach_probe - reach_low)
    bottom = low * (1.0 + rtol)
    return float(min(max(guess, bottom), top)) if bottom < top else float(np.sqrt(low * high))


def ftf(problem: RoundInput, options: PolicyOptions) -> Allocation:
    best = _best(problem)
    iso = problem.isolated_rates()
    jobs = np.flatnonzero((best > 0) & (iso > 0) & (problem.remaining > 0))
    if jobs.size == 0:
        return _empty("ftf", problem)
    base = problem.isolated_time + problem.remaining / np.where(iso > 0, iso, 1.0)
    safe_best = np.where(best > 0, best, 1.0)
    coef = _by_best(problem)

    def need(level: float) -> FloatArray:
        # the fraction of its best rate job i needs for rho_i <= level
        room = np.maximum(level * base - problem.elapsed, 1e-12)
        return np.asarray(problem.remaining / (safe_best * room), np.float64)

    # no job can beat running alone on its best model: the optimum is at least `low`
    # (over the kept jobs only: a finished job's base can be 0)
    alone = problem.elapsed[jobs] + problem.remaining[jobs] / safe_best[jobs]
    low = float((alone / base[jobs]).max())
    reach_low, high, x_high = 0.0, float("inf"), None
    probe, reach_probe = low, None
    level, solves = low, 0
    while solves < 40:
        lp = LinearProgram(problem, extras=1)
        lp.objective[lp.size] = 1.0
        lp.at_least(jobs, coef, extra=0, extra_coef=need(level))
        solution = lp.solve()
        solves += 1
        reach = float(solution.extras[0])  # rho <= level is feasible iff reach >= 1
        worst = _worst_ratio(problem, solution.x, jobs, base)
        if reach >= 1.0 - _SLACK:
            worst = min(worst, level)
            probe, reach_probe = level, reach
        else:
            low, reach_low = level, reach
            if reach > 0:
                worst = min(worst, level / reach)  # rates scaled by 1/reach meet `level`
        if worst < high:
            high, x_high = worst, solution.x
        if high <= low * (1.0 + options.rtol):
            break
        level = _next_level(low, reach_low, probe, reach_probe, high, options.rtol)
    assert x_high is not None
    x, more = _fill(problem, jobs, coef, need(high) * (1.0 - _SLACK))
    return Allocation("ftf", problem.job_ids, problem.models, x, high, solves + more)


def fifo(problem: RoundInput, options: PolicyOptions) -> Allocation:
    return fifo_allocation("fifo", problem, aware=True, seed=options.seed)


def _agnostic(
    policy: Callable[[RoundInput, PolicyOptions], Allocation],
) -> Callable[[RoundInput, PolicyOptions], Allocation]:
    def solve_agnostic(problem: RoundInput, options: PolicyOptions) -> Allocation:
        result = policy(problem.agnostic(), options)
        return Allocation(
            f"agnostic-{result.policy}",
            result.job_ids,
            result.models,
            result.x,
            result.objective,
            result.solves,
            result.status,
        )

    return solve_agnostic


def _agnostic_fifo(problem: RoundInput, options: PolicyOptions) -> Allocation:
    return fifo_allocation("agnostic-fifo", problem, aware=False, seed=options.seed)


_AWARE: dict[str, Callable[[RoundInput, PolicyOptions], Allocation]] = {
    "las": las,
    "ftf": ftf,
    "max-throughput": max_throughput,
    "min-makespan": min_makespan,
    "fifo": fifo,
    "fair-throughput": fair_throughput,
    "fair-srtf": fair_srtf,
    "fair-catchup": fair_catchup,
}

#: policy name -> ``(problem, options) -> Allocation``
POLICIES: Mapping[str, Callable[[RoundInput, PolicyOptions], Allocation]] = {
    **_AWARE,
    **{f"agnostic-{name}": _agnostic(p) for name, p in _AWARE.items() if name != "fifo"},
    "agnostic-fifo": _agnostic_fifo,
}


def policy_names() -> list[str]:
    return list(POLICIES)


#: policies whose allocation follows the jobs' progress, so a driver should solve anew
#: whenever the active jobs change rather than keep a stale allocation (Gavel's rule)
_ON_CHANGE = frozenset({"fair-catchup", "agnostic-fair-catchup"})


def solves_on_change(name: str) -> bool:
    """Whether policy ``name`` is meant to be solved at every arrival and completion (a
    driver's default when not told otherwise)."""
    return name in _ON_CHANGE


def solve(name: str, problem: RoundInput, options: PolicyOptions | None = None) -> Allocation:
    """The allocation of policy ``name`` for ``problem``; KeyError names the policies."""
    try:
        policy = POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown round policy {name!r} (known: {', '.join(POLICIES)})") from None
    return policy(problem, options or PolicyOptions())
