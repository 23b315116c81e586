"""What a run of the engine's round mode takes and gives: each job (its rates per model,
devices and work), the run's configuration, and each job's outcome with the measures over
the window (mean JCT, utilization, effective throughput, Jain's index, finish-time
fairness)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hetsched.rounds import policy_names, solves_on_change
from hetsched.sim.engine.packing import PairRates

__all__ = ["RoundConfig", "RoundJob", "RoundOutcome", "RoundResult"]


@dataclass(frozen=True, slots=True)
class RoundJob:
    """One job: its whole-job rate on each model (in the simulator's model order, 0 where
    it cannot run), the devices it holds while it runs, its work (in units of the rates x
    seconds), its priority weight and user."""

    id: str
    arrival: float
    rates: tuple[float, ...]
    scale: int
    work: float
    weight: float = 1.0
    user: str = ""
    #: (job type, GPUs): what the pair table of ``RoundConfig.pairs`` knows it as
    kind: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class RoundConfig:
    """``policy``: a round policy (``hetsched.rounds.policy_names()``). ``window``: job
    indices ``[start, end)`` in arrival order to measure (None: every job). ``until``:
    stop at this virtual time even if measured jobs are left. ``reset_s``: the least time
    between two solves (Gavel's 1,920 s); ``solve_on_change`` solves whenever the active
    set changed instead (the shares are still reset only every ``reset_s``); None: the
    policy's own default (``rounds.solves_on_change``: on change for ``fair-catchup``,
    Gavel's rule for the others). ``pairs``:
    pack waiting jobs onto running ones with these co-located rates
    (:mod:`hetsched.sim.engine.packing`); None runs one job per device. ``central``: the
    policies' allocations as Gavel's interior-point solver finds them
    (``PolicyOptions.central``). ``catchup_floor``: ``fair-catchup``'s knob, the fraction
    of the max-min level every job keeps (``PolicyOptions.catchup_floor``)."""

    policy: str = "las"
    round_s: float = 360.0
    reset_s: float = 1920.0
    alpha: float = 0.5
    seed: int = 0
    window: tuple[int, int] | None = None
    until: float | None = None
    solve_on_change: bool | None = None
    pairs: PairRates | None = None
    central: bool = False
    catchup_floor: float = 1.0

    def __post_init__(self) -> None:
        problems = []
        if self.policy not in policy_names():
            problems.append(f"policy: unknown {self.policy!r} (known: {', '.join(policy_names())})")
        if not self.round_s > 0 or math.isinf(self.round_s):
            problems.append(f"round_s: must be > 0, got {self.round_s}")
        if self.reset_s < 0:
            problems.append(f"reset_s: must be >= 0, got {self.reset_s}")
        if not 0.0 <= self.alpha <= 1.0:
            problems.append(f"alpha: must be in 0..1, got {self.alpha}")
        if not 0.0 <= self.catchup_floor <= 1.0:
            problems.append(f"catchup_floor: must be in 0..1, got {self.catchup_floor}")
        if self.window is not None and not 0 <= self.window[0] < self.window[1]:
            problems.append(f"window: expected 0 <= start < end, got {self.window}")
        if problems:
            raise ValueError("; ".join(problems))

    def on_change(self) -> bool:
        """Whether to solve at every change of the active jobs (``solve_on_change``, or the
        policy's default when it is None)."""
        if self.solve_on_change is None:
            return solves_on_change(self.policy)
        return self.solve_on_change


@dataclass(slots=True)
class RoundOutcome:
    """What happened to one job (times in virtual seconds; ``end`` None: not finished)."""

    job_id: str
    user: str
    arrival: float
    work: float
    isolated_s: float
    end: float | None = None
    preemptions: int = 0
    migrations: int = 0
    rounds: int = 0

    @property
    def jct_s(self) -> float | None:
        return None if self.end is None else self.end - self.arrival

    @property
    def ftf(self) -> float | None:
        """Finish-time fairness: completion time / isolated completion time."""
        jct = self.jct_s
        return None if jct is None or self.isolated_s <= 0 else jct / self.isolated_s


@dataclass(frozen=True, slots=True)
class RoundResult:
    policy: str
    models: tuple[str, ...]
    capacity: tuple[int, ...]
    #: every job that arrived, and the ones measured (the window's)
    jobs: tuple[RoundOutcome, ...]
    measured: tuple[RoundOutcome, ...]
    end_time: float
    rounds: int
    solves: int
    lps: int
    solve_wall_s: float
    #: busy device-seconds per model inside the measured span, and that span
    busy: tuple[float, ...]
    span: tuple[float, float]
    preemptions: int
    migrations: int
    complete: bool
    #: device-seconds inside the span weighted by each job's rate there / its best rate
    effective: float = 0.0

    def finished(self) -> list[RoundOutcome]:
        return [o for o in self.measured if o.end is not None]

    def mean_jct_h(self) -> float | None:
        done = [o.jct_s for o in self.finished() if o.jct_s is not None]
        return None if not done else float(np.mean(done)) / 3600.0

    def utilization(self) -> float:
        length = self.span[1] - self.span[0]
        total = sum(self.capacity) * length
        return 0.0 if total <= 0 else sum(self.busy) / total

    def effective_throughput(self) -> float:
        """Devices' worth of work at each job's fastest rate, on average over the span
        (the measure ``max-throughput`` maximizes): 108 busy V100-equivalents at most on
        36:36:36."""
        length = self.span[1] - self.span[0]
        return 0.0 if length <= 0 else self.effective / length

    def utilization_by_model(self) -> dict[str, float]:
        length = self.span[1] - self.span[0]
        return {
            m: (b / (c * length) if c and length > 0 else 0.0)
            for m, c, b in zip(self.models, self.capacity, self.busy, strict=True)
        }

    def jain(self) -> float | None:
        """Jain's index over users of each user's mean isolated / actual completion time
        (1: every user got the same fraction of its fair share)."""
        per_user: dict[str, list[float]] = {}
        for o in self.finished():
            ftf = o.ftf
            if ftf:
                per_user.setdefault(o.user, []).append(1.0 / ftf)
        values = np.array([np.mean(v) for v in per_user.values()])
        if values.size == 0:
            return None
        return float(values.sum() ** 2 / (values.size * (values**2).sum()))

    def worst_ftf(self) -> float | None:
        """The largest finish-time fairness rho over the measured jobs (Themis' max rho)."""
        ratios = [o.ftf for o in self.finished() if o.ftf is not None]
        return None if not ratios else float(max(ratios))

    def mean_ftf(self) -> float | None:
        """The mean finish-time fairness rho over the measured jobs that finished: each
        job's JCT over its JCT on an equal 1/n share of every model (Themis, Gavel)."""
        ratios = [o.ftf for o in self.finished() if o.ftf is not None]
        return None if not ratios else float(np.mean(ratios))

    def makespan_h(self) -> float | None:
        """Hours from the first measured arrival to the last measured completion (the
        span utilization is measured over); None until a measured job finished."""
        ends = [o.end for o in self.finished() if o.end is not None]
        if not ends or not self.measured:
            return None
        return (max(ends) - min(o.arrival for o in self.measured)) / 3600.0
