"""``hetsched sim replay`` and ``hetsched sim synth``: replay workloads, make synthetic ones."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hetsched.cli.json_stream import write_json
from hetsched.cli.output import OutputFormat, console, fail
from hetsched.cli.sim_rounds import replay_rounds
from hetsched.framework.profile import ProfileError
from hetsched.framework.speeds import load_speed_table
from hetsched.model.device import Node
from hetsched.model.specs import SpecError, load_cluster, parse_duration
from hetsched.sim.engine import EngineConfig
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, GavelOptions, load_throughputs, read_gavel
from hetsched.sim.gavel_synth import GavelWorkloadSpec, generate_gavel
from hetsched.sim.philly import RuntimeDistribution
from hetsched.sim.replay import (
    Policy,
    Replay,
    available_policies,
    policy_from_name,
    policy_from_profile,
)
from hetsched.sim.replay import replay as run_replay
from hetsched.sim.replay_report import render, report_document, write_report
from hetsched.sim.synthetic import SyntheticSpec, generate, gpus_per_node, rate_for_load
from hetsched.sim.workload import (
    Workload,
    WorkloadError,
    check_against_cluster,
    read_workload,
    write_workload,
)

__all__ = ["load_any_workload", "replay", "synth"]

_err = Console(stderr=True)


def _gpus_per_node(nodes: Sequence[Node]) -> int:
    return max((sum(d.device_class == "gpu" for d in n.devices) for n in nodes), default=8) or 8


def _find_throughputs(workload: Path) -> Path | None:
    for folder in [workload if workload.is_dir() else workload.parent, *workload.parents]:
        candidate = folder / "simulation_throughputs.json"
        if candidate.is_file():
            return candidate
    return None


def load_any_workload(
    path: Path,
    fmt: str,
    nodes: Sequence[Node],
    throughputs: Path | None = None,
    reference: str = "v100",
) -> Workload:
    """A neutral CSV, or Gavel trace files: a ``.trace`` file, a folder of them, or several
    of either separated by commas."""
    paths = [Path(p) for p in str(path).split(",") if p]
    if fmt == "auto":
        gavel = all(p.is_dir() or p.suffix == ".trace" for p in paths)
        fmt = "gavel" if gavel else "csv"
    if fmt == "csv":
        if len(paths) != 1:
            raise WorkloadError([f"{path}: one CSV workload at a time"])
        return read_workload(path)
    table_path = throughputs or _find_throughputs(paths[0])
    if table_path is None:
        raise WorkloadError(
            [f"{path}: no simulation_throughputs.json beside it; pass --gavel-throughputs"]
        )
    options = GavelOptions(reference=reference, gpus_per_node=_gpus_per_node(nodes))
    workload, skipped = read_gavel(paths, load_throughputs(table_path), options)
    for reason, count in skipped.items():
        _err.print(f"[yellow]skipped[/yellow] {count} job(s): {reason}", highlight=False)
    return workload


def _policies(names: str | None, profiles: str | None, profile: Path | None) -> list[Policy]:
    out: list[Policy] = []
    if names:
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        if wanted == ["all"]:
            wanted = available_policies()
        out += [policy_from_name(n) for n in wanted]
    if profiles:
        out += [policy_from_profile(p.strip()) for p in profiles.split(",") if p.strip()]
    if profile is not None:
        out.append(policy_from_profile(profile))
    if not out:
        out.append(policy_from_name("fifo"))
    seen: set[str] = set()
    for index, policy in enumerate(out):
        if policy.name in seen:
            out[index] = dataclasses.replace(policy, name=f"{policy.name}#{index + 1}")
        seen.add(out[index].name)
    return out


@contextmanager
def _progress_bar(
    enabled: bool, total: int
) -> Iterator[Callable[[str], Callable[[int, int, float], None]]]:
    """Yields ``start(policy) -> callback``; draws to stderr when enabled."""
    if not enabled:
        yield lambda _name: lambda _done, _total, _now: None
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("t={task.fields[vt]}"),
        TimeElapsedColumn(),
        console=_err,
        transient=True,
    )
    with bar:

        def start(name: str) -> Callable[[int, int, float], None]:
            task = bar.add_task(name, total=total, vt="0h")

            def update(done: int, _total: int, now: float) -> None:
                bar.update(task, completed=done, vt=f"{now / 3600:.1f}h")

            return update

        yield start


#: the options of ``replay``
_ReplayCluster = Annotated[Path, typer.Option(help="Cluster YAML: nodes and their devices.")]
_ReplayWorkload = Annotated[
    Path,
    typer.Option(
        help="Workload: a neutral-format CSV, or Gavel .trace files or folders (comma-separated)."
    ),
]
_ReplayProfile = Annotated[
    Path | None, typer.Option(help="Profile YAML to replay under (default: fifo).")
]
_ReplayPolicies = Annotated[
    str | None,
    typer.Option(
        help="Built-in policies to compare, comma-separated (fifo, priority, drf, "
        "fairshare: those registered now), or 'all'."
    ),
]
_ReplayCompareProfiles = Annotated[
    str | None, typer.Option(help="Profile YAML files to compare, comma-separated.")
]
_ReplaySeed = Annotated[int, typer.Option(help="Seed for the core's random choices.")]
_ReplayTick = Annotated[
    str,
    typer.Option(
        help="Virtual time between ticks while jobs wait (60, 5m); 0: only the ticks "
        "the core asks for."
    ),
]
_ReplayUntil = Annotated[str | None, typer.Option(help="Stop at this virtual time (e.g. 30d).")]
_ReplayLimit = Annotated[int | None, typer.Option(help="Replay only the first N jobs.")]
_ReplayFmt = Annotated[str, typer.Option("--format", help="Workload format: auto, csv or gavel.")]
_ReplayGavelThroughputs = Annotated[
    Path | None, typer.Option(help="Gavel simulation_throughputs.json (default: found).")
]
_ReplayGavelReference = Annotated[
    str, typer.Option(help="Gavel worker type whose throughput sets durations.")
]
_ReplayOutput = Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")]
_ReplayJobs = Annotated[bool, typer.Option("--jobs/--no-jobs", help="Per-job records in -o json.")]
_ReplayOut = Annotated[
    Path | None,
    typer.Option(
        help="Write report.md, summary.json, jobs.csv and plots here (with --rounds: "
        "rounds.json, and frontier.png over several --alphas)."
    ),
]
_ReplayRounds = Annotated[
    str | None,
    typer.Option(
        help="Replay in rounds under these round policies instead (comma-separated: las, "
        "ftf, max-throughput, min-makespan, fifo, fair-throughput, fair-srtf, fair-catchup, "
        "agnostic-*)."
    ),
]
_ReplayAlphas = Annotated[
    str,
    typer.Option(
        help="With --rounds: knob values of fair-throughput and fair-srtf, comma-separated "
        "(0 max-min fairness .. 1 throughput); several draw the frontier with --out."
    ),
]
_ReplayRoundS = Annotated[float, typer.Option("--round", help="With --rounds: round seconds.")]


def replay(
    cluster: _ReplayCluster,
    workload: _ReplayWorkload,
    profile: _ReplayProfile = None,
    policies: _ReplayPolicies = None,
    compare_profiles: _ReplayCompareProfiles = None,
    seed: _ReplaySeed = 0,
    tick: _ReplayTick = "60",
    until: _ReplayUntil = None,
    limit: _ReplayLimit = None,
    fmt: _ReplayFmt = "auto",
    gavel_throughputs: _ReplayGavelThroughputs = None,
    gavel_reference: _ReplayGavelReference = "v100",
    output: _ReplayOutput = OutputFormat.table,
    jobs: _ReplayJobs = True,
    out: _ReplayOut = None,
    rounds: _ReplayRounds = None,
    alphas: _ReplayAlphas = "0.5",
    round_s: _ReplayRoundS = 360.0,
) -> None:
    """Replay a workload on a cluster with departures, and report how the policies did.

    Reports wait and job completion time (mean, p50, p99), makespan, CPU and per-model
    device utilization, fairness (Jain's index over users, finish-time fairness),
    preemptions and per-job records. With several policies the same workload is replayed
    under each and the results are shown side by side. With --rounds, the workload runs
    in rounds (Gavel's method) under round-based allocation policies instead.
    """
    if fmt not in ("auto", "csv", "gavel"):
        fail(f"--format: expected auto, csv or gavel, got {fmt!r}", 2)
    try:
        tick_s = parse_duration(tick)
        until_s = None if until is None else parse_duration(until)
    except ValueError as exc:
        fail(f"--tick/--until: {exc}", 2)
    try:
        nodes = load_cluster(cluster)
        chosen = _policies(policies, compare_profiles, profile)
        loaded = load_any_workload(workload, fmt, nodes, gavel_throughputs, gavel_reference)
    except (SpecError, ProfileError, WorkloadError, ValueError, OSError) as exc:
        fail(str(exc), 2)
    if limit is not None:
        loaded = Workload(loaded.jobs[: max(limit, 0)], loaded.source)
    problems = check_against_cluster(loaded, nodes)
    if problems:
        fail("\n".join(problems), 2)
    if rounds is not None:
        if not round_s > 0:
            fail(f"--round: expected seconds > 0, got {round_s}", 2)
        try:
            table = load_speed_table(chosen[0].profile.speeds, profile.parent) if profile else None
        except (ProfileError, ValueError, OSError) as exc:
            fail(str(exc), 2)
        replay_rounds(nodes, loaded, table, rounds, alphas, round_s, seed, output, out)
        return
    config = EngineConfig(tick_s=tick_s, until=until_s)
    meta: dict[str, Any] = {
        "workload": str(workload),
        "jobs": len(loaded),
        "cluster": str(cluster),
        "nodes": len(nodes),
        "seed": seed,
        "tick_s": tick_s,
        "policies": [p.name for p in chosen],
    }
    results: list[Replay] = []
    with _progress_bar(output is OutputFormat.table, len(loaded)) as start:
        for policy in chosen:
            results.append(
                run_replay(nodes, loaded, policy, seed, config, progress=start(policy.name))
            )
    if output is OutputFormat.json:
        _print_report(results, meta, jobs)
    else:
        render(results, meta, console)
    if out is not None:
        written = write_report(out, results, meta)
        if output is OutputFormat.table:
            console.print(f"report written to {out}: {', '.join(written)}", highlight=False)


def _print_report(results: Sequence[Replay], meta: dict[str, Any], jobs: bool) -> None:
    """Print the JSON report, its per-job rows as they are built (a 100,000-job report's
    rows are never all in memory at once): the text of the whole document's json.dumps."""
    write_json(report_document(results, meta, jobs=jobs, stream=True), sys.stdout.write)
    sys.stdout.write("\n")


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
        try:
            gavel_spec = GavelWorkloadSpec(
                jobs=jobs,
                rate_per_h=4.0 if rate_per_h is None else rate_per_h,
                seed=seed,
                multi_gpu=multi_gpu,
                multi_priority=multi_priority,
                users=users or 0,
                gpus_per_node=max_gpus_per_task or (_gpus_per_node(nodes) if nodes else 8),
            )
        except ValueError as exc:
            fail(str(exc), 2)
        _write_synthetic(output_file, _gavel_workload(gavel_spec, gavel_throughputs), nodes)
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
    models = _mix(model_mix, "--model-mix", lambda n: "" if n == "any" else n)
    try:
        spec = SyntheticSpec(
            jobs=jobs,
            gpu_mix=_mix(gpu_mix, "--gpu-mix", int),
            model_mix=models,
            users=8 if users is None else users,
            queues=queues,
            priorities=_mix(priorities, "--priorities", int),
            gpus_per_node=max_gpus_per_task or (_gpus_per_node(nodes) if nodes else 8),
            model_gpus_per_node={} if max_gpus_per_task else gpus_per_node(nodes),
            durations=durations,
            seed=seed,
        )
        if load is not None:
            if not nodes:
                fail("--load needs --cluster", 2)
            spec = dataclasses.replace(spec, rate_per_h=rate_for_load(spec, nodes, load))
        elif rate_per_h is not None:
            spec = dataclasses.replace(spec, rate_per_h=rate_per_h)
    except ValueError as exc:
        fail(str(exc), 2)
    _write_synthetic(output_file, generate(spec), nodes, spec.rate_per_h)


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
