"""``hetsched sim gavel``: one point of Gavel's continuous experiment, run in rounds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hetsched.cli.output import OutputFormat, console, err_console, fail, print_json
from hetsched.sim.experiments.gavel import (
    GavelPoint,
    gavel_policy_names,
    parse_cluster,
    parse_window,
    point_document,
)
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, load_throughputs
from hetsched.sim.gavel_synth import JOB_TABLES

__all__ = ["cell", "gavel"]

_Policy = Annotated[
    str,
    typer.Option(
        help="Round policy: las, ftf, max-throughput, min-makespan, fifo, fair-throughput, "
        "fair-srtf, fair-catchup (LAS floors, the spare capacity to the jobs furthest behind "
        "their finish-time-fair pace; solved on every change); agnostic-P is P blind to "
        "heterogeneity (agnostic-las: Gavel's "
        "heterogeneity-agnostic LAS); "
        "packed-P runs P with space sharing (waiting jobs share a running job's GPUs at "
        "Gavel's co-located throughputs when the pair does more work: packed-las)."
    ),
]
_Rate = Annotated[float, typer.Option(help="Input job rate in jobs per hour (Poisson).")]
_Multi = Annotated[
    bool,
    typer.Option(
        "--multi-gpu/--single-gpu", help="Gavel's multi-GPU jobs (1/2/4/8 GPUs) or 1-GPU only."
    ),
]
_Seed = Annotated[int, typer.Option(help="Workload seed (Gavel's --seeds).")]
_Window = Annotated[
    str, typer.Option(help="Jobs measured, START:END indices in arrival order (Gavel: -s/-e).")
]
_Cluster = Annotated[str, typer.Option(help="GPUs of each type, V100:P100:K80.")]
_Round = Annotated[float, typer.Option("--round", help="Round length in seconds.")]
_Alpha = Annotated[
    float,
    typer.Option(
        help="fair-throughput's and fair-srtf's knob: 0 max-min fairness (las) .. 1 pure "
        "throughput (fair-srtf: shortest remaining time)."
    ),
]
_Floor = Annotated[
    float,
    typer.Option(
        help="fair-catchup's knob: the fraction of its las share every job keeps (1: all "
        "of it, the fairest; lower: more of the devices go by need and speed, faster and "
        "less fair; docs/heterogeneity.md has the frontier)."
    ),
]
_Until = Annotated[
    float | None,
    typer.Option("--until", help="Stop after this many virtual hours (saturated rates)."),
]
_Throughputs = Annotated[
    Path | None,
    typer.Option(
        help="Gavel simulation_throughputs.json (default: the bundled copy); packed-P policies "
        "read its co-located throughputs too."
    ),
]
_OnChange = Annotated[
    bool | None,
    typer.Option(
        "--solve-on-change/--solve-every-reset",
        help="Solve whenever jobs arrive or finish, or by Gavel's rule (at most once per "
        "1,920 s of shares). Default: the policy's own rule (fair-catchup solves on "
        "change, Gavel's policies by Gavel's rule).",
        show_default=False,
    ),
]
_Central = Annotated[
    bool,
    typer.Option(
        "--gavel-solutions/--efficient-solutions",
        help="Allocations as Gavel's interior-point solver finds them (the default: the "
        "reproduction), or hetsched's (an optimal vertex, then what is left spent on "
        "effective throughput).",
    ),
]
_JobTable = Annotated[
    str,
    typer.Option(
        "--job-table",
        help="Order of Gavel's job table the stream draws from: osdi20 (its published "
        "runs, the default) or artifact (its later artifact: another multi-GPU stream for "
        "the same seed).",
    ),
]
_Output = Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")]


def _problems(
    policy: str, rate: float, round_s: float, knobs: tuple[float, float], until_h: float | None
) -> list[str]:
    """What is wrong with the scalar options, one line each, naming the flag."""
    problems = []
    if policy not in gavel_policy_names():
        known = ", ".join(gavel_policy_names())
        problems.append(f"--policy: unknown {policy!r} (known: {known})")
    if not round_s > 0:
        problems.append(f"--round: expected seconds > 0, got {round_s}")
    alpha, floor = knobs
    if not 0.0 <= alpha <= 1.0:
        problems.append(f"--alpha: expected 0..1, got {alpha}")
    if not 0.0 <= floor <= 1.0:
        problems.append(f"--catchup-floor: expected 0..1, got {floor}")
    if not rate > 0:
        problems.append(f"--rate: expected jobs/hour > 0, got {rate}")
    if until_h is not None and not until_h > 0:
        problems.append(f"--until: expected hours > 0, got {until_h}")
    return problems


@contextmanager
def _bar(enabled: bool, total: int) -> Iterator[Callable[[int, int, float], None] | None]:
    if not enabled:
        yield None
        return
    bar = Progress(
        TextColumn("measured jobs done"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("t={task.fields[vt]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
    with bar:
        task = bar.add_task("gavel", total=total, vt="0h")

        def update(done: int, _total: int, now: float) -> None:
            bar.update(task, completed=done, vt=f"{now / 3600:.0f}h")

        yield update


def gavel(
    policy: _Policy = "las",
    rate: _Rate = 4.0,
    multi_gpu: _Multi = False,
    seed: _Seed = 0,
    window: _Window = "4000:5000",
    cluster: _Cluster = "36:36:36",
    round_s: _Round = 360.0,
    alpha: _Alpha = 0.5,
    catchup_floor: _Floor = 1.0,
    until_h: _Until = None,
    throughputs: _Throughputs = None,
    solve_on_change: _OnChange = None,
    central: _Central = True,
    job_table: _JobTable = "osdi20",
    output: _Output = OutputFormat.table,
) -> None:
    """Run one point of Gavel's continuous experiment (OSDI'20, Figs. 8-10).

    Draws Gavel's job stream for the rate and seed, runs it in rounds under the policy on
    a V100/P100/K80 cluster and reports, over the window's jobs: mean JCT (hours),
    utilization, Jain's index over users of isolated/actual JCT, and the worst finish-time
    fairness. The run ends when every measured job finished (or at --until: the point is
    then marked incomplete).
    """
    span = _checked(
        policy, rate, round_s, (alpha, catchup_floor), until_h, window, cluster, job_table
    )
    try:
        point = GavelPoint(
            policy,
            rate,
            seed,
            multi_gpu,
            span[0],
            span[1],
            round_s,
            alpha,
            None if until_h is None else until_h * 3600.0,
            solve_on_change,
            None if throughputs is None else str(throughputs),
            central,
            catchup_floor,
            job_table,
        )
        table = load_throughputs(throughputs or BUNDLED_THROUGHPUTS)
    except (ValueError, OSError) as exc:
        fail(str(exc), 2)
    started = time.perf_counter()
    with _bar(output is OutputFormat.table, point.window[1] - point.window[0]) as progress:
        try:
            result = point.run(table, progress)
        except (ValueError, OSError) as exc:
            fail(str(exc), 2)
    document = point_document(point, result, time.perf_counter() - started)
    if output is OutputFormat.json:
        print_json(document)
        return
    _print_point(document, f"Gavel point: {policy} at {rate:g} jobs/h, seed {seed}")


def _print_point(document: dict[str, object], title: str) -> None:
    grid = Table(title=title)
    grid.add_column("measure")
    grid.add_column("value", justify="right")
    for key, value in document.items():
        grid.add_row(key, cell(key, value))
    console.print(grid)


def cell(key: str, value: object) -> str:
    """A value of the point's document as a person reads it: ``v100 36, p100 36`` for a
    mapping, ``4000:5000`` for the window, ``-`` for none, ``yes``/``no``; never a repr."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k} {cell(key, v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return (":" if key == "window" else ", ").join(cell(key, v) for v in value)
    if isinstance(value, float):
        return f"{value:.3g}" if key.startswith("utilization") else f"{value:g}"
    return str(value)


def _checked(
    policy: str,
    rate: float,
    round_s: float,
    knobs: tuple[float, float],
    until_h: float | None,
    window: str,
    cluster: str,
    job_table: str = "osdi20",
) -> tuple[tuple[int, int], tuple[int, ...]]:
    """The window and the cluster's counts; exits with every problem of the options (one
    line each, naming the flag) when there is any."""
    problems = _problems(policy, rate, round_s, knobs, until_h)
    if job_table not in JOB_TABLES:
        problems.append(f"--job-table: expected one of {', '.join(JOB_TABLES)}, got {job_table!r}")
    try:
        span = parse_window(window)
    except ValueError as exc:
        problems.append(f"--{exc}")
        span = (0, 1)
    try:
        counts = parse_cluster(cluster)
    except ValueError as exc:
        problems.append(f"--{exc}")
        counts = (1, 1, 1)
    if problems:
        fail("\n".join(problems), 2)
    return span, counts
