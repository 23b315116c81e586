"""A workload and a cluster as the round engine sees them: devices per model, jobs' rates.

``round_inputs`` turns the neutral workload (CSV or Gavel traces) and a cluster's nodes
into the round engine's columns: one model per distinct device model of ``device_class``
(healthy devices counted per model), and per job its rate on each model (its speed model,
:mod:`hetsched.model.speed`: rates from the job, its job type in the profile's table, or
equal everywhere), the devices it holds (tasks x devices per task) and its work (declared,
or its duration on its fastest model). Jobs that ask for no device of the class cannot run
in rounds and are left out, counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hetsched.model.device import Health, Node
from hetsched.model.speed import SpeedTable, resolve
from hetsched.sim.engine.round_mode import RoundJob
from hetsched.sim.workload import Workload

__all__ = ["RoundInputs", "round_inputs"]


@dataclass(frozen=True, slots=True)
class RoundInputs:
    models: tuple[str, ...]
    capacity: tuple[int, ...]
    jobs: tuple[RoundJob, ...]
    #: ids of jobs left out (no device of the class), and jobs that fit on no model
    skipped: tuple[str, ...]


def round_inputs(
    workload: Workload,
    nodes: Sequence[Node],
    table: SpeedTable | None = None,
    device_class: str = "gpu",
) -> RoundInputs:
    """The round engine's view of ``workload`` on ``nodes`` (ValueError when the cluster
    has no device of ``device_class``)."""
    counts: dict[str, int] = {}
    for node in nodes:
        for device in node.devices:
            if device.device_class == device_class and device.health is Health.HEALTHY:
                counts[device.model] = counts.get(device.model, 0) + 1
    if not counts:
        raise ValueError(f"cluster: no healthy {device_class} device to run rounds on")
    models = tuple(sorted(counts))
    jobs: list[RoundJob] = []
    skipped: list[str] = []
    for item in sorted(workload.jobs, key=lambda w: w.job.submit_time):
        job = item.job
        per_task = sum(
            r.primary.count for r in job.resources.devices if r.primary.device_class == device_class
        )
        if per_task == 0:
            skipped.append(job.id)
            continue
        speeds = resolve(job, table, item.duration_s)
        rates = tuple(speeds.on(model) for model in models)
        work = speeds.work if speeds.work > 0 else item.duration_s * max(rates)
        jobs.append(
            RoundJob(
                job.id,
                job.submit_time,
                rates,
                per_task * job.replicas,
                work,
                float(max(job.priority, 1)),
                job.user,
            )
        )
    return RoundInputs(models, tuple(counts[m] for m in models), tuple(jobs), tuple(skipped))
