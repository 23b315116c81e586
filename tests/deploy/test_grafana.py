"""deploy/grafana/hetsched.json: loads as a dashboard whose every query names exported
metrics, and which has a panel for each metric the issue asks to chart."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hetsched.controlplane.metrics import METRIC_NAMES

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


CLUSTER = """
nodes:
  - name: gpu-node
    cpu: "8"
    memory: 16Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 1}
"""


def test_every_panel_metric_is_on_a_live_metrics_page(tmp_path: Path) -> None:
    """Against the real service's /metrics (not the list of names): every metric a panel
    queries is exported, and the checkpoint panels have a sample while a checkpointable
    job runs."""
    import time

    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from hetsched.service.server import Options
    from hetsched.service.testing import running

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    options = Options(home=tmp_path / "home", cluster=[cluster], node_name="local")
    body = {
        "name": "saver",
        "checkpoint": {"interval_s": "10m", "notice_s": "5s"},
        "resources": {"cpu": "1", "memory": "64Mi", "devices": [{"class": "gpu", "count": 1}]},
        "command": ["sleep", "30"],
    }
    with (
        running(options) as svc,
        httpx.Client(
            base_url=svc.url, headers={"Authorization": f"Bearer {svc.admin_token}"}
        ) as client,
    ):
        job_id = client.post("/v1/jobs", json=body).json()["id"]
        for _ in range(300):
            if client.get(f"/v1/jobs/{job_id}").json()["state"] == "running":
                break
            time.sleep(0.05)
        page = client.get("/metrics").text
        client.post(f"/v1/jobs/{job_id}/cancel")
    families = list(text_string_to_metric_families(page))
    names: set[str] = set()
    for family in families:
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names.update(family.name + s for s in _SUFFIXES)
    for panel in panels():
        for target in panel["targets"]:
            missing = [n for n in _NAME.findall(target["expr"]) if n not in names]
            assert missing == [], f"{panel['title']}: not on /metrics: {missing}"
    ages = {
        s.labels["queue"]: s.value
        for f in families
        for s in f.samples
        if s.name == "hetsched_checkpoint_age_seconds"
    }
    assert set(ages) == {"default"} and ages["default"] >= 0


def test_the_checkpoint_panels_are_there() -> None:
    exprs = " ".join(t["expr"] for p in panels() for t in p["targets"])
    for metric in (
        "hetsched_lost_work_seconds_total",
        "hetsched_checkpoint_age_seconds",
        "hetsched_work_at_risk_seconds",
        "hetsched_checkpoints_total",
    ):
        assert metric in exprs
