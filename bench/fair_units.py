"""Fair shares in device-hours against speed-normalized device-hours, on Gavel's workload.

Gavel's continuous job stream (``sim synth --gavel``: 26 job types with measured rates on
V100, P100 and K80) on Gavel's 36:36:36 cluster (``examples/clusters/gavel-small.yaml``),
replayed by the event-driven simulator under DRF and fair share, each with
``fairness: {units: devices}`` and ``{units: normalized, reference_model: V100}``. Every
profile places with the ``speed`` score (each task where its job runs fastest), so the
only difference between the two units is what a device-hour is charged. Users are the
job families (ResNet-18, ResNet-50, Transformer, LM, Recommendation, A3C, CycleGAN: each a
team training one kind of model, with its own speed-up on a V100), or ``--users N``
round-robin.

Per run: mean JCT, makespan, finish-time fairness rho per user (Themis: the user's JCTs
over their JCTs on an equal share of the cluster; mean and max over users) and Jain's index
over the users' time-averaged shares. The table gives the mean and sample sd over the
seeds; ``--out`` gets ``points.jsonl`` (one line per run) and ``table.md``.

    .venv/bin/python bench/fair_units.py --seeds 100-107 --rates 4.0,5.0 --out fu/
    .venv/bin/python bench/fair_units.py --seeds 0 --rates 4.0 --jobs 200 -o json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

from hetsched.framework.profile import parse_profile
from hetsched.model.lifecycle import JobState
from hetsched.model.specs import load_cluster
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, load_throughputs
from hetsched.sim.gavel_synth import JOB_TABLES, GavelWorkloadSpec, generate_gavel
from hetsched.sim.replay import Policy, replay
from hetsched.sim.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "examples" / "clusters" / "gavel-small.yaml"

#: the two ways of counting device time
UNITS: dict[str, dict[str, str]] = {
    "devices": {"units": "devices"},
    "normalized": {"units": "normalized", "reference_model": "V100"},
    "normalized-k80": {"units": "normalized", "reference_model": "K80"},
}

#: the columns of the table: (key, heading, digits)
COLUMNS = (
    ("mean_jct_h", "mean JCT [h]", 2),
    ("makespan_h", "makespan [h]", 1),
    ("rho_mean", "mean rho", 3),
    ("rho_max", "max rho", 3),
    ("jain", "Jain (shares)", 4),
)


def seeds_of(text: str) -> list[int]:
    """``100-107`` or ``0,1,5`` -> the seeds; ValueError naming --seeds otherwise."""
    try:
        if "-" in text:
            low, high = (int(p) for p in text.split("-"))
            return list(range(low, high + 1))
        return [int(p) for p in text.split(",")]
    except ValueError:
        raise ValueError(f"--seeds: expected LOW-HIGH or a comma list, got {text!r}") from None


def family(job_type: str) -> str:
    """``ResNet-50 (batch size 64)`` -> ``ResNet-50``: the job's family, its user."""
    return job_type.split(" (")[0]


def workload(seed: int, rate: float, jobs: int, users: int, job_table: str = "osdi20") -> Workload:
    """Gavel's single-GPU stream drawn from ``job_table``'s order; users by family
    (``users`` 0) or ``users`` round-robin."""
    spec = GavelWorkloadSpec(
        jobs=jobs, rate_per_h=rate, seed=seed, users=users, job_table=job_table
    )
    drawn = generate_gavel(spec, load_throughputs(BUNDLED_THROUGHPUTS))
    if users:
        return drawn
    items = tuple(
        dataclasses.replace(item, job=dataclasses.replace(item.job, user=family(item.job.name)))
        for item in drawn.jobs
    )
    return Workload(items, drawn.source + ", users by family")


def policy(sort: str, units: str) -> Policy:
    """The profile: ``sort`` as queue order, speed-aware placement, ``units`` fair shares."""
    spec = {
        "name": f"{sort}-{units}",
        "queue_sort": sort,
        "score": ["bestfit", "stranding", {"name": "speed", "weight": 2}],
        "fairness": UNITS[units],
    }
    return Policy(f"{sort}-{units}", parse_profile(spec))


