"""Gavel's continuous workloads: the job stream of its OSDI'20 simulation sweeps.

Gavel's simulator draws jobs on the fly (its ``generate_job``); this module draws the same
stream, job for job, for the same seed, so a sweep point here runs Gavel's jobs:

- 26 job templates (ResNet-18 at batch sizes 16-256, ResNet-50 at 16-128, Transformer at
  16-256, LM at 5-80, Recommendation at 512-8192, A3C, CycleGAN); the first four families
  may be distributed (multi-GPU), the others only run on one GPU. The draws index into the
  table, so its order decides which job type each draw gives: ``osdi20`` (the default) is
  the order of Gavel's table when the sweeps behind its published mean JCTs ran (May 2020:
  A3C between the Transformers and the LMs), ``artifact`` the order of its later artifact
  (August 2020 on: A3C and CycleGAN last). Single-GPU streams differ only in the job type
  of a draw; multi-GPU streams draw the template until it may be distributed, so the count
  of draws, and with it every later job, differs: the two orders are two different job
  streams for one seed;
- duration (time on a V100): with probability 0.8, ``60 x 10^U(1.5, 3)`` s (32 min to
  16.7 h), else ``60 x 10^U(3, 4)`` s (16.7 h to 6.9 days);
- scale factor (GPUs), drawn for every job and kept only with ``multi_gpu``: 1 with
  probability 0.7, 2 with 0.1, 4 with 0.15, 8 with 0.05; the template is then drawn until
  it may run at that scale;
- work = duration x the template's isolated V100 throughput at that scale (steps);
- optional priorities (``multi_priority``): weight 5 for 20% of the jobs, else 1;
- Poisson arrivals at ``rate_per_h`` jobs per hour, the first at time 0.

The draws use Python's Mersenne Twister as Gavel does: the job stream from ``Random(seed +
2)`` (scale factor, duration, template, priority, in that order per job), the gaps from
``Random(seed + 3)``. Each job carries its speed model (job type, steps, its rate on every
worker type of the throughput table) and its V100 duration. Pure: no clock, no files.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.model.speed import JobSpeed
from hetsched.sim.gavel import Throughputs, job_rates
from hetsched.sim.synthetic import split_gang
from hetsched.sim.workload import Workload, WorkloadJob

__all__ = [
    "ARTIFACT_TEMPLATES",
    "JOB_TABLES",
    "TEMPLATES",
    "GavelWorkloadSpec",
    "Template",
    "generate_gavel",
    "iter_gavel",
]


@dataclass(frozen=True, slots=True)
class Template:
    """A job type of Gavel's job table, and whether it may run on several GPUs."""

    job_type: str
    distributed: bool


def _family(name: str, sizes: tuple[int, ...], distributed: bool) -> list[Template]:
    return [Template(f"{name} (batch size {size})", distributed) for size in sizes]


#: Gavel's job table as its artifact orders it (August 2020 on)
ARTIFACT_TEMPLATES: tuple[Template, ...] = (
    *_family("ResNet-18", (16, 32, 64, 128, 256), True),
    *_family("ResNet-50", (16, 32, 64, 128), True),
    *_family("Transformer", (16, 32, 64, 128, 256), True),
    *_family("LM", (5, 10, 20, 40, 80), True),
    *_family("Recommendation", (512, 1024, 2048, 4096, 8192), False),
    Template("A3C", False),
    Template("CycleGAN", False),
)

#: Gavel's job table in the order the OSDI'20 sweeps drew from (the default)
TEMPLATES: tuple[Template, ...] = (
    *ARTIFACT_TEMPLATES[:14],
    Template("A3C", False),
    *ARTIFACT_TEMPLATES[14:24],
    Template("CycleGAN", False),
)

#: ``GavelWorkloadSpec.job_table`` -> the table in that order
JOB_TABLES: dict[str, tuple[Template, ...]] = {
    "osdi20": TEMPLATES,
    "artifact": ARTIFACT_TEMPLATES,
}


@dataclass(frozen=True, slots=True)
class GavelWorkloadSpec:
    """One continuous workload: ``jobs`` arrivals at ``rate_per_h`` jobs per hour.

    ``users``: 0 gives every job its own user (Gavel's fairness is between jobs); N spreads
    the jobs over N users round-robin. ``gpus_per_node`` splits a job into equal tasks that
    fit a node (Gavel's sweeps use 1-GPU servers). ``job_table``: the order of Gavel's job
    table the draws index into (``osdi20`` or ``artifact``, see the module).
    """

    jobs: int = 6000
    rate_per_h: float = 4.0
    seed: int = 0
    multi_gpu: bool = False
    multi_priority: bool = False
    reference: str = "v100"
    users: int = 0
    gpus_per_node: int = 8
    cpu_per_gpu_milli: int = 4000
    memory_per_gpu_mib: int = 16 * 1024
    device_class: str = "gpu"
    job_table: str = "osdi20"

    def __post_init__(self) -> None:
        problems = []
        if self.jobs < 0:
            problems.append(f"jobs must be >= 0, got {self.jobs}")
        if not self.rate_per_h > 0 or math.isinf(self.rate_per_h):
            problems.append(f"rate_per_h must be > 0, got {self.rate_per_h}")
        if self.users < 0:
            problems.append(f"users must be >= 0, got {self.users}")
        if self.gpus_per_node < 1:
            problems.append(f"gpus_per_node must be >= 1, got {self.gpus_per_node}")
        if self.job_table not in JOB_TABLES:
            known = ", ".join(JOB_TABLES)
            problems.append(f"job_table must be one of {known}, got {self.job_table!r}")
        if problems:
            raise ValueError("; ".join(problems))


