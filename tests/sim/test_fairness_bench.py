"""The summaries of bench/fair_catchup.py and bench/fair_units.py: mean ± sample sd over
seeds and the paired change against the baseline of the same seed, on hand-made points."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


fair_catchup = _load("fair_catchup")
fair_units = _load("fair_units")


def _point(
    policy: str, seed: int, jct: float, rho: float, jain: float, **kw: Any
) -> dict[str, Any]:
    doc = {
        "policy": policy,
        "seed": seed,
        "rate": 8.0,
        "multi_gpu": False,
        "solve_on_change": True,
        "catchup_floor": 1.0 if "fair-catchup" in policy else None,
        "mean_jct_h": jct,
        "makespan_h": 100.0,
        "mean_ftf": rho,
        "worst_ftf": 2 * rho,
        "jain": jain,
        "complete": True,
    }
    return doc | kw


def _row(text: str, *start: str) -> list[str]:
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[: len(start)] == list(start):
            return cells
    raise AssertionError(f"no row {start} in\n{text}")


def test_fair_catchup_table_pairs_each_seed_with_las_under_the_same_rule(
    tmp_path: Path,
) -> None:
    points = [
        _point("las", 100, 20.0, 1.0, 0.98),
        _point("las", 101, 10.0, 0.8, 0.96),
        # seed 100: -10 %, seed 101: -20 % -> -15.0 ± 7.1 (sd of -10 and -20)
        _point("fair-catchup", 100, 18.0, 0.9, 0.97),
        _point("fair-catchup", 101, 8.0, 0.8, 0.98),
        # the other rule's las is not its baseline
        _point("las", 100, 40.0, 1.0, 0.5, solve_on_change=False),
        # an incomplete point is left out
        _point("fair-catchup", 102, 1.0, 0.1, 1.0, complete=False),
    ]
    (tmp_path / "points.jsonl").write_text("".join(json.dumps(p) + "\n" for p in points))
    text = fair_catchup.table(fair_catchup.read_points([tmp_path]))
    las = _row(text, "single", "8", "on change", "las")
    assert las[4:6] == ["2", "15.00 ± 7.07"]
    row = _row(text, "single", "8", "on change", "fair-catchup")
    assert row[4] == "2" and row[5] == "13.00 ± 7.07"
    # JCT vs las, mean rho vs las (-0.1 and 0), Jain vs las (-0.01 and +0.02)
    assert row[-3:] == ["-15.0 ± 7.1", "-0.050 ± 0.071", "+0.0050 ± 0.0212"]
    alone = _row(text, "single", "8", "every reset", "las")
    assert alone[4:6] == ["1", "40.00"]


def test_fair_catchup_knob_keeps_only_curves_of_several_floors() -> None:
    points = [
        _point("fair-catchup", 100, 18.0, 0.9, 0.97),
        _point("fair-catchup", 100, 16.0, 1.0, 0.95, catchup_floor=0.0),
        _point("packed-fair-catchup", 100, 15.0, 0.9, 0.97),  # one floor: no curve
        _point("las", 100, 20.0, 1.0, 0.98),
    ]
    kept = fair_catchup.knob_points(points)
    assert [(p["policy"], p["catchup_floor"]) for p in kept] == [
        ("fair-catchup", 1.0),
        ("fair-catchup", 0.0),
        ("las", None),  # the baseline, on the same seed and rule
    ]
    # a seed without every floor is left out of the curve, and its las with it
    more = [*points, _point("fair-catchup", 101, 17.0, 0.9, 0.97), _point("las", 101, 20, 1, 1)]
    assert {p["seed"] for p in fair_catchup.knob_points(more)} == {100}


def test_fair_units_table_and_family() -> None:
    assert fair_units.family("ResNet-50 (batch size 64)") == "ResNet-50"
    assert fair_units.family("A3C") == "A3C"
    assert fair_units.seeds_of("100-102") == [100, 101, 102]
    with pytest.raises(ValueError, match="--seeds"):
        fair_units.seeds_of("a-b")

    def run(units: str, seed: int, jct: float, rho: float) -> dict[str, Any]:
        return {
            "rate": 6.0,
            "sort": "drf",
            "units": units,
            "seed": seed,
            "mean_jct_h": jct,
            "makespan_h": 50.0,
            "rho_mean": rho,
            "rho_max": rho,
            "jain": 0.9,
        }

    rows = [
        run("devices", 1, 10.0, 2.0),
        run("devices", 2, 20.0, 1.0),
        run("normalized", 1, 9.0, 1.5),  # -10 %, -0.5
        run("normalized", 2, 21.0, 1.0),  # +5 %, 0
    ]
    text = fair_units.table(rows)
    row = _row(text, "6", "drf", "normalized")
    assert row[3:5] == ["2", "15.00 ± 8.49"]
    assert row[-3:] == ["-2.5 ± 10.6", "-0.250 ± 0.354", "+0.0000 ± 0.0000"]
