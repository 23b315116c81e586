"""``hetsched place`` over a cluster file with ``topology: {levels}``: tasks inside the
domains their jobs ask for, the domains of each placement, and bad topology input refused
naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.model.specs import SpecError, parse_jobs, validate_cluster

runner = CliRunner()
RACK = "network.hetsched.io/rack"


def test_place_keeps_jobs_inside_their_domains(examples: Path) -> None:
    folder = examples / "topology"
    cluster, jobs = str(folder / "cluster.yaml"), str(folder / "jobs.yaml")
    result = runner.invoke(app, ["place", "--cluster", cluster, "--jobs", jobs, "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    nodes: dict[str, list[str]] = {}
    for p in doc["placements"]:
        nodes.setdefault(p["job"], []).append(p["node"])
    # nvl-a (gb200-a-*) is the first domain that holds 2 tasks of 4 GPUs
    assert nodes["tp-group"] == ["gb200-a-0", "gb200-a-1"]
    # r3 holds one more slice of 2 (nvl-b); r1 and r2 (lone nodes) hold none
    assert nodes["pretrain"] == ["gb200-b-0", "gb200-b-1"]
    # no rack holds 6 tasks of 2 GPUs: block b1 across its two racks, r1 first
    assert nodes["finetune"] == ["h100-r1-0"] * 2 + ["h100-r1-1"] * 2 + ["h100-r2-0"] * 2
    first = doc["placements"][0]
    assert first["domains"] == {
        "network.hetsched.io/block": "b2",
        RACK: "r3",
        "network.hetsched.io/nvlink-domain": "nvl-a",
    }
    (ring,) = doc["pending"]
    assert ring["job"] == "ring"
    assert ring["explanation"]["summary"] == (
        "topology (required rack): no rack has room for 6 tasks (most: rack r1 with 4)"
    )
    assert ring["explanation"]["reasons"] == [
        "block b1 has room for 8 across 2 racks: `preferred` would place it now"
    ]


def _job(**topology: object) -> dict[str, object]:
    return {"jobs": [{"name": "a", "replicas": 4, "topology": topology}]}


@pytest.mark.parametrize(
    ("topology", "error"),
    [
        ({"required": RACK, "preferred": RACK}, "jobs[0].topology: give exactly one of"),
        ({}, "jobs[0].topology: give exactly one of required and preferred"),
        ({"required": RACK, "slice_size": 2}, "slice_size and slice_required go together"),
        ({"required": RACK, "slice_size": 3, "slice_required": RACK}, "multiple of 3"),
        ({"required": RACK, "level": 1}, "jobs[0].topology.level: Extra inputs"),
    ],
)
def test_bad_job_topology_names_the_field(topology: dict[str, object], error: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_jobs(_job(**topology))
    assert error in str(caught.value)


def test_job_topology_builds() -> None:
    (job,) = parse_jobs(_job(required=RACK, slice_size=2, slice_required="x/nvl"))
    assert job.topology is not None
    assert (job.topology.required, job.topology.slice_size) == (RACK, 2)
    assert job.topology.describe() == "required rack, slices of 2 per nvl"


def test_cluster_levels_listed_twice_are_refused() -> None:
    doc = {
        "topology": {"levels": ["a", "b", "a"]},
        "nodes": [{"name": "n", "cpu": 1, "memory": "1Gi"}],
    }
    with pytest.raises(SpecError) as caught:
        validate_cluster(doc)
    assert "topology: levels[2]: level 'a' is listed twice" in str(caught.value)


def test_place_table_shows_each_task_domain(examples: Path) -> None:
    folder = examples / "topology"
    cluster, jobs = str(folder / "cluster.yaml"), str(folder / "jobs.yaml")
    result = runner.invoke(app, ["place", "--cluster", cluster, "--jobs", jobs])
    assert result.exit_code == 0, result.output
    rows = {tuple(line.split()[:4]) for line in result.output.splitlines()}
    assert ("tp-group", "0", "gb200-a-0", "b2/r3/nvl-a") in rows
    # an H100 node has no NVLink label: its own domain at that level
    assert ("finetune", "4", "h100-r2-0", "b1/r2/h100-r2-0") in rows
