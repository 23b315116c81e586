"""deploy/grafana/hetsched.json: loads as a dashboard whose every query names exported
metrics, and which has a panel for each metric the issue asks to chart."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hetsched.service.metrics import METRIC_NAMES

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "hetsched.json"
_NAME = re.compile(r"\bhetsched_[a-z0-9_]+\b")
_SUFFIXES = ("_bucket", "_count", "_sum")


def exported(name: str) -> bool:
    return name in METRIC_NAMES or any(
        name.endswith(s) and name[: -len(s)] in METRIC_NAMES for s in _SUFFIXES
    )


def panels() -> list[dict[str, Any]]:
    data = json.loads(DASHBOARD.read_text())
    assert data["uid"] and data["title"]
    out: list[dict[str, Any]] = []
    for panel in data["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return [p for p in out if p["type"] != "row"]


def test_every_panel_queries_exported_metrics() -> None:
    found = panels()
    assert found
    ids = [p["id"] for p in found]
    assert len(ids) == len(set(ids))
    for panel in found:
        assert panel["title"] and panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = _NAME.findall(target["expr"])
            assert names, f"{panel['title']}: {target['expr']}"
            unknown = [n for n in names if not exported(n)]
            assert unknown == [], f"{panel['title']} queries metrics nobody exports: {unknown}"


def test_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    data = json.loads(DASHBOARD.read_text())
    for panel in data["panels"]:
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, panel["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, panel["title"]
        cells |= mine


@pytest.mark.parametrize(
    "metric",
    [
        "hetsched_jobs",
        "hetsched_scheduling_attempts_total",
        "hetsched_scheduling_cycle_duration_seconds_bucket",
        "hetsched_queue_wait_seconds_bucket",
        "hetsched_device_allocation_ratio",
        "hetsched_device_utilization_ratio",
        "hetsched_fragmentation_ratio",
        "hetsched_preemptions_total",
        "hetsched_device_healthy",
        "hetsched_alerts_total",
    ],
)
def test_the_asked_for_metrics_have_a_panel(metric: str) -> None:
    assert any(metric in t["expr"] for p in panels() for t in p["targets"])
