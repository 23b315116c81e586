"""The fairness-throughput frontier, drawn once for every tool that sweeps the knob.

``hetsched sim replay --rounds --alphas ...`` and ``bench/gavel_grid.py --alphas ...`` both
measure runs of round policies at several values of ``alpha`` and draw the same two panels:
mean JCT against Jain's index, and effective throughput against the worst finish-time
fairness. :func:`draw_frontier` takes the runs already grouped into labelled series (one
curve per series, its points ordered by ``alpha``; runs without a knob value come first
and are drawn as a single marker when alone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["FRONTIER_KEYS", "draw_frontier"]

#: the keys every run (a JSON row of either tool) must have; ``alpha`` may be None
FRONTIER_KEYS = ("alpha", "jain", "mean_jct_h", "worst_ftf", "effective_throughput")


def _ordered(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    drawn = [r for r in rows if r.get("mean_jct_h") is not None and r.get("jain") is not None]
    return sorted(drawn, key=lambda r: -1.0 if r.get("alpha") is None else float(r["alpha"]))


def draw_frontier(series: Mapping[str, Sequence[Mapping[str, Any]]], path: Path) -> None:
    """Write ``path`` (PNG): per series, mean JCT against Jain's index (each point labelled
    with its ``alpha``) and effective throughput against the worst finish-time fairness.
    Rows without a mean JCT or a Jain's index (nothing finished) are left out; a row
    missing one of :data:`FRONTIER_KEYS` is a KeyError naming it."""
    for label, rows in series.items():
        for row in rows:
            missing = [k for k in FRONTIER_KEYS if k not in row]
            if missing:
                raise KeyError(f"frontier series {label!r}: a row lacks {', '.join(missing)}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, (label, rows) in enumerate(series.items()):
        mine = _ordered(rows)
        if not mine:
            continue
        style = "o-" if len(mine) > 1 else "s"
        color = f"C{index % 10}"
        jain = [r["jain"] for r in mine]
        left.plot(jain, [r["mean_jct_h"] for r in mine], style, color=color, label=label)
        right.plot(
            [r["worst_ftf"] for r in mine],
            [r["effective_throughput"] for r in mine],
            style,
            color=color,
            label=label,
        )
        for r in mine:
            if r["alpha"] is not None:
                left.annotate(f"{r['alpha']:g}", (r["jain"], r["mean_jct_h"]), fontsize=7)
    left.set_xlabel("Jain's index over users (isolated / actual JCT)")
    left.set_ylabel("mean JCT [h]")
    right.set_xlabel("worst finish-time fairness (JCT / isolated JCT)")
    right.set_ylabel("effective throughput [best-device equivalents]")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
