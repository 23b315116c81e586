"""``hetsched sim openb``: the FGD fragmentation experiment on the Alibaba openb trace.

One run (``--trace``, ``--policy``, ``--seed``) prints its summary; a grid (``--traces``,
``--policies``, ``--seeds`` with ``--out``) runs on all cores with a progress bar and writes
results.csv, report.md and plots.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hetsched.cli.output import OutputFormat, console, err_console, fail, print_json
from hetsched.cli.progress import steps
from hetsched.sim.alibaba import TraceError
from hetsched.sim.experiments.openb import (
    ALL_POLICIES,
    POLICIES,
    REPORT_POINTS,
    TUNE_RATIO,
    OpenbResult,
    load_trace,
    run_openb,
)
from hetsched.sim.experiments.openb_defrag import MAX_WORK, WORK_PER_ARRIVAL, DefragOption
from hetsched.sim.experiments.openb_limit import LimitResult, limit_steps, run_limit

__all__ = ["openb", "parse_seeds"]


def parse_seeds(text: str) -> list[int]:
    """``42-51``, ``42,45,50`` or a mix (``1-3,7``)."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        low, sep, high = part.partition("-")
        try:
            seeds += list(range(int(low), int(high) + 1)) if sep else [int(part)]
        except ValueError:
            raise typer.BadParameter(f"not a seed or range: {part!r}") from None
    if not seeds:
        raise typer.BadParameter("no seeds")
    return seeds


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _check_policies(policies: list[str]) -> None:
    unknown = [p for p in policies if p not in ALL_POLICIES]
    if unknown:
        fail(f"unknown policy {', '.join(unknown)} (known: {', '.join(ALL_POLICIES)})", 2)


#: the options of ``openb``
_OpenbTraceDir = Annotated[
    Path, typer.Option(help="Folder with the openb node and pod lists (CSV).")
]
_OpenbTrace = Annotated[str, typer.Option(help="Pod list of one run: default, cpu050, ...")]
_OpenbPolicy = Annotated[str, typer.Option(help=f"Policy of one run: {', '.join(ALL_POLICIES)}.")]
_OpenbSeed = Annotated[int, typer.Option(help="Seed of one run.")]
_OpenbTraces = Annotated[str | None, typer.Option(help="Grid: comma-separated pod lists.")]
_OpenbPolicies = Annotated[
    str | None,
    typer.Option(help="Grid: comma-separated policies (default: the study's six and best)."),
]
_OpenbSeeds = Annotated[str | None, typer.Option(help="Grid: seeds, e.g. 42-51.")]
_OpenbOut = Annotated[
    Path | None, typer.Option(help="Grid: folder for results.csv, report.md and plots.")
]
_OpenbWorkers = Annotated[
    int | None, typer.Option(help="Grid: worker processes (default: all cores).")
]
_OpenbLimit = Annotated[
    int | None, typer.Option(help="Replay only the first N pods (quick checks).", min=1)
]
_OpenbBound = Annotated[
    bool,
    typer.Option(
        "--bound",
        help="Also the limit of each (trace, seed): the offline packing and the lower "
        "bound on unallocated GPU % (an LP solved by HiGHS), at 100 and 130 % arrived for "
        "one run, at 100 % in a grid.",
    ),
]
_OpenbDefrag = Annotated[
    float | None,
    typer.Option(
        "--defrag",
        help="Also a run with defragmentation: a pod that fits nowhere may move placed pods "
        "(at most this fraction of them per arrival, e.g. 0.01: 1 %) to fit; reports "
        "unallocated GPU %, pods moved and run time with and without (one run only). "
        f"Planning is bounded: {WORK_PER_ARRIVAL:g} work units (a node ranking or a policy "
        f"call) per arrival on average, {MAX_WORK} for one arrival.",
        min=0.0001,
        max=1.0,
    ),
]
_OpenbOutput = Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")]


def openb(
    trace_dir: _OpenbTraceDir,
    trace: _OpenbTrace = "default",
    policy: _OpenbPolicy = "fgd",
    seed: _OpenbSeed = 42,
    traces: _OpenbTraces = None,
    policies: _OpenbPolicies = None,
    seeds: _OpenbSeeds = None,
    out: _OpenbOut = None,
    workers: _OpenbWorkers = None,
    limit: _OpenbLimit = None,
    bound: _OpenbBound = False,
    defrag: _OpenbDefrag = None,
    output: _OpenbOutput = OutputFormat.table,
) -> None:
    """Replay the openb trace without departures and measure GPU fragmentation.

    Per run: the target workload from the untuned pod list (the 95 % rule), the pods
    shuffled with the seed and resampled to 130 % of GPU capacity, placed one by one by
    the policy (pods that fit nowhere are dropped). Reports unallocated GPU %, and the
    fragmentation amount and ratio, at 50/80/90/100/130 % arrived workload.

    With --bound, also how well any placement could do on the same arrivals: an offline
    packing that sees all arrived pods at once, and a lower bound no placement, online or
    offline, can go below (docs/fragmentation.md, "The limit").
    """
    grid = traces is not None or policies is not None or seeds is not None or out is not None
    if grid:
        if out is None:
            fail("a grid (--traces, --policies or --seeds) needs --out FOLDER", 2)
        if limit is not None:
            fail("--limit is for single runs", 2)
        if defrag is not None:
            fail("--defrag is for single runs", 2)
        _grid(
            trace_dir,
            _names(traces) if traces else [trace],
            _names(policies) if policies else [*POLICIES, "best"],
            parse_seeds(seeds) if seeds else [seed],
            out,
            workers,
            bound,
        )
        return
    _single(trace_dir, trace, policy, seed, limit, bound, output, defrag)


