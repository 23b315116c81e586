"""Gavel's Philly-derived job lists, read into the neutral workload.

Two line layouts, tab-separated, no header (see the trace folder's README):

- 7 fields (``msr/seed=N/<vc>.trace``): job_type, command, num_steps_arg, needs_data_dir,
  total_steps, arrival_time, scale_factor;
- 10 fields (``physical_cluster/*.trace``): job_type, command, working_directory,
  num_steps_arg, needs_data_dir, total_steps, scale_factor, priority_weight, SLO,
  arrival_time.

Mapping: ``scale_factor`` is the job's GPU count (0, which Gavel's old traces used for
"skip", is skipped); a job larger than a node becomes a gang of equal tasks. Each job
carries its speed model (:mod:`hetsched.model.speed`): its job type, ``total_steps`` as its
work, and its isolated throughput per worker type (``v100``, ``p100``, ``k80``; device
models match them case-insensitively) as its rates. The duration is ``total_steps``
divided by the throughput on a reference worker type (``v100`` by default); a simulator
that runs durations runs every job for that long whatever GPU model it lands on.

Gavel lists throughputs up to 8 GPUs, and only at 1 GPU for the types it does not
distribute (A3C, CycleGAN, Recommendation); the Philly GPU counts were paired with types at
random, so a (type, GPUs) pair without an entry is assumed to scale linearly from the
largest listed size below it. A job whose type has no entry at all is skipped and counted.
User and queue are the file's stem (the Philly virtual cluster), so fairness is measured
between virtual clusters. Commands are opaque labels and never run.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.model.speed import JobSpeed, SpeedTable
from hetsched.sim.synthetic import split_gang
from hetsched.sim.workload import Workload, WorkloadError, WorkloadJob

__all__ = [
    "BUNDLED_THROUGHPUTS",
    "GavelOptions",
    "Throughputs",
    "job_rates",
    "load_throughputs",
    "read_gavel",
    "speed_table",
]

#: Gavel's isolated throughputs of v100, p100 and k80, shipped with hetsched (MIT; see
#: data/README.md): the table ``sim synth --gavel`` uses unless given another
BUNDLED_THROUGHPUTS = Path(__file__).parent / "data" / "gavel_throughputs.json"

#: worker type -> (job type, GPUs) -> isolated steps per second
Throughputs = Mapping[str, Mapping[tuple[str, int], float]]


@dataclass(frozen=True, slots=True)
class GavelOptions:
    reference: str = "v100"
    gpus_per_node: int = 8
    cpu_per_gpu_milli: int = 4000
    memory_per_gpu_mib: int = 16 * 1024
    device_class: str = "gpu"


def load_throughputs(path: str | Path) -> dict[str, dict[tuple[str, int], float]]:
    """The isolated (``"null"``) throughput of every (job type, GPUs) per worker type. A
    listed 0 stays 0: the job cannot run there (Gavel's table has ResNet-50 at batch size
    128 on 2-8 K80s at 0), and is not scaled up from a smaller size that can."""
    with open(path, encoding="utf-8") as handle:
        raw = json.load(handle)
    out: dict[str, dict[tuple[str, int], float]] = {}
    for worker, table in raw.items():
        rows: dict[tuple[str, int], float] = {}
        for key, value in table.items():
            job_type, gpus = ast.literal_eval(key)
            alone = value.get("null") if isinstance(value, dict) else None
            if isinstance(alone, int | float) and alone >= 0:
                rows[(str(job_type), int(gpus))] = float(alone)
        out[str(worker)] = rows
    return out


def speed_table(throughputs: Throughputs) -> SpeedTable:
    """The throughputs as the speed model's table (worker types as device models; the
    ``*_unconsolidated`` ones left out, as Gavel's simulator leaves them)."""
    rows: dict[tuple[str, int], dict[str, float]] = {}
    for worker, table in throughputs.items():
        if worker.endswith("_unconsolidated"):
            continue
        for key, rate in table.items():
            rows.setdefault(key, {})[worker] = rate
    return SpeedTable(rows)


def _steps_per_s(table: Mapping[tuple[str, int], float], job_type: str, gpus: int) -> float | None:
    """The listed throughput, or linear scaling from the largest listed size below."""
    rate = table.get((job_type, gpus))
    if rate is not None:
        return rate
    sizes = [n for (t, n) in table if t == job_type and n < gpus]
    if not sizes:
        return None
    base = max(sizes)
    return table[(job_type, base)] * gpus / base


def job_rates(throughputs: Throughputs, job_type: str, gpus: int) -> dict[str, float]:
    """The job's isolated rate per worker type (consolidated types only), where listed."""
    out: dict[str, float] = {}
    for worker, table in throughputs.items():
        if worker.endswith("_unconsolidated"):
            continue
        rate = _steps_per_s(table, job_type, gpus)
        if rate is not None:
            out[worker] = rate
    return out


