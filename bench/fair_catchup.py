"""las against fair-catchup under the same solve rule: the table over seeds, and the knob.

Reads the ``points.jsonl`` of ``bench/gavel_grid.py`` runs (one folder per solve rule:
``--solve-on-change`` and ``--solve-every-reset``) and writes, per trace, rate, rule and
policy, the mean and sample sd over the seeds of Gavel's and Themis' metrics (mean JCT,
makespan of the window, finish-time fairness rho: mean and max over the jobs) beside
Jain's index, and each policy's change against ``las`` under the same rule, seed by seed
(paired). With ``--knob``, folders holding fair-catchup runs at several ``--floors``: the
frontier (mean JCT against mean rho and against Jain, one point per floor, mean over the
seeds) to ``frontier.png``.

    .venv/bin/python bench/gavel_grid.py --policies las,fair-catchup,packed-fair-catchup \\
        --rates 2.0,6.0 --seeds 100,101,102,103,104,105,106,107 --window 500:700 \\
        --solve-on-change --workers 2 --out fc/on-change
    .venv/bin/python bench/fair_catchup.py --grids fc/on-change,fc/every-reset --out fc
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: (key, heading, digits) of the table's measures
MEASURES = (
    ("mean_jct_h", "mean JCT [h]", 2),
    ("makespan_h", "makespan [h]", 1),
    ("mean_ftf", "mean rho", 3),
    ("worst_ftf", "max rho", 2),
    ("jain", "Jain", 4),
)


def read_points(folders: Sequence[Path]) -> list[dict[str, Any]]:
    """Every finished point of the folders' ``points.jsonl`` (later lines win)."""
    points: dict[tuple[Any, ...], dict[str, Any]] = {}
    for folder in folders:
        log = folder / "points.jsonl"
        if not log.exists():
            raise SystemExit(f"--grids: {log} does not exist (run bench/gavel_grid.py first)")
        for line in log.read_text().splitlines():
            doc = json.loads(line)
            points[(*_key(doc), doc["seed"])] = doc
    return [d for d in points.values() if d.get("complete")]


def _key(doc: dict[str, Any]) -> tuple[Any, ...]:
    rule = "on change" if doc.get("solve_on_change") else "every reset"
    return (
        "multi" if doc["multi_gpu"] else "single",
        float(doc["rate"]),
        rule,
        doc["policy"],
        doc.get("catchup_floor"),
    )


def cell(values: Sequence[float], digits: int, signed: bool = False) -> str:
    """``mean ± sd`` (sample sd; the mean alone for one value, ``-`` for none)."""
    if not values:
        return "-"
    sign = "+" if signed else ""
    mean = f"{statistics.fmean(values):{sign}.{digits}f}"
    return mean if len(values) == 1 else f"{mean} ± {statistics.stdev(values):.{digits}f}"


def _paired(mine: list[dict[str, Any]], base: dict[int, dict[str, Any]]) -> tuple[str, str, str]:
    """Seed by seed against las: JCT change %, mean rho change, Jain change."""
    pairs = [(d, base[d["seed"]]) for d in mine if d["seed"] in base]
    jct = [100.0 * (d["mean_jct_h"] / b["mean_jct_h"] - 1.0) for d, b in pairs]
    rho = [d["mean_ftf"] - b["mean_ftf"] for d, b in pairs]
    jain = [d["jain"] - b["jain"] for d, b in pairs]
    return cell(jct, 1, True), cell(rho, 3, True), cell(jain, 4, True)


