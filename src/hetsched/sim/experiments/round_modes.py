"""One workload two ways: the round engine and the core's round mode, side by side.

``compare_round_modes`` runs the same jobs (Gavel's or any workload whose jobs ask for
whole devices) through :class:`~hetsched.sim.engine.RoundSimulator` (devices
counted per model, a round's choice takes effect at once) and through the simulator
driving the core with a ``rounds`` profile (real placements on nodes, stops with notice
and grace, moves that wait for free devices), and reports each one's mean job completion
time. Jobs are given continuous checkpoints for the core (the round engine assumes a
checkpoint every round), so both lose no work when stopped.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsched.framework.profile import parse_profile
from hetsched.model.checkpoint import Checkpointing
from hetsched.model.device import Device, Node
from hetsched.model.lifecycle import JobState
from hetsched.sim.engine import Simulator
from hetsched.sim.engine.round_mode import RoundConfig, RoundSimulator
from hetsched.sim.rounds_workload import round_inputs
from hetsched.sim.workload import Workload, WorkloadJob

__all__ = ["ModeComparison", "compare_round_modes", "one_device_nodes"]


def one_device_nodes(counts: dict[str, int], device_class: str = "gpu") -> list[Node]:
    """Gavel's cluster: one node per device (``{"v100": 36, ...}``), 4 cores and 16 GiB
    per device, as Gavel's workload asks for per device."""
    return [
        Node(
            f"{model}-{i}",
            4000,
            16 * 1024,
            (Device(f"{model}-{i}/{device_class}0", device_class, "nvidia", model, {}),),
        )
        for model, count in counts.items()
        for i in range(count)
    ]


@dataclass(frozen=True, slots=True)
class ModeComparison:
    """Mean JCT in hours of each way (over the jobs both finished), and what each did."""

    policy: str
    jobs: int
    engine_jct_h: float
    core_jct_h: float
    engine_preemptions: int
    engine_migrations: int
    core_preemptions: int
    core_migrations: int

    @property
    def difference(self) -> float:
        """Core over engine, minus 1 (0.1: the core's mean JCT is 10 % longer)."""
        return self.core_jct_h / self.engine_jct_h - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "difference": self.difference}


def _checkpointing(workload: Workload, notice_s: float) -> Workload:
    every = Checkpointing(interval_s=0, notice_s=notice_s)
    return Workload(
        tuple(
            WorkloadJob(dataclasses.replace(item.job, checkpoint=every), item.duration_s)
            for item in workload.jobs
        ),
        workload.source,
    )


def compare_round_modes(
    nodes: list[Node],
    workload: Workload,
    policy: str = "las",
    round_s: float = 360.0,
    grace_s: float = 0.0,
    notice_s: float = 0.0,
) -> ModeComparison:
    """Run ``workload`` on ``nodes`` both ways under ``policy`` (both solve whenever the
    set of jobs changes). ``grace_s`` and ``notice_s``: how long a stopped job takes to
    stop in the core's run (0: at once, as the round engine has it). The jobs carry their
    rates (a speed map, as Gavel's generated jobs do)."""
    inputs = round_inputs(workload, nodes)
    config = RoundConfig(policy=policy, round_s=round_s, solve_on_change=True)
    engine = RoundSimulator(inputs.models, inputs.capacity, inputs.jobs, config).run()
    profile = parse_profile({"rounds": {"policy": policy, "round_s": round_s, "grace_s": grace_s}})
    result = Simulator(nodes, _checkpointing(workload, notice_s), profile).run()
    core_end = {
        o.job_id: o.end - o.submit
        for o in result.jobs
        if o.state is JobState.SUCCEEDED and o.end is not None
    }
    engine_end = {o.job_id: o.jct_s for o in engine.jobs if o.jct_s is not None}
    both = sorted(set(core_end) & set(engine_end))
    return ModeComparison(
        policy,
        len(both),
        float(np.mean([engine_end[j] for j in both])) / 3600.0 if both else float("nan"),
        float(np.mean([core_end[j] for j in both])) / 3600.0 if both else float("nan"),
        engine.preemptions,
        engine.migrations,
        result.preemptions,
        result.migrations,
    )
