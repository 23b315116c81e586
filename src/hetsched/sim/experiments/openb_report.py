"""The openb grid: traces x policies x seeds on all cores, then a CSV, a report and plots.

Outputs in the chosen folder:

- ``results.csv``: one row per (trace, policy, seed, arrived %), arrived 0..130, with
  unallocated GPU %, fragmentation amount and ratio, pods arrived and failed, wall seconds;
- ``limits.csv`` (with the bound): one row per (trace, seed) at 100 % arrived,
  with the lower bound on unallocated GPU %, the offline packing's, and each offline
  heuristic's (:mod:`hetsched.sim.experiments.openb_limit`);
- ``report.md``: per trace, mean and sample sd over seeds at 100 % arrival per policy, with
  the reference simulator's published means beside them (and the offline packing and the
  lower bound, with the bound);
- ``unallocated_<trace>.png``: unallocated GPU % against arrived workload, per policy;
- ``unallocated_at_100.png``: bars per trace at 100 % arrival, error bars = sd over seeds.
"""

from __future__ import annotations

import csv
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from hetsched.sim.experiments.openb import POLICIES, OpenbResult, OpenbTrace, load_trace, run_openb
from hetsched.sim.experiments.openb_limit import HEURISTICS, LimitResult, run_limit

__all__ = [
    "LABELS",
    "REFERENCE_AT_100",
    "GridResult",
    "run_grid",
    "write_limits_csv",
    "write_outputs",
]

#: policy name -> the study's label
LABELS = {
    "random": "Random",
    "dotprod": "DotProd",
    "gpuclustering": "Clustering",
    "gpupacking": "Packing",
    "bestfit": "BestFit",
    "fgd": "FGD",
    "fgdplus": "FGD+",
    "best": "best",
}

#: unallocated GPU % at 100 % arrival, mean over seeds 42..51, from the reference
#: simulator's published results (Random, DotProd, Clustering, Packing, BestFit, FGD)
REFERENCE_AT_100: dict[str, tuple[float, ...]] = {
    "default": (13.70, 9.38, 8.35, 8.22, 7.14, 4.77),
    "cpu050": (10.98, 6.97, 6.48, 6.54, 6.44, 5.00),
    "cpu100": (12.56, 8.27, 7.58, 7.50, 6.74, 4.79),
    "cpu200": (16.97, 12.55, 10.33, 10.02, 7.85, 5.18),
    "gpushare40": (15.14, 10.70, 10.24, 10.23, 8.56, 6.04),
    "gpushare60": (17.19, 13.18, 13.10, 12.85, 10.94, 8.75),
    "gpushare100": (21.10, 18.02, 17.78, 17.87, 15.38, 13.36),
    "gpuspec10": (13.74, 9.83, 8.04, 7.76, 6.90, 5.34),
    "gpuspec20": (14.10, 11.71, 10.89, 10.72, 11.54, 5.34),
    "gpuspec33": (16.13, 20.18, 18.91, 17.78, 19.61, 12.16),
    "multigpu20": (13.08, 8.15, 6.66, 6.50, 6.27, 4.47),
    "multigpu30": (13.37, 6.89, 5.45, 5.30, 5.43, 3.64),
    "multigpu50": (18.72, 5.27, 4.31, 3.94, 4.38, 2.91),
}


def reference(trace: str, policy: str) -> float | None:
    row = REFERENCE_AT_100.get(trace)
    return None if row is None or policy not in POLICIES else row[POLICIES.index(policy)]


@lru_cache(maxsize=4)
def _trace(trace_dir: str, name: str) -> OpenbTrace:
    return load_trace(Path(trace_dir), name)


def _run(trace_dir: str, trace: str, policy: str, seed: int) -> OpenbResult:
    """One run in a worker process; traces are loaded once per process."""
    return run_openb(_trace(trace_dir, trace), policy, seed)


def _limit(trace_dir: str, trace: str, seed: int) -> LimitResult:
    """The offline packing and the bound of one (trace, seed) at 100 % arrived (the
    report's point), in a worker process."""
    return run_limit(_trace(trace_dir, trace), seed, points=(100,))


