"""One point of Gavel's continuous experiment: its job stream through the round engine.

``run_gavel_point`` draws Gavel's workload (:mod:`hetsched.sim.gavel_synth`) lazily for a
rate and seed, runs it under a round policy on a ``v100:p100:k80`` cluster
(:mod:`hetsched.sim.engine`) and measures the jobs of a window (Gavel's sweeps:
jobs 4000-4999), as ``hetsched sim gavel`` and ``bench/gavel_grid.py`` report it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hetsched.rounds import policy_names, solves_on_change
from hetsched.sim.engine.packing import BUNDLED_PAIRS, load_pair_rates
from hetsched.sim.engine.round_mode import (
    Progress,
    RoundConfig,
    RoundJob,
    RoundResult,
    RoundSimulator,
)
from hetsched.sim.gavel import Throughputs
from hetsched.sim.gavel_synth import GavelWorkloadSpec, iter_gavel

__all__ = [
    "PACKED",
    "GavelPoint",
    "gavel_policy_names",
    "gavel_round_jobs",
    "parse_cluster",
    "parse_window",
    "point_document",
    "uses_alpha",
    "uses_floor",
]

#: Gavel's worker types, in the order of its ``-c V:P:K`` cluster spec
GAVEL_MODELS = ("v100", "p100", "k80")

#: prefix of a policy run with space sharing (``packed-las``: LAS, with waiting jobs packed
#: onto running ones at Gavel's co-located rates; :mod:`hetsched.sim.engine.packing`)
PACKED = "packed-"


def gavel_policy_names() -> list[str]:
    """The policies ``hetsched sim gavel`` runs: every round policy, and ``packed-`` ones."""
    base = policy_names()
    return base + [PACKED + name for name in base if not name.startswith("agnostic-")]


@dataclass(frozen=True, slots=True)
class GavelPoint:
    """One sweep point: ``rate`` jobs/h, ``seed``, single- or multi-GPU jobs, the
    measured window of job indices and the devices per model."""

    policy: str = "las"
    rate: float = 4.0
    seed: int = 0
    multi_gpu: bool = False
    window: tuple[int, int] = (4000, 5000)
    cluster: tuple[int, ...] = (36, 36, 36)
    round_s: float = 360.0
    alpha: float = 0.5
    until_s: float | None = None
    #: None: the policy's own rule (``rounds.solves_on_change``)
    solve_on_change: bool | None = None
    #: the co-located throughputs for ``packed-`` policies (default: the bundled pairs)
    pairs_path: str | None = None
    #: allocations as Gavel's interior-point solver finds them (``PolicyOptions.central``);
    #: False: hetsched's optimal vertex, then the rest spent on effective throughput
    central: bool = True
    #: ``fair-catchup``'s knob: the fraction of the max-min level every job keeps
    catchup_floor: float = 1.0
    #: the order of Gavel's job table the stream draws from (``GavelWorkloadSpec``):
    #: ``osdi20``, the published runs', or ``artifact``, the later artifact's
    job_table: str = "osdi20"

    def on_change(self) -> bool:
        """Whether the point solves at every arrival and completion (``solve_on_change``,
        else the policy's own rule: ``fair-catchup`` does, Gavel's policies do not)."""
        if self.solve_on_change is None:
            return solves_on_change(self.policy.removeprefix(PACKED))
        return self.solve_on_change

    def run(self, throughputs: Throughputs, progress: Progress | None = None) -> RoundResult:
        """Run the point (ValueError for bad input, naming the field)."""
        if len(self.cluster) != len(GAVEL_MODELS):
            raise ValueError(f"cluster: expected {len(GAVEL_MODELS)} counts (v100:p100:k80)")
        if self.policy not in gavel_policy_names():
            known = ", ".join(gavel_policy_names())
            raise ValueError(f"policy: unknown {self.policy!r} (known: {known})")
        pairs = None
        if self.policy.startswith(PACKED):
            path = self.pairs_path or BUNDLED_PAIRS
            pairs = load_pair_rates(path, GAVEL_MODELS)
            if not (pairs.host > 0).any():
                raise ValueError(
                    f"throughputs: {path} lists no co-located throughputs "
                    f"({self.policy} needs them; Gavel's simulation_throughputs.json has them)"
                )
        spec = GavelWorkloadSpec(
            jobs=self.window[1] * 20,
            rate_per_h=self.rate,
            seed=self.seed,
            multi_gpu=self.multi_gpu,
            job_table=self.job_table,
        )
        config = RoundConfig(
            self.policy.removeprefix(PACKED),
            round_s=self.round_s,
            alpha=self.alpha,
            seed=self.seed,
            window=self.window,
            until=self.until_s,
            solve_on_change=self.on_change(),
            pairs=pairs,
            central=self.central,
            catchup_floor=self.catchup_floor,
        )
        jobs = gavel_round_jobs(spec, throughputs, GAVEL_MODELS)
        return RoundSimulator(GAVEL_MODELS, self.cluster, jobs, config, progress).run()


def gavel_round_jobs(
    spec: GavelWorkloadSpec, throughputs: Throughputs, models: Sequence[str]
) -> Iterator[RoundJob]:
    """Gavel's job stream as round-engine jobs: whole-job rates per model, GPUs, steps."""
    for item in iter_gavel(spec, throughputs):
        job = item.job
        rates = job.speed.rates
        gpus = job.replicas * job.resources.devices[0].primary.count
        yield RoundJob(
            job.id,
            job.submit_time,
            tuple(float(rates.get(m, 0.0)) for m in models),
            gpus,
            float(job.speed.work or 0.0),
            float(job.priority),
            job.user,
            (job.name, gpus),
        )