def _files(paths: Sequence[str | Path]) -> list[Path]:
    out: list[Path] = []
    for path in map(Path, paths):
        out += sorted(path.glob("*.trace")) if path.is_dir() else [path]
    return out


def read_gavel(
    paths: Sequence[str | Path],
    throughputs: Throughputs,
    options: GavelOptions | None = None,
) -> tuple[Workload, dict[str, int]]:
    """Read Gavel trace files (or folders of ``*.trace``) into one workload.

    Returns the workload (sorted by arrival) and a count of skipped jobs per reason.
    Raises WorkloadError with ``FILE:LINE: FIELD: message`` for malformed lines.
    """
    opts = options or GavelOptions()
    if opts.reference not in throughputs:
        known = ", ".join(sorted(throughputs))
        raise WorkloadError([f"reference worker type {opts.reference!r} unknown (have: {known})"])
    jobs: list[WorkloadJob] = []
    errors: list[str] = []
    skipped: dict[str, int] = {}
    files = _files(paths)
    if not files:
        raise WorkloadError([f"{', '.join(map(str, paths))}: no .trace files"])
    for path in files:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise WorkloadError([f"{path}: cannot read: {exc.strerror}"]) from None
        jobs += _parse(path, lines, throughputs, opts, errors, skipped)
        if len(errors) >= 50:
            break
    if errors:
        raise WorkloadError(errors[:50])
    jobs.sort(key=lambda j: j.job.submit_time)
    source = str(files[0]) if len(files) == 1 else f"{files[0].parent} ({len(files)} files)"
    return Workload(tuple(jobs), source), skipped


def _parse(
    path: Path,
    lines: Iterable[str],
    throughputs: Throughputs,
    opts: GavelOptions,
    errors: list[str],
    skipped: dict[str, int],
) -> list[WorkloadJob]:
    stem = path.stem
    table = throughputs[opts.reference]
    out: list[WorkloadJob] = []
    requests: dict[int, tuple[int, TaskRequest]] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        row = _row(text.split("\t"), f"{path}:{number}", errors)
        if row is None:
            continue
        job_type, steps, arrival, gpus, priority = row
        if gpus == 0:
            reason = "scale_factor 0 (skip)"
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        rate = _steps_per_s(table, job_type, gpus)
        if rate is None:
            reason = f"no {opts.reference} throughput for ({job_type!r}, {gpus})"
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        if gpus not in requests:
            requests[gpus] = _request(gpus, opts)
        tasks, request = requests[gpus]
        job = Job(
            id=f"{stem}-{number}",
            resources=request,
            name=job_type,
            user=stem,
            queue=stem,
            priority=priority,
            replicas=tasks,
            submit_time=arrival,
            speed=JobSpeed(job_rates(throughputs, job_type, gpus), job_type, float(steps)),
        )
        out.append(WorkloadJob(job, round(steps / rate, 3), number))
    return out


def _row(
    fields: list[str], where: str, errors: list[str]
) -> tuple[str, int, float, int, int] | None:
    """One trace line's (job type, steps, arrival, GPUs, priority), from Gavel's 7-field
    or 10-field layout; None (its problems added to ``errors``) when malformed."""
    if len(fields) == 7:
        job_type, steps_s, arrival_s, gpus_s = fields[0], fields[4], fields[5], fields[6]
        priority_s = "1"
    elif len(fields) == 10:
        job_type, steps_s, gpus_s = fields[0], fields[5], fields[6]
        priority_s, arrival_s = fields[7], fields[9]
    else:
        errors.append(f"{where}: row: expected 7 or 10 tab-separated fields, got {len(fields)}")
        return None
    try:
        steps = int(steps_s)
        arrival = float(arrival_s)
        gpus = int(gpus_s)
        priority = round(float(priority_s))
    except ValueError as exc:
        errors.append(f"{where}: row: {exc}")
        return None
    bad = [
        f"{name}: must be {rule}, got {value}"
        for name, value, ok, rule in (
            ("total_steps", steps, steps > 0, "> 0"),
            ("arrival_time", arrival, arrival >= 0, ">= 0"),
            ("scale_factor", gpus, gpus >= 0, ">= 0"),
        )
        if not ok
    ]
    if bad:
        errors += [f"{where}: {b}" for b in bad]
        return None
    return job_type, steps, arrival, gpus, priority


def _request(gpus: int, opts: GavelOptions) -> tuple[int, TaskRequest]:
    """The tasks of a job of ``gpus`` GPUs (a gang beyond a node's GPUs) and each one's
    request (CPU and memory per GPU as ``opts`` says)."""
    tasks, per_task = split_gang(gpus, opts.gpus_per_node)
    request = TaskRequest(
        opts.cpu_per_gpu_milli * per_task,
        opts.memory_per_gpu_mib * per_task,
        (DeviceRequest.of(opts.device_class, per_task),),
    )
    return tasks, request
