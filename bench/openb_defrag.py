"""Benchmark: the openb experiment with and without defragmentation, side by side.

    .venv/bin/python bench/openb_defrag.py                        # default trace, FGD, 42..51
    .venv/bin/python bench/openb_defrag.py --traces all --workers 2 --out bench/results/defrag
    .venv/bin/python bench/openb_defrag.py --traces default --seeds 1-4 --reference

For every (trace, seed) one worker runs the policy without and then with defragmentation
(``--fraction`` of the placed pods per arrival at most, the planner's work budget
``--work`` units per arrival and ``--max-work`` per arrival), measuring each run's CPU time
in that process; with ``--reference`` also with the unbudgeted planner, the gain the budget
is measured against; with ``--bound``, the LP lower bound on unallocated GPU % at 100 %
arrival (no packing, with or without moves, can go below it). Prints per trace the means
and writes results.csv and report.md to ``--out``. Results are not tests.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import platform
import statistics
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hetsched.sim.experiments.openb import (
    OpenbTrace,
    load_trace,
    run_openb,
    tune_workload,
)
from hetsched.sim.experiments.openb_bound import allocation_bound, arrived_prefix
from hetsched.sim.experiments.openb_defrag import MAX_WORK, WORK_PER_ARRIVAL, DefragOption
from hetsched.sim.experiments.openb_report import REFERENCE_AT_100

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023"
_TRACES: dict[str, OpenbTrace] = {}


def _trace(trace_dir: Path, name: str) -> OpenbTrace:
    if name not in _TRACES:
        _TRACES[name] = load_trace(trace_dir, name)
    return _TRACES[name]


def one(
    trace_dir: Path,
    name: str,
    policy: str,
    seed: int,
    option: DefragOption,
    reference: bool,
    bound: bool,
) -> dict[str, Any]:
    """One (trace, seed): the run without, the run with defragmentation (and with the
    unbudgeted planner), and the bound."""
    import numpy as np

    trace = _trace(trace_dir, name)
    row: dict[str, Any] = {"trace": name, "policy": policy, "seed": seed}
    runs: list[tuple[str, DefragOption | None]] = [("plain", None), ("defrag", option)]
    if reference:
        runs.append(("reference", dataclasses.replace(option, work_per_arrival=None)))
    for label, chosen in runs:
        started = time.process_time()
        result = run_openb(trace, policy, seed, defrag=chosen)
        row[f"{label}_cpu_s"] = time.process_time() - started
        row[f"{label}_unalloc_100"] = result.unallocated_gpu_pct[100]
        row[f"{label}_unalloc_130"] = result.unallocated_gpu_pct[130]
        row[f"{label}_failed"] = result.pods_failed
        if chosen is not None:
            row[f"{label}_moved"] = result.extra["moved"]
            row[f"{label}_rescued"] = result.extra["rescued"]
            row[f"{label}_work"] = result.extra["work_spent"]
    if bound:
        capacity = trace.gpu_capacity_milli
        pods = tune_workload(trace.pods, capacity, np.random.default_rng(seed), 1.3)
        prefix = pods[: arrived_prefix(pods, capacity, 100)]
        upper = allocation_bound(trace.nodes, prefix).upper_milli
        row["bound_100"] = 100.0 - 100.0 * upper / capacity
    return row


def _seeds(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.fmean(float(r[key]) for r in rows)


def _spread(rows: list[dict[str, Any]], key: str) -> str:
    """Mean ± sample sd over the rows."""
    values = [float(r[key]) for r in rows]
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.2f} ± {sd:.2f}"


def _ratio(rows: list[dict[str, Any]], label: str) -> list[float]:
    return [float(r[f"{label}_cpu_s"]) / float(r["plain_cpu_s"]) for r in rows]


def _cells(mine: list[dict[str, Any]], reference: bool, bound: bool) -> list[str]:
    gain = _mean(mine, "plain_unalloc_100") - _mean(mine, "defrag_unalloc_100")
    ratios = _ratio(mine, "defrag")
    cells = [
        _spread(mine, "plain_unalloc_100"),
        f"**{_spread(mine, 'defrag_unalloc_100')}**",
        f"{gain:.2f}",
    ]
    if reference:
        full = _mean(mine, "plain_unalloc_100") - _mean(mine, "reference_unalloc_100")
        kept = f"{100 * gain / full:.0f} %" if full > 0 else "–"
        cells += [f"{full:.2f}", kept, f"{statistics.median(_ratio(mine, 'reference')):.2f}"]
    cells += [
        f"{_mean(mine, 'defrag_moved'):.1f}",
        f"{_mean(mine, 'defrag_rescued'):.1f}",
        f"{statistics.median(float(r['plain_cpu_s']) for r in mine):.1f}",
        f"{statistics.median(ratios):.2f}",
        f"{max(ratios):.2f}",
    ]
    if bound:
        cells.append(f"{_mean(mine, 'bound_100'):.2f}")
    return cells


def report(rows: list[dict[str, Any]], policy: str, option: DefragOption) -> str:
    """The per-trace table (means over seeds) as markdown."""
    bound = "bound_100" in rows[0]
    reference = "reference_cpu_s" in rows[0]
    head = [policy, f"{policy} + defrag", "gain"]
    if reference:
        head += ["gain, unbudgeted", "gain kept", "CPU with / without, unbudgeted"]
    head += ["pods moved", "arrivals rescued", "CPU s without", "CPU with / without"]
    head += ["worst seed"] + (["lower bound"] if bound else [])
    lines = ["| trace | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for name in dict.fromkeys(r["trace"] for r in rows):
        mine = [r for r in rows if r["trace"] == name]
        lines.append("| " + " | ".join([name, *_cells(mine, reference, bound)]) + " |")
    seeds = sorted({int(r["seed"]) for r in rows})
    lines.append("")
    lines.append(
        f"Unallocated GPU % at 100 % arrival, mean ± sd over seeds {seeds[0]}..{seeds[-1]}; "
        f"defragmentation moves at most {option.max_moved_fraction:g} of the placed pods per "
        f"arrival, its planner earns {option.work_per_arrival:g} work units per arrival and "
        f"spends at most {option.max_work} on one; gain: the mean reduction; CPU ratios are "
        "medians per run (worst seed: the largest); moves and rescues are per run, to 130 % "
        "arrival."
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=TRACES)
    parser.add_argument("--traces", default="default", help="comma-separated, or 'all'")
    parser.add_argument("--policy", default="fgd")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--work", type=float, default=WORK_PER_ARRIVAL, help="units per arrival")
    parser.add_argument("--max-work", type=int, default=MAX_WORK, help="units per arrival, most")
    parser.add_argument("--reference", action="store_true", help="also the unbudgeted planner")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--bound", action="store_true", help="also the LP lower bound at 100 %")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "openb-defrag")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite report.md from --out/results.csv"
    )
    args = parser.parse_args()
    option = DefragOption(args.fraction, work_per_arrival=args.work, max_work=args.max_work)
    if args.report_only:
        with (args.out / "results.csv").open(encoding="utf-8") as handle:
            kept = list(csv.DictReader(handle))
        order = {name: i for i, name in enumerate(REFERENCE_AT_100)}
        kept.sort(key=lambda r: (order.get(r["trace"], len(order)), int(r["seed"])))
        text = report(kept, args.policy, option)
        (args.out / "report.md").write_text(text, encoding="utf-8")
        print(text)
        return
    names = list(REFERENCE_AT_100) if args.traces == "all" else args.traces.split(",")
    jobs = [(n, s) for n in names for s in _seeds(args.seeds)]
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {platform.processor() or 'cpu'}, ")
    print(f"nproc {os.cpu_count()}; load {os.getloadavg()}; python {platform.python_version()}")
    print(
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            text=True,
            capture_output=True,
            cwd=ROOT,
            check=False,
        ).stdout.strip()
    )
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    # each (trace, seed) is appended as it completes, so a stopped run keeps what it did
    with (
        Progress(*columns) as progress,
        ProcessPoolExecutor(args.workers) as pool,
        (args.out / "results.csv").open("w", newline="", encoding="utf-8") as handle,
    ):
        task = progress.add_task("(trace, seed) pairs", total=len(jobs))
        futures = [
            pool.submit(one, args.trace_dir, n, args.policy, s, option, args.reference, args.bound)
            for n, s in jobs
        ]
        writer: csv.DictWriter[str] | None = None
        for future in as_completed(futures):
            row = future.result()
            rows.append(row)
            if writer is None:
                writer = csv.DictWriter(handle, fieldnames=list(row))
                writer.writeheader()
            writer.writerow(row)
            handle.flush()
            progress.advance(task)
    order = {name: i for i, name in enumerate(names)}
    rows.sort(key=lambda r: (order[r["trace"]], r["seed"]))
    print(f"wall {time.perf_counter() - started:.1f} s; load {os.getloadavg()}")
    text = report(rows, args.policy, option)
    (args.out / "report.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