def run_one(
    seed: int, rate: float, sort: str, units: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One replay and its measures."""
    nodes = load_cluster(CLUSTER)
    started = time.process_time()
    drawn = workload(seed, rate, args.jobs, args.users, args.job_table)
    done = replay(nodes, drawn, policy(sort, units), seed)
    summary = done.summary
    rho = list(summary.ftf.values())
    return {
        "seed": seed,
        "rate": rate,
        "sort": sort,
        "units": units,
        "job_table": args.job_table,
        "jobs": summary.jobs,
        "succeeded": summary.states.get(JobState.SUCCEEDED, 0),
        "wait_mean_h": summary.wait["mean"] / 3600.0,
        "mean_jct_h": summary.jct["mean"] / 3600.0,
        "makespan_h": summary.makespan_s / 3600.0,
        "rho_mean": statistics.fmean(rho) if rho else None,
        "rho_max": max(rho) if rho else None,
        "jain": summary.jain_users,
        "rho_users": summary.ftf,
        "cpu_s": round(time.process_time() - started, 2),
    }


def _cell(values: list[float], digits: int, sign: str = "") -> str:
    if not values:
        return "-"
    mean = f"{statistics.fmean(values):{sign}.{digits}f}"
    return mean if len(values) == 1 else f"{mean} ± {statistics.stdev(values):.{digits}f}"


def _paired(mine: list[dict[str, Any]], base: list[dict[str, Any]]) -> list[str]:
    """Seed by seed against ``devices`` under the same order: JCT %, mean rho, Jain."""
    by_seed = {r["seed"]: r for r in base}
    pairs = [(r, by_seed[r["seed"]]) for r in mine if r["seed"] in by_seed]
    jct = [100.0 * (r["mean_jct_h"] / b["mean_jct_h"] - 1.0) for r, b in pairs]
    rho = [r["rho_mean"] - b["rho_mean"] for r, b in pairs]
    jain = [r["jain"] - b["jain"] for r, b in pairs]
    return [_cell(jct, 1, "+"), _cell(rho, 3, "+"), _cell(jain, 4, "+")]


def table(rows: list[dict[str, Any]]) -> str:
    """Mean ± sample sd over the seeds, one line per rate, queue order and units, and the
    paired change against ``devices`` (same seed, same order)."""
    head = "| jobs/h | order | units | seeds | " + " | ".join(c[1] for c in COLUMNS)
    head += " | JCT vs devices | rho vs devices | Jain vs devices |"
    lines = [head, "|---|---|---|---:|" + "---:|" * (len(COLUMNS) + 3)]
    groups = sorted({(r["rate"], r["sort"], r["units"]) for r in rows})
    for rate, sort, units in groups:
        mine = [r for r in rows if (r["rate"], r["sort"], r["units"]) == (rate, sort, units)]
        cells = [
            _cell([r[key] for r in mine if r[key] is not None], digits)
            for key, _, digits in COLUMNS
        ]
        base = [r for r in rows if (r["rate"], r["sort"], r["units"]) == (rate, sort, "devices")]
        cells += ["", "", ""] if units == "devices" else _paired(mine, base)
        lines.append(f"| {rate:g} | {sort} | {units} | {len(mine)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", default="100-107", help="LOW-HIGH or a comma list")
    parser.add_argument("--rates", default="4.0", help="jobs/hour, comma-separated")
    parser.add_argument("--jobs", type=int, default=1500, help="jobs per run (default 1500)")
    parser.add_argument("--users", type=int, default=0, help="0: users by job family")
    parser.add_argument("--sorts", default="drf,fairshare", help="queue orders to compare")
    parser.add_argument(
        "--job-table",
        choices=list(JOB_TABLES),
        default="osdi20",
        help="the order of Gavel's job table the stream draws from (default osdi20, the "
        "published runs'; artifact: the stream before 2026-12-06)",
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for points and table")
    parser.add_argument(
        "--table-only", action="store_true", help="redo the table from --out's points.jsonl"
    )
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = parser.parse_args()
    if args.table_only:
        if args.out is None or not (args.out / "points.jsonl").exists():
            parser.error("--table-only: needs --out with a points.jsonl from an earlier run")
        lines = (args.out / "points.jsonl").read_text().splitlines()
        print(table([json.loads(line) for line in lines]))
        return
    try:
        seeds = seeds_of(args.seeds)
        rates = [float(r) for r in args.rates.split(",")]
    except ValueError as exc:
        parser.error(str(exc))
    rows = []
    for rate in rates:
        for seed in seeds:
            for sort in args.sorts.split(","):
                for units in UNITS:
                    rows.append(run_one(seed, rate, sort, units, args))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        with (args.out / "points.jsonl").open("w") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
        (args.out / "table.md").write_text(table(rows))
    print(json.dumps(rows, indent=2) if args.output == "json" else table(rows))


if __name__ == "__main__":
    main()
