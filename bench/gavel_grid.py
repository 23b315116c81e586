"""Gavel's continuous experiment, swept: policies x input rates x seeds through the round engine.

Each point is ``hetsched sim gavel`` (Gavel's job stream for the rate and seed, its
36:36:36 cluster, rounds of 360 s, the mean JCT of jobs 4000-4999). Points run in
``--workers`` processes; every finished point is appended to ``--out``/points.jsonl, so
an interrupted sweep resumes where it stopped. At the end the table (with Gavel's own
published mean JCTs side by side, where the authors printed one) is written to
``--out``/grid.md and the curves to ``--out``/jct.png.

    .venv/bin/python bench/gavel_grid.py --policies las,agnostic-las --rates 4.0,5.6
    .venv/bin/python bench/gavel_grid.py --multi-gpu --policies las,agnostic-las --rates 2.6
    .venv/bin/python bench/gavel_grid.py --rates 0.4,2,4 --window 400:500   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from hetsched.sim.experiments.gavel import (
    GavelPoint,
    parse_cluster,
    parse_window,
    point_document,
    uses_alpha,
    uses_floor,
)
from hetsched.sim.frontier import draw_frontier
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, load_throughputs
from hetsched.sim.gavel_synth import JOB_TABLES

#: the authors' printed mean JCT [h] (seed 0, jobs 4000-4999, 36:36:36, 360 s rounds):
#: Gavel's continuous_jobs{,_multigpu}.ipynb; (multi_gpu, policy, rate) -> hours
PUBLISHED: dict[tuple[bool, str, float], float] = {
    (False, "agnostic-las", 0.4): 23.26,
    (False, "agnostic-las", 2.0): 23.47,
    (False, "agnostic-las", 4.0): 23.49,
    (False, "agnostic-las", 5.6): 95.99,
    (False, "las", 0.4): 17.58,
    (False, "las", 2.0): 16.95,
    (False, "las", 4.0): 16.82,
    (False, "las", 5.6): 28.96,
    (False, "las", 6.0): 41.23,
    (False, "agnostic-fifo", 0.4): 17.58,
    (False, "agnostic-fifo", 2.0): 18.32,
    (False, "agnostic-fifo", 4.0): 25.38,
    (False, "fifo", 0.4): 15.31,
    (False, "fifo", 2.0): 15.45,
    (False, "fifo", 4.0): 17.08,
    (False, "fifo", 5.6): 104.12,
    (False, "fifo", 6.0): 150.04,
    (False, "agnostic-ftf", 0.4): 23.26,
    (False, "agnostic-ftf", 2.0): 23.47,
    (False, "agnostic-ftf", 4.0): 23.43,
    (False, "agnostic-ftf", 5.6): 85.54,
    (False, "agnostic-ftf", 6.0): 109.14,
    (False, "ftf", 0.4): 17.58,
    (False, "ftf", 2.0): 17.07,
    (False, "ftf", 4.0): 17.57,
    (False, "ftf", 5.6): 30.47,
    (False, "ftf", 6.0): 43.05,
    (True, "agnostic-las", 0.2): 25.93,
    (True, "agnostic-las", 1.0): 26.10,
    (True, "agnostic-las", 2.0): 28.91,
    (True, "agnostic-las", 2.6): 70.54,
    (True, "agnostic-las", 2.8): 169.93,
    (True, "las", 0.2): 18.55,
    (True, "las", 1.0): 18.54,
    (True, "las", 2.0): 21.90,
    (True, "las", 2.6): 36.44,
    (True, "las", 2.8): 55.78,
    (True, "agnostic-fifo", 0.2): 18.56,
    (True, "agnostic-fifo", 1.0): 19.92,
    (True, "agnostic-fifo", 2.0): 37.56,
    (True, "agnostic-fifo", 2.6): 304.76,
    (True, "fifo", 0.2): 16.91,
    (True, "fifo", 1.0): 17.34,
    (True, "fifo", 2.0): 27.68,
    (True, "fifo", 2.6): 93.60,
    (True, "agnostic-ftf", 0.2): 25.93,
    (True, "agnostic-ftf", 1.0): 26.12,
    (True, "agnostic-ftf", 2.0): 28.87,
    (True, "agnostic-ftf", 2.6): 64.38,
    (True, "ftf", 0.2): 18.55,
    (True, "ftf", 1.0): 18.51,
    (True, "ftf", 2.0): 21.80,
    (True, "ftf", 2.6): 33.90,
    (True, "ftf", 2.8): 41.56,
    # Gavel's own space sharing ("LAS w/ SS", max_min_fairness_packed: pairs in the LP);
    # hetsched's packed-las packs in the mechanism instead, so these are a reference
    (False, "packed-las", 0.4): 18.42,
    (False, "packed-las", 2.0): 18.26,
    (False, "packed-las", 4.0): 16.96,
    (False, "packed-las", 5.6): 19.64,
    (False, "packed-las", 6.0): 20.42,
    (True, "packed-las", 0.2): 18.72,
    (True, "packed-las", 1.0): 19.01,
    (True, "packed-las", 2.0): 20.85,
    (True, "packed-las", 2.6): 30.51,
    (True, "packed-las", 2.8): 38.25,
    (True, "packed-las", 3.0): 46.94,
}


def _run_point(point: GavelPoint) -> dict[str, Any]:
    table = load_throughputs(BUNDLED_THROUGHPUTS)
    started = time.perf_counter()
    result = point.run(table)
    return point_document(point, result, time.perf_counter() - started)


def _key(
    doc: dict[str, Any],
) -> tuple[bool, str, float, int, float | None, bool, bool, float | None, str]:
    return (
        doc["multi_gpu"],
        doc["policy"],
        float(doc["rate"]),
        doc["seed"],
        doc.get("alpha"),
        bool(doc.get("solve_on_change")),
        bool(doc.get("central", False)),
        doc.get("catchup_floor", 1.0 if uses_floor(doc["policy"]) else None),
        # points written before the job table was recorded drew from the artifact's order
        doc.get("job_table", "artifact"),
    )


def _published(doc: dict[str, Any]) -> float | None:
    if tuple(doc["window"]) != (4000, 5000) or doc["cluster"] != {
        "v100": 36,
        "p100": 36,
        "k80": 36,
    }:
        return None
    return PUBLISHED.get((doc["multi_gpu"], doc["policy"], float(doc["rate"])))


def _table(docs: list[dict[str, Any]]) -> str:
    lines = [
        "| trace | policy | jobs/h | seed | mean JCT [h] | Gavel [h] | ratio | util "
        "| eff. tput | Jain | worst FTF | wall [s] |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for doc in sorted(docs, key=lambda d: _key(d)[:4]):
        jct = doc["mean_jct_h"]
        ref = _published(doc) if doc["seed"] == 0 else None
        ratio = f"{jct / ref:.2f}" if jct is not None and ref else "-"
        trace = "multi" if doc["multi_gpu"] else "single"
        name = doc["policy"] + (f" a={doc['alpha']}" if doc.get("alpha") is not None else "")
        floor = doc.get("catchup_floor")
        name += f" floor={floor:g}" if floor is not None and floor != 1.0 else ""
        name += " (solve on change)" if doc.get("solve_on_change") else ""
        name += "" if doc.get("central", False) else " (vertex + throughput)"
        shown = "-" if jct is None else f"{jct:.2f}" + ("" if doc["complete"] else " (cut)")
        lines.append(
            f"| {trace} | {name} | {doc['rate']:g} | {doc['seed']} | {shown} "
            f"| {ref if ref else '-'} | {ratio} | {doc['utilization']:.3f} "
            f"| {doc.get('effective_throughput', '-')} | {doc['jain']} "
            f"| {doc['worst_ftf']} | {doc['wall_s']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def _plot(docs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = sorted({d["multi_gpu"] for d in docs})
    palette = sorted({d["policy"] for d in docs})
    fig, axes = plt.subplots(1, len(traces), figsize=(6 * len(traces), 4.2), squeeze=False)
    for ax, multi in zip(axes[0], traces, strict=True):
        mine = [d for d in docs if d["multi_gpu"] == multi and d["seed"] == 0]
        for policy in sorted({d["policy"] for d in mine}):
            color = f"C{palette.index(policy) % 10}"
            points = sorted((d["rate"], d["mean_jct_h"]) for d in mine if d["policy"] == policy)
            points = [p for p in points if p[1] is not None]
            if points:
                ax.plot(*zip(*points, strict=True), "o-", color=color, label=f"{policy} (hetsched)")
            ref = sorted((r, v) for (m, p, r), v in PUBLISHED.items() if m == multi and p == policy)
            if ref:
                ax.plot(
                    *zip(*ref, strict=True),
                    "x--",
                    color=color,
                    alpha=0.6,
                    label=f"{policy} (Gavel)",
                )
        ax.set_title(("multi" if multi else "single") + "-GPU trace, 36:36:36, seed 0")
        ax.set_xlabel("input rate [jobs/h]")
        ax.set_ylabel("mean JCT of jobs 4000-4999 [h]")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _frontier(docs: list[dict[str, Any]], path: Path) -> None:
    """The knob's measured frontier: one series per (trace, rate, policy) of seed 0."""
    groups: dict[tuple[bool, float, str], list[dict[str, Any]]] = {}
    for doc in docs:
        if doc["seed"] == 0 and doc["mean_jct_h"] is not None:
            groups.setdefault((doc["multi_gpu"], doc["rate"], doc["policy"]), []).append(doc)
    series = {
        f"{policy} {rate:g}/h {'multi' if multi else 'single'}": group
        for (multi, rate, policy), group in sorted(groups.items())
    }
    draw_frontier(series, path)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", default="las,agnostic-las")
    parser.add_argument("--rates", default="4.0,5.6", help="jobs/hour, comma-separated")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--multi-gpu", action="store_true")
    parser.add_argument("--window", default="4000:5000")
    parser.add_argument("--cluster", default="36:36:36")
    parser.add_argument(
        "--alphas",
        default="0.5",
        help="knob values for fair-throughput/fair-srtf (comma-separated)",
    )
    parser.add_argument(
        "--floors",
        default="1.0",
        help="knob values for fair-catchup: the fraction of its las share every job keeps",
    )
    parser.add_argument("--until-h", type=float, default=None, help="give up on a point here")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--solve-on-change",
        action="store_const",
        const=True,
        default=None,
        help="solve at every change for every policy (default: each policy's own rule: "
        "fair-catchup on change, Gavel's policies by Gavel's rule)",
    )
    parser.add_argument(
        "--solve-every-reset",
        dest="solve_on_change",
        action="store_const",
        const=False,
        help="Gavel's rule for every policy",
    )
    parser.add_argument(
        "--efficient",
        action="store_true",
        help="hetsched's allocations (an optimal vertex, the rest on effective throughput) "
        "instead of Gavel's interior-point ones",
    )
    parser.add_argument(
        "--job-table",
        choices=list(JOB_TABLES),
        default="osdi20",
        help="the order of Gavel's job table the stream draws from: osdi20, the published "
        "runs' (default), or artifact, the later artifact's (the stream before 2026-12-06)",
    )
    parser.add_argument("--out", type=Path, default=Path("gavel-grid"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "points.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    seen = {_key(d) for d in done}
    points = [
        GavelPoint(
            policy,
            float(rate),
            int(seed),
            args.multi_gpu,
            parse_window(args.window),
            parse_cluster(args.cluster),
            alpha=float(alpha),
            until_s=None if args.until_h is None else args.until_h * 3600,
            solve_on_change=args.solve_on_change,
            central=not args.efficient,
            catchup_floor=float(floor),
            job_table=args.job_table,
        )
        for policy in args.policies.split(",")
        for rate in args.rates.split(",")
        for seed in args.seeds.split(",")
        for alpha in (args.alphas.split(",") if uses_alpha(policy) else ["0.5"])
        for floor in (args.floors.split(",") if uses_floor(policy) else ["1.0"])
    ]
    todo = [
        p
        for p in points
        if (
            p.multi_gpu,
            p.policy,
            p.rate,
            p.seed,
            p.alpha if uses_alpha(p.policy) else None,
            p.on_change(),
            p.central,
            p.catchup_floor if uses_floor(p.policy) else None,
            p.job_table,
        )
        not in seen
    ]
    print(f"{len(points)} points, {len(todo)} to run; {os.cpu_count()} CPUs, {platform.node()}")
    with ProcessPoolExecutor(max_workers=max(args.workers, 1)) as pool:
        futures = [pool.submit(_run_point, p) for p in todo]
        for future in as_completed(futures):
            doc = future.result()
            done.append(doc)
            with log.open("a") as handle:
                handle.write(json.dumps(doc) + "\n")
            print(
                f"{doc['policy']:>16} {doc['rate']:>4g} seed {doc['seed']}: "
                f"{doc['mean_jct_h']} h ({doc['wall_s']:.0f} s)",
                flush=True,
            )
    (args.out / "grid.md").write_text(_table(done))
    _plot(done, args.out / "jct.png")
    if len({d["alpha"] for d in done if d.get("alpha") is not None}) > 1:
        _frontier(done, args.out / "frontier.png")
    print(_table(done))


if __name__ == "__main__":
    main()