def table(points: list[dict[str, Any]]) -> str:
    """One line per trace, rate, solve rule and policy (and floor), over the seeds."""
    heads = " | ".join(h for _, h, _ in MEASURES)
    lines = [
        f"| trace | jobs/h | solve | policy | seeds | {heads} | JCT vs las | rho vs las "
        "| Jain vs las |",
        "|---|---:|---|---|---:|" + "---:|" * (len(MEASURES) + 3),
    ]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for doc in points:
        groups.setdefault(_key(doc), []).append(doc)
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2], k[3] != "las", k[3], k[4] or 0)):
        trace, rate, rule, policy, floor = key
        mine = groups[key]
        cells = [cell([d[k] for d in mine if d.get(k) is not None], n) for k, _, n in MEASURES]
        base = {d["seed"]: d for d in groups.get((trace, rate, rule, "las", None), [])}
        versus = ("", "", "") if policy == "las" else _paired(mine, base)
        name = policy + (f" (floor {floor:g})" if floor not in (None, 1.0) else "")
        lines.append(
            f"| {trace} | {rate:g} | {rule} | {name} | {len(mine)} | "
            + " | ".join(cells)
            + " | "
            + " | ".join(versus)
            + " |"
        )
    return "\n".join(lines) + "\n"


def knob_points(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The knob's curves: the points of each (trace, rate, rule, policy) measured at more
    than one floor, on the seeds that have every floor of it, and ``las`` on those seeds
    under the same rule (the baseline each curve is compared with)."""
    floors: dict[tuple[Any, ...], dict[int, set[float]]] = {}
    for doc in points:
        if doc.get("catchup_floor") is not None:
            seeds = floors.setdefault(_key(doc)[:4], {})
            seeds.setdefault(doc["seed"], set()).add(float(doc["catchup_floor"]))
    keep: set[tuple[Any, ...]] = set()
    for group, seeds in floors.items():
        every = set().union(*seeds.values())
        if len(every) > 1:
            full = {seed for seed, mine in seeds.items() if mine == every}
            keep |= {(*group, seed) for seed in full}
            keep |= {(*group[:3], "las", seed) for seed in full}
    return [d for d in points if (*_key(d)[:4], d["seed"]) in keep]


def frontier(points: list[dict[str, Any]], path: Path) -> None:
    """Mean JCT against mean rho and against Jain, one curve per (trace, rate, policy,
    rule), one point per floor (mean over the seeds), each labelled with its floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves: dict[str, dict[float, list[dict[str, Any]]]] = {}
    for doc in points:
        trace, rate, rule, policy, floor = _key(doc)
        label = f"{policy} {rate:g}/h {trace} ({rule})"
        # las is drawn as one point, at floor 1 of its own curve
        curves.setdefault(label, {}).setdefault(1.0 if floor is None else float(floor), [])
        curves[label][1.0 if floor is None else float(floor)].append(doc)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, (label, by_floor) in enumerate(sorted(curves.items())):
        floors = sorted(by_floor, reverse=True)
        jct = [statistics.fmean(d["mean_jct_h"] for d in by_floor[f]) for f in floors]
        for ax, key in zip(axes, ("mean_ftf", "jain"), strict=True):
            x = [statistics.fmean(d[key] for d in by_floor[f]) for f in floors]
            style = "o-" if len(floors) > 1 else "s"
            ax.plot(x, jct, style, color=f"C{index % 10}", label=label)
            for f, xi, yi in zip(floors, x, jct, strict=True):
                if len(floors) > 1:
                    ax.annotate(f"{f:g}", (xi, yi), fontsize=7)
    axes[0].set_xlabel("mean finish-time fairness rho (lower is fairer)")
    axes[1].set_xlabel("Jain's index over users (higher is fairer)")
    for ax in axes:
        ax.set_ylabel("mean JCT [h]")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("fair-catchup's catchup_floor: each point a floor, mean over the seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--grids", default="", help="gavel_grid folders, comma-separated")
    parser.add_argument(
        "--knob",
        default="",
        help="gavel_grid folders with fair-catchup at several --floors (comma-separated; "
        "the curves with more than one floor are drawn)",
    )
    parser.add_argument("--out", type=Path, default=Path("fair-catchup"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.grids:
        points = read_points([Path(p) for p in args.grids.split(",")])
        text = table(points)
        (args.out / "table.md").write_text(text)
        print(text)
    if args.knob:
        knob = knob_points(read_points([Path(p) for p in args.knob.split(",")]))
        text = table(knob)
        (args.out / "knob.md").write_text(text)
        frontier(knob, args.out / "frontier.png")
        print(text)


if __name__ == "__main__":
    main()