@dataclass(frozen=True, slots=True)
class GridResult:
    results: tuple[OpenbResult, ...]
    wall_s: float
    workers: int
    #: the offline packing and the bound per (trace, seed); empty without the bound
    limits: tuple[LimitResult, ...] = ()


def run_grid(
    trace_dir: Path,
    traces: Sequence[str],
    policies: Sequence[str],
    seeds: Sequence[int],
    workers: int | None = None,
    on_done: Callable[[OpenbResult | LimitResult], None] | None = None,
    bound: bool = False,
) -> GridResult:
    """Every (trace, policy, seed) on ``workers`` processes (default: all cores), and with
    ``bound`` the offline packing and the lower bound of every (trace, seed).

    Traces are checked in this process first, so a bad file fails before any run starts.
    """
    for trace in traces:
        _trace(str(trace_dir), trace)
    jobs = [(t, p, s) for t in traces for p in policies for s in seeds]
    limit_jobs = [(t, s) for t in traces for s in seeds] if bound else []
    workers = workers or os.cpu_count() or 1
    started = time.perf_counter()
    results: list[OpenbResult] = []
    limits: list[LimitResult] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures: list[Future[OpenbResult | LimitResult]] = [
            pool.submit(_limit, str(trace_dir), *job) for job in limit_jobs
        ]
        futures += [pool.submit(_run, str(trace_dir), *job) for job in jobs]
        for future in as_completed(futures):
            result = future.result()
            if isinstance(result, LimitResult):
                limits.append(result)
            else:
                results.append(result)
            if on_done is not None:
                on_done(result)
    order = {job: i for i, job in enumerate(jobs)}
    results.sort(key=lambda r: order[(r.trace, r.policy, r.seed)])
    limit_order = {job: i for i, job in enumerate(limit_jobs)}
    limits.sort(key=lambda r: limit_order[(r.trace, r.seed)])
    return GridResult(tuple(results), time.perf_counter() - started, workers, tuple(limits))


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else 0.0


def _traces(grid: GridResult) -> list[str]:
    """The grid's traces in run order: those of the policy runs, then any only limited."""
    return list(dict.fromkeys([*(r.trace for r in grid.results), *(r.trace for r in grid.limits)]))


def _groups(grid: GridResult) -> dict[tuple[str, str], list[OpenbResult]]:
    groups: dict[tuple[str, str], list[OpenbResult]] = {}
    for r in grid.results:
        groups.setdefault((r.trace, r.policy), []).append(r)
    return groups


def write_csv(grid: GridResult, path: Path) -> None:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "trace",
                "policy",
                "seed",
                "arrived_pct",
                "unallocated_gpu_pct",
                "frag_amount_pct",
                "frag_ratio_pct",
                "pods_arrived",
                "pods_failed",
                "wall_s",
            ]
        )
        for r in grid.results:
            for pct, (u, a, q) in enumerate(
                zip(r.unallocated_gpu_pct, r.frag_amount_pct, r.frag_ratio_pct, strict=True)
            ):
                writer.writerow(
                    [
                        r.trace,
                        r.policy,
                        r.seed,
                        pct,
                        f"{u:.4f}",
                        f"{a:.4f}",
                        f"{q:.4f}",
                        r.pods_arrived,
                        r.pods_failed,
                        f"{r.wall_s:.3f}",
                    ]
                )


def write_limits_csv(grid: GridResult, path: Path) -> None:
    heuristics = list(HEURISTICS)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "trace",
                "seed",
                "arrived_pct",
                "lower_bound_unallocated_gpu_pct",
                "offline_unallocated_gpu_pct",
                "offline_heuristic",
                *(f"{h}_unallocated_gpu_pct" for h in heuristics),
                "wall_s",
            ]
        )
        for r in grid.limits:
            for point, bound in r.bound_pct.items():
                writer.writerow(
                    [
                        r.trace,
                        r.seed,
                        point,
                        f"{bound:.4f}",
                        f"{r.offline_pct[point]:.4f}",
                        r.offline_by[point],
                        *(f"{r.heuristics_pct[point][h]:.4f}" for h in heuristics),
                        f"{r.wall_s:.3f}",
                    ]
                )