def _scale_factor(rng: random.Random) -> int:
    draw = rng.uniform(0, 1)
    if 0.7 <= draw <= 0.8:
        return 2
    if 0.8 <= draw <= 0.95:
        return 4
    return 8 if draw >= 0.95 else 1


def _duration_s(rng: random.Random) -> float:
    if rng.random() >= 0.8:
        return 60 * 10 ** rng.uniform(3, 4)
    return 60 * 10 ** rng.uniform(1.5, 3)


def _template(rng: random.Random, gpus: int, table: tuple[Template, ...]) -> Template:
    while True:
        template = rng.choice(table)
        if gpus == 1 or template.distributed:
            return template


def _check_table(throughputs: Throughputs, reference: str, multi_gpu: bool) -> None:
    if reference not in throughputs:
        known = ", ".join(sorted(throughputs))
        raise ValueError(f"reference worker type {reference!r} not in the table (have: {known})")
    table = throughputs[reference]
    sizes = (1, 2, 4, 8) if multi_gpu else (1,)
    missing = [
        f"({t.job_type!r}, {n})"
        for t in TEMPLATES
        for n in sizes
        if (n == 1 or t.distributed) and (t.job_type, n) not in table
    ]
    if missing:
        raise ValueError(
            f"the {reference} throughputs lack {len(missing)} job type(s): {', '.join(missing[:3])}"
        )


def iter_gavel(
    spec: GavelWorkloadSpec, throughputs: Throughputs, jobs: int | None = None
) -> Iterator[WorkloadJob]:
    """Gavel's job stream for ``spec``, lazily, in arrival order: ``jobs`` jobs (default
    ``spec.jobs``). The first N jobs are the same whatever the count asked for, so a driver
    may ask for many and draw only until it has enough. Raises ValueError when the table
    lacks a job type it needs."""
    _check_table(throughputs, spec.reference, spec.multi_gpu)
    count = spec.jobs if jobs is None else jobs
    jobs_rng = random.Random(spec.seed + 2)
    gaps_rng = random.Random(spec.seed + 3)
    rate_per_s = spec.rate_per_h / 3600.0
    reference = throughputs[spec.reference]
    table = JOB_TABLES[spec.job_table]
    requests: dict[int, tuple[int, TaskRequest]] = {}
    arrival = 0.0
    for index in range(count):
        gpus = _scale_factor(jobs_rng)
        duration = _duration_s(jobs_rng)
        if not spec.multi_gpu:
            gpus = 1
        template = _template(jobs_rng, gpus, table)
        weight = 1
        if spec.multi_priority and jobs_rng.uniform(0, 1) <= 0.2:
            weight = 5
        if gpus not in requests:
            tasks, per_task = split_gang(gpus, spec.gpus_per_node)
            requests[gpus] = (
                tasks,
                TaskRequest(
                    spec.cpu_per_gpu_milli * per_task,
                    spec.memory_per_gpu_mib * per_task,
                    (DeviceRequest.of(spec.device_class, per_task),),
                ),
            )
        tasks, request = requests[gpus]
        steps = duration * reference[(template.job_type, gpus)]
        user = f"job-{index}" if spec.users == 0 else f"user{index % spec.users}"
        job = Job(
            id=f"gavel-{index}",
            resources=request,
            name=template.job_type,
            user=user,
            queue="default",
            priority=weight,
            replicas=tasks,
            submit_time=round(arrival, 6),
            speed=JobSpeed(
                job_rates(throughputs, template.job_type, gpus), template.job_type, steps
            ),
        )
        yield WorkloadJob(job, duration)
        arrival += -math.log(1.0 - gaps_rng.random()) / rate_per_s


def generate_gavel(spec: GavelWorkloadSpec, throughputs: Throughputs) -> Workload:
    """Draw ``spec.jobs`` jobs of Gavel's continuous workload; the same spec and table give
    the same workload. Raises ValueError when the table lacks a job type it needs."""
    out = tuple(iter_gavel(spec, throughputs))
    kind = "multi-GPU" if spec.multi_gpu else "single-GPU"
    source = f"gavel(seed={spec.seed}, {spec.rate_per_h:g} jobs/h, {kind}, jobs={spec.jobs})"
    return Workload(out, source)