def uses_floor(policy: str) -> bool:
    """Whether a round policy reads ``fair-catchup``'s knob ``catchup_floor``."""
    return policy.removeprefix(PACKED).removeprefix("agnostic-") == "fair-catchup"


def uses_alpha(policy: str) -> bool:
    """Whether a round policy reads the fairness knob ``alpha``."""
    return policy.removeprefix(PACKED).removeprefix("agnostic-") in (
        "fair-throughput",
        "fair-srtf",
    )


def parse_window(text: str) -> tuple[int, int]:
    """``4000:5000`` -> (4000, 5000): job indices [start, end) in arrival order."""
    parts = text.split(":")
    try:
        start, end = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"window: expected START:END job indices, got {text!r}") from None
    if not 0 <= start < end:
        raise ValueError(f"window: expected 0 <= START < END, got {text!r}")
    return start, end


def parse_cluster(text: str) -> tuple[int, ...]:
    """``36:36:36`` -> GPUs of each of v100, p100, k80."""
    parts = text.split(":")
    try:
        counts = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(f"cluster: expected V100:P100:K80 GPU counts, got {text!r}") from None
    if len(counts) != len(GAVEL_MODELS) or any(c < 0 for c in counts) or sum(counts) == 0:
        raise ValueError(f"cluster: expected three counts >= 0, not all 0, got {text!r}")
    return counts


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def point_document(point: GavelPoint, result: RoundResult, wall_s: float) -> dict[str, Any]:
    """The JSON of one point (``hetsched sim gavel -o json``, ``bench/gavel_grid.py``)."""
    finished = result.finished()
    return {
        "policy": point.policy,
        "rate": point.rate,
        "seed": point.seed,
        "multi_gpu": point.multi_gpu,
        "window": list(point.window),
        "cluster": dict(zip(GAVEL_MODELS, point.cluster, strict=True)),
        "round_s": point.round_s,
        "solve_on_change": point.on_change(),
        "central": point.central,
        "job_table": point.job_table,
        "alpha": point.alpha if uses_alpha(point.policy) else None,
        "catchup_floor": point.catchup_floor if uses_floor(point.policy) else None,
        "mean_jct_h": _round(result.mean_jct_h()),
        "utilization": _round(result.utilization()),
        "utilization_by_model": {k: round(v, 4) for k, v in result.utilization_by_model().items()},
        "effective_throughput": _round(result.effective_throughput()),
        "jain": _round(result.jain()),
        "worst_ftf": _round(result.worst_ftf()),
        "mean_ftf": _round(result.mean_ftf()),
        "makespan_h": _round(result.makespan_h()),
        "finished": len(finished),
        "measured": len(result.measured),
        "complete": result.complete,
        "jobs_arrived": len(result.jobs),
        "rounds": result.rounds,
        "solves": result.solves,
        "lps": result.lps,
        "solve_s": round(result.solve_wall_s, 3),
        "preemptions": result.preemptions,
        "migrations": result.migrations,
        "sim_end_h": round(result.end_time / 3600.0, 2),
        "wall_s": round(wall_s, 2),
    }
