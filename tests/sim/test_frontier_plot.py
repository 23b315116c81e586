"""The fairness-throughput frontier plot (hetsched.sim.frontier), shared by the replay CLI
and bench/gavel_grid.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hetsched.sim.frontier import draw_frontier


def _row(alpha: float | None, jain: float | None, jct: float | None) -> dict[str, Any]:
    return {
        "alpha": alpha,
        "jain": jain,
        "mean_jct_h": jct,
        "worst_ftf": 1.5,
        "effective_throughput": 80.0,
    }


def test_draw_frontier_writes_a_png_of_every_series(tmp_path: Path) -> None:
    series = {
        "fair-throughput": [_row(1.0, 0.9, 10.0), _row(0.0, 0.99, 20.0), _row(0.5, 0.95, 15.0)],
        "las": [_row(None, 0.99, 21.0)],
        "nothing finished": [_row(0.5, None, None)],
    }
    path = tmp_path / "frontier.png"
    draw_frontier(series, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_draw_frontier_names_a_missing_key(tmp_path: Path) -> None:
    row = _row(0.5, 0.9, 10.0)
    del row["worst_ftf"]
    with pytest.raises(KeyError, match=r"'las'.*worst_ftf"):
        draw_frontier({"las": [row]}, tmp_path / "f.png")
    assert not (tmp_path / "f.png").exists()
