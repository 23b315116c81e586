"""``hetsched sim replay`` and ``hetsched sim synth``: replay workloads, make synthetic ones."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hetsched.cli.json_stream import write_json
from hetsched.cli.output import OutputFormat, console, fail
from hetsched.cli.sim_history import HistoryReport, load_inputs, replay_recorded
from hetsched.cli.sim_rounds import replay_rounds
from hetsched.framework.profile import ProfileError
from hetsched.framework.speeds import load_speed_table
from hetsched.model.device import Node
from hetsched.model.specs import SpecError, load_cluster, parse_duration
from hetsched.sim.engine import EngineConfig
from hetsched.sim.gavel import GavelOptions, load_throughputs, read_gavel
from hetsched.sim.replay import (
    Policy,
    Replay,
    available_policies,
    policy_from_name,
    policy_from_profile,
)
from hetsched.sim.replay import replay as run_replay
from hetsched.sim.replay_report import render, report_document, write_report
from hetsched.sim.workload import (
    Workload,
    WorkloadError,
    read_workload,
)
from hetsched.sim.workload_check import check_against_cluster

__all__ = ["gpus_per_node_of", "load_any_workload", "replay"]

_err = Console(stderr=True)


def gpus_per_node_of(nodes: Sequence[Node]) -> int:
    """GPUs of the largest node (8 without nodes): the largest task of a generated job."""
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
    options = GavelOptions(reference=reference, gpus_per_node=gpus_per_node_of(nodes))
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
_ReplayCluster = Annotated[Path | None, typer.Option(help="Cluster YAML: nodes and their devices.")]
_ReplayWorkload = Annotated[
    Path | None,
    typer.Option(
        help="Workload: a neutral-format CSV, or Gavel .trace files or folders (comma-separated)."
    ),
]
_ReplayHistory = Annotated[
    Path | None,
    typer.Option(
        help="A history of hetsched up (hetsched history export) instead of --cluster and "
        "--workload: replayed under the profile it recorded (or --profile) and those of "
        "--policies and --compare-profiles, beside what happened, with the reproduction "
        "(same placements and start order, differences explained)."
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
    cluster: _ReplayCluster = None,
    workload: _ReplayWorkload = None,
    history: _ReplayHistory = None,
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

    With --history, what hetsched up did (hetsched history export) is replayed instead.
    """
    tick_s, until_s = _times(fmt, tick, until)
    compared, gavel = (policies, compare_profiles), (gavel_throughputs, gavel_reference)
    config = EngineConfig(tick_s=tick_s, until=until_s)
    if history is not None:
        given = {"--cluster": cluster, "--workload": workload, "--rounds": rounds}
        _history_report(history, given, profile, compared, config, output).emit(output, jobs, out)
        return
    if cluster is None or workload is None:
        fail("--cluster and --workload are required (or --history FILE)", 2)
    nodes, chosen, loaded = _inputs(cluster, workload, profile, compared, fmt, limit, gavel)
    if rounds is not None:
        _in_rounds(nodes, loaded, chosen, profile, (rounds, alphas, round_s), seed, output, out)
        return
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
    _emit(results, meta, output, jobs, out)


def _history_report(
    history: Path,
    given: Mapping[str, object],
    profile: Path | None,
    compared: tuple[str | None, str | None],
    config: EngineConfig,
    output: OutputFormat,
) -> HistoryReport:
    """``--history``: the recorded profile (or ``--profile``) first, then those compared."""
    clash = [flag for flag, value in given.items() if value is not None]
    if clash:
        fail(f"--history: not with {', '.join(clash)} (the history holds both)", 2)
    try:
        chosen = [policy_from_profile(profile)] if profile is not None else []
        chosen += _policies(compared[0], compared[1], None) if any(compared) else []
    except (ProfileError, ValueError, OSError) as exc:
        fail(str(exc), 2)
    document, inputs = load_inputs(history)
    with _progress_bar(output is OutputFormat.table, len(inputs.workload)) as start:
        return replay_recorded((history, document, inputs), chosen, profile is None, config, start)


def _in_rounds(
    nodes: list[Node],
    loaded: Workload,
    chosen: list[Policy],
    profile: Path | None,
    rounds: tuple[str, str, float],
    seed: int,
    output: OutputFormat,
    out: Path | None,
) -> None:
    """``--rounds``: the workload in rounds (``rounds``: the policies, knob values and
    round length), with the speeds of ``--profile``."""
    policies, alphas, round_s = rounds
    if not round_s > 0:
        fail(f"--round: expected seconds > 0, got {round_s}", 2)
    try:
        table = load_speed_table(chosen[0].profile.speeds, profile.parent) if profile else None
    except (ProfileError, ValueError, OSError) as exc:
        fail(str(exc), 2)
    replay_rounds(nodes, loaded, table, policies, alphas, round_s, seed, output, out)


def _emit(
    results: list[Replay], meta: dict[str, Any], output: OutputFormat, jobs: bool, out: Path | None
) -> None:
    """Print the report (a table, or JSON with or without per-job rows) and write the
    ``--out`` folder."""
    if output is OutputFormat.json:
        _print_report(results, meta, jobs)
    else:
        render(results, meta, console)
    if out is not None:
        written = write_report(out, results, meta)
        if output is OutputFormat.table:
            console.print(f"report written to {out}: {', '.join(written)}", highlight=False)


def _times(fmt: str, tick: str, until: str | None) -> tuple[float, float | None]:
    """``--tick`` and ``--until`` in seconds (and ``--format`` checked); exits on a bad one."""
    if fmt not in ("auto", "csv", "gavel"):
        fail(f"--format: expected auto, csv or gavel, got {fmt!r}", 2)
    try:
        return parse_duration(tick), None if until is None else parse_duration(until)
    except ValueError as exc:
        fail(f"--tick/--until: {exc}", 2)


def _inputs(
    cluster: Path,
    workload: Path,
    profile: Path | None,
    compared: tuple[str | None, str | None],
    fmt: str,
    limit: int | None,
    gavel: tuple[Path | None, str],
) -> tuple[list[Node], list[Policy], Workload]:
    """The cluster, the policies (``compared``: ``--policies`` and ``--compare-profiles``)
    and the workload (its first ``limit`` jobs; ``gavel``: the throughputs and reference
    type of a Gavel trace), checked against each other; exits naming the first problems."""
    try:
        nodes = load_cluster(cluster)
        chosen = _policies(compared[0], compared[1], profile)
        loaded = load_any_workload(workload, fmt, nodes, gavel[0], gavel[1])
    except (SpecError, ProfileError, WorkloadError, ValueError, OSError) as exc:
        fail(str(exc), 2)
    if limit is not None:
        loaded = Workload(loaded.jobs[: max(limit, 0)], loaded.source)
    problems = check_against_cluster(loaded, nodes)
    if problems:
        fail("\n".join(problems), 2)
    return nodes, chosen, loaded


def _print_report(results: Sequence[Replay], meta: dict[str, Any], jobs: bool) -> None:
    """Print the JSON report, its per-job rows as they are built (a 100,000-job report's
    rows are never all in memory at once): the text of the whole document's json.dumps."""
    write_json(report_document(results, meta, jobs=jobs, stream=True), sys.stdout.write)
    sys.stdout.write("\n")