def _single(
    trace_dir: Path,
    trace: str,
    policy: str,
    seed: int,
    limit: int | None,
    bound: bool,
    output: OutputFormat,
    defrag: float | None = None,
) -> None:
    _check_policies([policy])
    if bound and limit is not None:
        fail("--bound needs the whole run (no --limit)", 2)
    try:
        loaded = load_trace(trace_dir, trace)
    except TraceError as exc:
        fail(str(exc), 2)
    quiet = output is OutputFormat.json
    points = round(TUNE_RATIO * 100) + 1  # a step per percent of arrived workload
    with steps(f"replaying openb {trace} with {policy}", points, quiet) as step:
        result = run_openb(loaded, policy, seed, limit=limit, progress=step)
    summary = result.summary()
    if not quiet:
        _print_run(result)  # before the bound, which takes a minute
    moved = None
    if defrag is not None:
        option = DefragOption(max_moved_fraction=defrag)
        with steps("the run with defragmentation", points, quiet) as step:
            moved = run_openb(loaded, policy, seed, limit=limit, defrag=option, progress=step)
        summary["defrag"] = {**moved.summary(), **moved.extra, "max_moved_fraction": defrag}
    limits = None
    if bound:
        with steps("the limit (an LP per point)", limit_steps(), quiet) as step:
            limits = run_limit(loaded, seed, step=step)
        summary["bound"] = limits.summary()
    if quiet:
        print_json(summary)
        return
    if limits is not None:
        _print_limits(result, limits)
    if moved is not None:
        _print_defrag(result, moved)


def _print_run(result: OpenbResult) -> None:
    table = Table(
        title=f"openb {result.trace}, {result.policy}, seed {result.seed}", title_justify="left"
    )
    for column in ("arrived %", "unallocated GPU %", "frag amount %", "frag ratio %"):
        table.add_column(column, justify="right")
    for p in REPORT_POINTS:
        table.add_row(
            str(p),
            f"{result.unallocated_gpu_pct[p]:.2f}",
            f"{result.frag_amount_pct[p]:.2f}",
            f"{result.frag_ratio_pct[p]:.1f}",
        )
    console.print(table)
    console.print(
        f"{result.pods_arrived} pods arrived, {result.pods_failed} failed, {result.wall_s:.2f} s",
        highlight=False,
    )


def _print_limits(result: OpenbResult, limits: LimitResult) -> None:
    limit_table = Table(title="the limit: unallocated GPU %", title_justify="left")
    for column in ("arrived %", result.policy, "offline packing", "lower bound"):
        limit_table.add_column(column, justify="right")
    for p, bound in limits.bound_pct.items():
        limit_table.add_row(
            str(p),
            f"{result.unallocated_gpu_pct[p]:.2f}",
            f"{limits.offline_pct[p]:.2f} ({limits.offline_by[p]})",
            f"{bound:.2f}",
        )
    console.print(limit_table)


def _print_defrag(result: OpenbResult, moved: OpenbResult) -> None:
    table = Table(title="unallocated GPU %, with defragmentation", title_justify="left")
    for column in ("arrived %", result.policy, f"{result.policy} + defrag"):
        table.add_column(column, justify="right")
    for p in REPORT_POINTS:
        table.add_row(
            str(p), f"{result.unallocated_gpu_pct[p]:.2f}", f"{moved.unallocated_gpu_pct[p]:.2f}"
        )
    console.print(table)
    console.print(
        f"defragmentation moved {moved.extra['moved']} pods for {moved.extra['rescued']} "
        f"arrivals; {moved.pods_failed} pods failed (without: {result.pods_failed}); "
        f"{moved.wall_s:.2f} s (without: {result.wall_s:.2f} s); planning spent "
        f"{moved.extra['work_spent']} work units, at most {moved.extra['most_work_per_arrival']} "
        f"for one arrival, and left {moved.extra['arrivals_not_planned']} arrivals unplanned",
        highlight=False,
    )


def _grid(
    trace_dir: Path,
    traces: list[str],
    policies: list[str],
    seeds: list[int],
    out: Path,
    workers: int | None,
    bound: bool,
) -> None:
    from hetsched.sim.experiments.openb_report import run_grid, write_outputs

    _check_policies(policies)
    total = len(traces) * len(policies) * len(seeds) + (len(traces) * len(seeds) if bound else 0)
    progress = Progress(
        TextColumn("[bold]openb[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=err_console,
        transient=True,
    )
    with progress:
        task = progress.add_task("", total=total)

        def done(result: OpenbResult | LimitResult) -> None:
            if isinstance(result, LimitResult):
                text = f"{result.trace} {result.seed}: bound {result.bound_pct[100]:.2f} %"
            else:
                text = (
                    f"{result.trace} {result.policy} {result.seed}: "
                    f"{result.unallocated_gpu_pct[100]:.2f} % unallocated"
                )
            progress.update(task, advance=1, description=text)

        try:
            result = run_grid(trace_dir, traces, policies, seeds, workers, done, bound)
        except TraceError as exc:
            progress.stop()
            fail(str(exc), 2)
    command = "hetsched " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    paths = write_outputs(result, out, command)
    console.print(
        f"{total} runs in {result.wall_s:.1f} s on {result.workers} processes; wrote "
        + ", ".join(str(p) for p in paths),
        highlight=False,
    )
