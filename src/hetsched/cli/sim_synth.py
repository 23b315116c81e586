"""``hetsched sim synth``: generate a synthetic workload in the neutral CSV format."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from hetsched.cli.output import console, fail
from hetsched.cli.sim_replay import gpus_per_node_of
from hetsched.model.device import Node
from hetsched.model.specs import SpecError, load_cluster, parse_duration
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, load_throughputs
from hetsched.sim.gavel_synth import GavelWorkloadSpec, generate_gavel
from hetsched.sim.philly import RuntimeDistribution
from hetsched.sim.synthetic import SyntheticSpec, generate, gpus_per_node, rate_for_load
from hetsched.sim.workload import Workload, write_workload
from hetsched.sim.workload_check import check_against_cluster

__all__ = ["synth"]


def _mix(text: str, option: str, key: Callable[[str], Any]) -> dict[Any, float]:
    out: dict[Any, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, weight = part.partition(":")
        try:
            out[key(name.strip())] = float(weight) if sep else 1.0
        except ValueError:
            fail(f"{option}: bad entry {part.strip()!r} (expected NAME:WEIGHT)", 2)
    return out


#: the options of ``synth``
_SynthOutputFile = Annotated[Path, typer.Option("--out", "-O", help="CSV file to write.")]
_SynthJobs = Annotated[int, typer.Option(help="Number of jobs.")]
_SynthRatePerH = Annotated[
    float | None, typer.Option(help="Mean arrivals per hour (or use --load).")
]
_SynthLoad = Annotated[
    float | None, typer.Option(help="Offered GPU load (0..1) of --cluster; sets the rate.")
]
_SynthCluster = Annotated[
    Path | None, typer.Option(help="Cluster YAML (for --load and model checks).")
]
_SynthGpuMix = Annotated[
    str, typer.Option(help="GPUs per job: weights, e.g. 1:0.7,2:0.1,4:0.15,8:0.05.")
]
_SynthModelMix = Annotated[
    str, typer.Option(help="GPU models pinned by selector, e.g. V100:1,any:3 (any: none).")
]
_SynthPriorities = Annotated[
    str, typer.Option(help="Priority levels: weights, e.g. 0:0.8,100:0.2.")
]
_SynthUsers = Annotated[
    int | None,
    typer.Option(
        help="Users (Zipf-like weights; default 8). With --gavel: round-robin, "
        "default: each job its own user."
    ),
]
_SynthQueues = Annotated[int, typer.Option(help="Queues (user i submits to q<i mod queues>).")]
_SynthMaxGpusPerTask = Annotated[
    int | None,
    typer.Option(help="Largest task; bigger jobs become gangs (default: from --cluster, else 8)."),
]
_SynthRuntimes = Annotated[
    Path | None,
    typer.Option(help="Philly runtime CSV to draw durations from (default: its quantiles)."),
]
_SynthMaxDuration = Annotated[str | None, typer.Option(help="Cap on a job's duration (e.g. 7d).")]
_SynthSeed = Annotated[int, typer.Option(help="Random seed.")]
_SynthGavel = Annotated[
    bool,
    typer.Option(
        help="Gavel's continuous workload instead: its 26 job types, durations and "
        "scale factors, the same jobs as its simulator for the same --seed (default "
        "rate 4 jobs/h). Only --jobs, --rate-per-h, --seed, --users, --cluster and "
        "--max-gpus-per-task apply."
    ),
]
_SynthMultiGpu = Annotated[
    bool, typer.Option(help="With --gavel: multi-GPU jobs (1/2/4/8 GPUs: 70/10/15/5%).")
]
_SynthMultiPriority = Annotated[
    bool, typer.Option(help="With --gavel: 20% of the jobs get priority weight 5.")
]
_SynthGavelThroughputs = Annotated[
    Path | None,
    typer.Option(help="With --gavel: Gavel's simulation_throughputs.json (default: bundled)."),
]


def synth(
    output_file: _SynthOutputFile,
    jobs: _SynthJobs = 1000,
    rate_per_h: _SynthRatePerH = None,
    load: _SynthLoad = None,
    cluster: _SynthCluster = None,
    gpu_mix: _SynthGpuMix = "1:0.7,2:0.1,4:0.15,8:0.05",
    model_mix: _SynthModelMix = "any:1",
    priorities: _SynthPriorities = "0:0.8,1:0.2",
    users: _SynthUsers = None,
    queues: _SynthQueues = 2,
    max_gpus_per_task: _SynthMaxGpusPerTask = None,
    runtimes: _SynthRuntimes = None,
    max_duration: _SynthMaxDuration = None,
    seed: _SynthSeed = 0,
    gavel: _SynthGavel = False,
    multi_gpu: _SynthMultiGpu = False,
    multi_priority: _SynthMultiPriority = False,
    gavel_throughputs: _SynthGavelThroughputs = None,
) -> None:
    """Generate a synthetic workload in the neutral CSV format.

    Poisson arrivals, a GPU-count mix (Gavel's Philly mix by default), a device-model mix,
    Zipf-like users, and durations drawn from the Philly runtime distribution. With
    --gavel, Gavel's continuous workload: every job carries its job type, its work in steps
    and its speed on V100, P100 and K80.
    """
    if gavel:
        nodes = _load_nodes(cluster)
        multi = (multi_gpu, multi_priority)
        stream = _gavel_spec(jobs, rate_per_h, seed, multi, users, max_gpus_per_task, nodes)
        _write_synthetic(output_file, _gavel_workload(stream, gavel_throughputs), nodes)
        return
    if multi_gpu or multi_priority or gavel_throughputs is not None:
        fail("--multi-gpu, --multi-priority and --gavel-throughputs need --gavel", 2)
    try:
        nodes = load_cluster(cluster) if cluster is not None else []
        cap = parse_duration(max_duration) if max_duration is not None else None
        durations = (
            RuntimeDistribution.from_file(runtimes, cap)
            if runtimes is not None
            else RuntimeDistribution(max_s=cap)
        )
    except (SpecError, ValueError, OSError) as exc:
        fail(str(exc), 2)
    mixes = (gpu_mix, model_mix, priorities)
    spec = _spec(jobs, mixes, users, queues, max_gpus_per_task, durations, seed, nodes)
    try:
        if load is not None:
            if not nodes:
                fail("--load needs --cluster", 2)
            spec = dataclasses.replace(spec, rate_per_h=rate_for_load(spec, nodes, load))
        elif rate_per_h is not None:
            spec = dataclasses.replace(spec, rate_per_h=rate_per_h)
    except ValueError as exc:
        fail(str(exc), 2)
    _write_synthetic(output_file, generate(spec), nodes, spec.rate_per_h)


def _gavel_spec(
    jobs: int,
    rate_per_h: float | None,
    seed: int,
    multi: tuple[bool, bool],
    users: int | None,
    max_gpus_per_task: int | None,
    nodes: Sequence[Node],
) -> GavelWorkloadSpec:
    """``--gavel``'s spec from the options (``multi``: multi-GPU jobs, priority weights);
    exits naming the problem."""
    try:
        return GavelWorkloadSpec(
            jobs=jobs,
            rate_per_h=4.0 if rate_per_h is None else rate_per_h,
            seed=seed,
            multi_gpu=multi[0],
            multi_priority=multi[1],
            users=users or 0,
            gpus_per_node=max_gpus_per_task or (gpus_per_node_of(nodes) if nodes else 8),
        )
    except ValueError as exc:
        fail(str(exc), 2)


def _spec(
    jobs: int,
    mixes: tuple[str, str, str],
    users: int | None,
    queues: int,
    max_gpus_per_task: int | None,
    durations: RuntimeDistribution,
    seed: int,
    nodes: Sequence[Node],
) -> SyntheticSpec:
    """The generator's spec from the options (``mixes``: GPU, model and priority mixes);
    exits naming the option at fault."""
    gpu_mix, model_mix, priorities = mixes
    models = _mix(model_mix, "--model-mix", lambda n: "" if n == "any" else n)
    try:
        return SyntheticSpec(
            jobs=jobs,
            gpu_mix=_mix(gpu_mix, "--gpu-mix", int),
            model_mix=models,
            users=8 if users is None else users,
            queues=queues,
            priorities=_mix(priorities, "--priorities", int),
            gpus_per_node=max_gpus_per_task or (gpus_per_node_of(nodes) if nodes else 8),
            model_gpus_per_node={} if max_gpus_per_task else gpus_per_node(nodes),
            durations=durations,
            seed=seed,
        )
    except ValueError as exc:
        fail(str(exc), 2)


def _load_nodes(cluster: Path | None) -> list[Node]:
    try:
        return load_cluster(cluster) if cluster is not None else []
    except (SpecError, OSError) as exc:
        fail(str(exc), 2)


def _gavel_workload(spec: GavelWorkloadSpec, table: Path | None) -> Workload:
    try:
        return generate_gavel(spec, load_throughputs(table or BUNDLED_THROUGHPUTS))
    except (OSError, ValueError, SyntaxError) as exc:
        fail(f"--gavel-throughputs: {exc}", 2)


def _write_synthetic(
    output_file: Path, workload: Workload, nodes: Sequence[Node], rate_per_h: float | None = None
) -> None:
    if nodes:
        problems = check_against_cluster(workload, nodes)
        if problems:
            fail("\n".join(problems[:5]), 2)
    count = write_workload(output_file, workload)
    rate = f" ({rate_per_h:.1f} arrivals/h)" if rate_per_h is not None else ""
    console.print(f"wrote {count} jobs to {output_file}{rate}: {workload.source}", highlight=False)