def _limit_rows(grid: GridResult, trace: str) -> list[str]:
    """The report's offline-packing and lower-bound rows of ``trace`` (at 100 %)."""
    runs = [r for r in grid.limits if r.trace == trace and 100 in r.bound_pct]
    if not runs:
        return []
    offline, offline_sd = _mean_sd([r.offline_pct[100] for r in runs])
    bound, bound_sd = _mean_sd([r.bound_pct[100] for r in runs])
    wins = Counter(r.offline_by[100] for r in runs).most_common()
    by = ", ".join(f"{name} {count}x" for name, count in wins)
    wall = statistics.fmean(r.wall_s for r in runs)
    return [
        f"| offline packing ({by}) | {offline:.2f} ± {offline_sd:.2f} | - | - | - | - | - "
        f"| {wall:.2f} |",
        f"| lower bound | {bound:.2f} ± {bound_sd:.2f} | - | - | - | - | - | - |",
    ]


def write_report(grid: GridResult, path: Path, command: str = "") -> None:
    groups = _groups(grid)
    traces = _traces(grid)
    policies = list(dict.fromkeys(r.policy for r in grid.results))
    seeds = sorted({r.seed for r in grid.results} | {r.seed for r in grid.limits})
    seen = f"Seeds: {seeds[0]}..{seeds[-1]} ({len(seeds)}). " if seeds else ""
    lines = [
        "# openb fragmentation experiment",
        "",
        f"Traces: {', '.join(traces)}. Policies: {', '.join(policies) or 'none'}. {seen}"
        f"{len(grid.results)} runs, {len(grid.limits)} limits on {grid.workers} processes "
        f"in {grid.wall_s:.1f} s.",
    ]
    if command:
        lines += ["", f"Command: `{command}`"]
    lines += [
        "",
        "Unallocated GPU % at 100 % arrived workload: mean ± sample sd over seeds; the",
        "reference column is the published mean of the original simulator (seeds 42..51).",
    ]
    if grid.limits:
        lines += [
            "The offline packing (the best of its heuristics; how often each won) and the",
            "lower bound are computed for the same arrival sequences",
            "(hetsched.sim.experiments.openb_limit): no placement of the arrived pods leaves",
            "fewer GPUs unallocated than the bound.",
        ]
    for trace in traces:
        lines += [
            "",
            f"## {trace}",
            "",
            "| policy | unallocated GPU % | reference | diff | frag amount % | frag ratio %"
            " | failed pods | s per run |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for policy in policies:
            runs = groups.get((trace, policy), [])
            if not runs:
                continue
            mean, sd = _mean_sd([r.unallocated_gpu_pct[100] for r in runs])
            ref = reference(trace, policy)
            ref_cell = f"{ref:.2f}" if ref is not None else "-"
            diff_cell = f"{mean - ref:+.2f}" if ref is not None else "-"
            amount = statistics.fmean(r.frag_amount_pct[100] for r in runs)
            ratio = statistics.fmean(r.frag_ratio_pct[100] for r in runs)
            failed = statistics.fmean(r.pods_failed for r in runs)
            wall = statistics.fmean(r.wall_s for r in runs)
            lines.append(
                f"| {LABELS.get(policy, policy)} | {mean:.2f} ± {sd:.2f} | {ref_cell} "
                f"| {diff_cell} | {amount:.2f} | {ratio:.1f} | {failed:.0f} | {wall:.2f} |"
            )
        lines += _limit_rows(grid, trace)
        empty = [r.frag_ratio_pct[0] for (t, _), rs in groups.items() if t == trace for r in rs]
        if empty:
            lines += ["", f"Empty-cluster fragmentation ratio: {statistics.fmean(empty):.2f} %."]
        lines += ["", f"![unallocated GPU, {trace}](unallocated_{trace}.png)"]
    lines += ["", "![unallocated GPU at 100 % arrival](unallocated_at_100.png)", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def _limit_means(grid: GridResult, trace: str) -> dict[str, dict[int, list[float]]]:
    """Offline and bound values of ``trace`` per arrival point, over seeds."""
    out: dict[str, dict[int, list[float]]] = {"offline packing": {}, "lower bound": {}}
    for r in grid.limits:
        if r.trace == trace:
            for point in r.bound_pct:
                out["offline packing"].setdefault(point, []).append(r.offline_pct[point])
                out["lower bound"].setdefault(point, []).append(r.bound_pct[point])
    return out


def _curve_plot(grid: GridResult, trace: str, policies: Sequence[str], path: Path) -> None:
    import matplotlib.pyplot as plt

    groups = _groups(grid)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy in policies:
        runs = groups.get((trace, policy), [])
        if not runs:
            continue
        curve = [
            statistics.fmean(r.unallocated_gpu_pct[p] for r in runs)
            for p in range(len(runs[0].unallocated_gpu_pct))
        ]
        ax.plot(range(len(curve)), curve, label=LABELS.get(policy, policy))
    for (label, points), marker in zip(_limit_means(grid, trace).items(), "sv", strict=True):
        if points:
            xs = sorted(points)
            ys = [statistics.fmean(points[x]) for x in xs]
            ax.plot(xs, ys, marker, color="black", label=label, linestyle="none")
    ax.set_xlabel("arrived workload (% of GPU capacity)")
    ax.set_ylabel("unallocated GPU (%)")
    ax.set_xlim(50, 132)
    ax.set_ylim(0, 55)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(f"openb {trace}: unallocated GPU vs arrived workload")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bar_plot(grid: GridResult, traces: Sequence[str], policies: Sequence[str], path: Path) -> None:
    import matplotlib.pyplot as plt

    groups = _groups(grid)
    series: list[tuple[str, list[float], list[float]]] = []
    for policy in policies:
        stats = [
            _mean_sd([r.unallocated_gpu_pct[100] for r in groups.get((t, policy), [])] or [0])
            for t in traces
        ]
        series.append((LABELS.get(policy, policy), [m for m, _ in stats], [d for _, d in stats]))
    if grid.limits:
        for label in ("offline packing", "lower bound"):
            stats = [_mean_sd(_limit_means(grid, t)[label].get(100) or [0]) for t in traces]
            series.append((label, [m for m, _ in stats], [d for _, d in stats]))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(traces) + 2), 4.5))
    width = 0.8 / max(len(series), 1)
    for i, (label, means, sds) in enumerate(series):
        xs = [t + (i - (len(series) - 1) / 2) * width for t in range(len(traces))]
        ax.bar(xs, means, width, yerr=sds, capsize=2, label=label)
    ax.set_xticks(range(len(traces)), traces, rotation=30, ha="right")
    ax.set_ylabel("unallocated GPU (%) at 100 % arrival")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(ncol=3, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(grid: GridResult, folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    traces = _traces(grid)
    policies = list(dict.fromkeys(r.policy for r in grid.results))
    written: list[Path] = []
    for trace in traces:
        path = folder / f"unallocated_{trace}.png"
        _curve_plot(grid, trace, policies, path)
        written.append(path)
    path = folder / "unallocated_at_100.png"
    _bar_plot(grid, traces, policies, path)
    written.append(path)
    return written


def write_outputs(grid: GridResult, folder: Path, command: str = "") -> list[Path]:
    """results.csv, report.md and the plots in ``folder`` (created if needed)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(grid, folder / "results.csv")
    written = [folder / "results.csv"]
    if grid.limits:
        write_limits_csv(grid, folder / "limits.csv")
        written.append(folder / "limits.csv")
    write_report(grid, folder / "report.md", command)
    return [*written, folder / "report.md", *write_plots(grid, folder)]
