"""``hetsched sim replay --rounds``: replay a workload with round-based allocation policies.

The workload and cluster go through :func:`hetsched.sim.rounds_workload.round_inputs`
(devices per model, each job's rates from its speed model) and the round engine, once per
policy and knob value; the results are shown side by side, and ``--out`` writes
``rounds.json`` and, with several knob values, ``frontier.png`` (mean JCT and effective
throughput against Jain's index and the worst finish-time fairness).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hetsched.cli.output import OutputFormat, console, fail, print_json
from hetsched.cli.progress import steps
from hetsched.cli.tables import Col, Grid, print_table
from hetsched.model.device import Node
from hetsched.model.speed import SpeedTable
from hetsched.rounds import policy_names
from hetsched.sim.engine.round_mode import RoundConfig, RoundResult, RoundSimulator
from hetsched.sim.experiments.gavel import uses_alpha
from hetsched.sim.frontier import draw_frontier
from hetsched.sim.rounds_workload import round_inputs
from hetsched.sim.workload import Workload

__all__ = ["parse_alphas", "replay_rounds"]


def parse_alphas(text: str) -> list[float]:
    """``0,0.5,1`` -> knob values (ValueError naming --alphas)."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--alphas: expected numbers in 0..1, got {text!r}") from None
    if not values or any(not 0.0 <= v <= 1.0 for v in values):
        raise ValueError(f"--alphas: expected numbers in 0..1, got {text!r}")
    return values


def _row(result: RoundResult, alpha: float | None) -> dict[str, Any]:
    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 4)

    return {
        "policy": result.policy,
        "alpha": alpha,
        "jobs": len(result.measured),
        "finished": len(result.finished()),
        "mean_jct_h": rounded(result.mean_jct_h()),
        "utilization": rounded(result.utilization()),
        "effective_throughput": rounded(result.effective_throughput()),
        "jain": rounded(result.jain()),
        "worst_ftf": rounded(result.worst_ftf()),
        "preemptions": result.preemptions,
        "migrations": result.migrations,
        "rounds": result.rounds,
        "makespan_h": round(result.end_time / 3600.0, 3),
    }


def replay_rounds(
    nodes: Sequence[Node],
    workload: Workload,
    table: SpeedTable | None,
    policies: str,
    alphas: str,
    round_s: float,
    seed: int,
    output: OutputFormat,
    out: Path | None,
) -> None:
    """Run and report (see the module); exits with a clear error on bad input."""
    names = [n.strip() for n in policies.split(",") if n.strip()]
    unknown = [n for n in names if n not in policy_names()]
    if not names or unknown:
        fail(f"--rounds: unknown {unknown or policies!r} (known: {', '.join(policy_names())})", 2)
    try:
        knobs = parse_alphas(alphas)
        inputs = round_inputs(workload, nodes, table)
    except ValueError as exc:
        fail(str(exc), 2)
    rows: list[dict[str, Any]] = []
    runs = [(n, a) for n in names for a in (knobs if uses_alpha(n) else [None])]
    with steps("rounds", len(runs), quiet=output is OutputFormat.json) as step:
        for name, alpha in runs:
            config = RoundConfig(
                name, round_s=round_s, alpha=alpha or 0.0, seed=seed, solve_on_change=True
            )
            result = RoundSimulator(inputs.models, inputs.capacity, inputs.jobs, config).run()
            rows.append(_row(result, alpha))
            step(name if alpha is None else f"{name} alpha {alpha:g}")
    document = {
        "models": dict(zip(inputs.models, inputs.capacity, strict=True)),
        "skipped": list(inputs.skipped),
        "round_s": round_s,
        "results": rows,
    }
    if output is OutputFormat.json:
        print_json(document)
    else:
        _render(document)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "rounds.json").write_text(json.dumps(document, indent=2) + "\n")
        if len([r for r in rows if r["alpha"] is not None]) > 1:
            by_policy: dict[str, list[dict[str, Any]]] = {}
            for row in rows:
                by_policy.setdefault(row["policy"], []).append(row)
            draw_frontier(dict(sorted(by_policy.items())), out / "frontier.png")


#: the table's columns: key in the JSON -> column (a policy's name is never cut; the
#: counters go first when room is short)
_COLUMNS = {
    "policy": Col("policy", keep=True),
    "alpha": Col("alpha", keep=True, right=True),
    "finished": Col("done", drop=5, right=True),
    "mean_jct_h": Col("JCT h", keep=True, right=True),
    "utilization": Col("util", drop=6, right=True),
    "effective_throughput": Col("eff. tput", drop=4, right=True),
    "jain": Col("Jain", drop=3, right=True),
    "worst_ftf": Col("worst FTF", drop=7, right=True),
    "preemptions": Col("preempt", drop=2, right=True),
    "migrations": Col("moves", drop=1, right=True),
}


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _render(document: dict[str, Any]) -> None:
    models = ", ".join(f"{m} x{c}" for m, c in document["models"].items())
    grid = Grid(f"rounds of {document['round_s']:g} s on {models}", list(_COLUMNS.values()))
    for row in document["results"]:
        grid.add(*(_value(row[k]) for k in _COLUMNS))
    print_table(grid)
    if document["skipped"]:
        console.print(f"{len(document['skipped'])} job(s) without devices left out")
