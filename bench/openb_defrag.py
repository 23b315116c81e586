"""Benchmark: the openb experiment with and without defragmentation, side by side.

    .venv/bin/python bench/openb_defrag.py                        # default trace, FGD, 42..51
    .venv/bin/python bench/openb_defrag.py --traces all --workers 2 --out bench/results/defrag

For every (trace, seed) one worker runs the policy without and then with defragmentation
(``--fraction`` of the placed pods per arrival at most), measuring each run's CPU time in
that process, and, with ``--bound``, the LP lower bound on unallocated GPU % at 100 %
arrival (no packing, with or without moves, can go below it). Prints per trace the means
and writes results.csv and report.md to ``--out``. Results are not tests.
"""

from __future__ import annotations

import argparse
import csv
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
    POLICIES,
    OpenbTrace,
    load_trace,
    run_openb,
    tune_workload,
)
from hetsched.sim.experiments.openb_bound import allocation_bound, arrived_prefix
from hetsched.sim.experiments.openb_defrag import DefragOption
from hetsched.sim.experiments.openb_report import REFERENCE_AT_100

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023"
_TRACES: dict[str, OpenbTrace] = {}


def _trace(trace_dir: Path, name: str) -> OpenbTrace:
    if name not in _TRACES:
        _TRACES[name] = load_trace(trace_dir, name)
    return _TRACES[name]


def one(
    trace_dir: Path, name: str, policy: str, seed: int, fraction: float, bound: bool
) -> dict[str, Any]:
    """One (trace, seed): the run without, the run with defragmentation, and the bound."""
    import numpy as np

    trace = _trace(trace_dir, name)
    row: dict[str, Any] = {"trace": name, "policy": policy, "seed": seed}
    for label, option in (("plain", None), ("defrag", DefragOption(max_moved_fraction=fraction))):
        started = time.process_time()
        result = run_openb(trace, policy, seed, defrag=option)
        row[f"{label}_cpu_s"] = time.process_time() - started
        row[f"{label}_unalloc_100"] = result.unallocated_gpu_pct[100]
        row[f"{label}_unalloc_130"] = result.unallocated_gpu_pct[130]
        row[f"{label}_failed"] = result.pods_failed
        if option is not None:
            row["moved"] = result.extra["moved"]
            row["rescued"] = result.extra["rescued"]
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


def report(rows: list[dict[str, Any]], policy: str, fraction: float) -> str:
    """The per-trace table (means over seeds) as markdown."""
    bound = "bound_100" in rows[0]
    head = (
        f"| trace | {policy} | {policy} + defrag | reference {policy} | pods moved | arrivals "
        "rescued | CPU s without | CPU s with | with / without |"
    )
    lines = [head + (" lower bound |" if bound else ""), "|---" * (9 + bound) + "|"]
    for name in dict.fromkeys(r["trace"] for r in rows):
        mine = [r for r in rows if r["trace"] == name]
        ratio = statistics.median(float(r["defrag_cpu_s"]) / float(r["plain_cpu_s"]) for r in mine)
        known = REFERENCE_AT_100.get(name)
        reference = known[POLICIES.index(policy)] if known and policy in POLICIES else None
        cells = [
            name,
            _spread(mine, "plain_unalloc_100"),
            f"**{_spread(mine, 'defrag_unalloc_100')}**",
            "–" if reference is None else f"{reference:.2f}",
            f"{_mean(mine, 'moved'):.1f}",
            f"{_mean(mine, 'rescued'):.1f}",
            f"{statistics.median(float(r['plain_cpu_s']) for r in mine):.1f}",
            f"{statistics.median(float(r['defrag_cpu_s']) for r in mine):.1f}",
            f"{ratio:.2f}",
        ]
        if bound:
            cells.append(f"{_mean(mine, 'bound_100'):.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    seeds = sorted({int(r["seed"]) for r in rows})
    lines.append("")
    lines.append(
        f"Unallocated GPU % at 100 % arrival, mean ± sd over seeds {seeds[0]}..{seeds[-1]}; "
        f"defragmentation moves at most {fraction:g} of the placed pods per arrival; CPU "
        "seconds are medians per run; moves and rescues are per run, to 130 % arrival."
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=TRACES)
    parser.add_argument("--traces", default="default", help="comma-separated, or 'all'")
    parser.add_argument("--policy", default="fgd")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--bound", action="store_true", help="also the LP lower bound at 100 %")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "openb-defrag")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite report.md from --out/results.csv"
    )
    args = parser.parse_args()
    if args.report_only:
        with (args.out / "results.csv").open(encoding="utf-8") as handle:
            kept = list(csv.DictReader(handle))
        order = {name: i for i, name in enumerate(REFERENCE_AT_100)}
        kept.sort(key=lambda r: (order.get(r["trace"], len(order)), int(r["seed"])))
        text = report(kept, args.policy, args.fraction)
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
            pool.submit(one, args.trace_dir, n, args.policy, s, args.fraction, args.bound)
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
    text = report(rows, args.policy, args.fraction)
    (args.out / "report.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
