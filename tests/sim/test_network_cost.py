"""The simulator's network cost: a gang's speed by the narrowest domain holding all its
tasks, applied to its run time; and the topology study, run small."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from builders import gpu_node
from hetsched.cli.main import app
from hetsched.cluster.placement import Placement
from hetsched.model.device import Node
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.model.topology import TopologyRequest
from hetsched.sim.engine import EngineConfig, Simulator
from hetsched.sim.experiments.topology import LEVELS as LEVELS_STUDY
from hetsched.sim.experiments.topology import NVLinkSampled, study, study_cluster
from hetsched.sim.network import NetworkCost, Slowdown
from hetsched.sim.workload import Workload, WorkloadJob

LEVELS = ("x/block", "x/rack", "x/nvlink-domain")


def _cluster() -> list[Node]:
    """b0: rack r0 (nvlink v0 = n0, n1; v1 = n2), rack r1 (n3); b1: rack r2 (n4)."""
    where = [("b0", "r0", "v0"), ("b0", "r0", "v0"), ("b0", "r0", "v1"), ("b0", "r1", "v2")]
    where.append(("b1", "r2", "v3"))
    return [
        gpu_node(f"n{i}", gpus=8, labels=dict(zip(LEVELS, labels, strict=True)))
        for i, labels in enumerate(where)
    ]


def _on(*nodes: str) -> list[Placement]:
    return [Placement(n, 0, 0) for n in nodes]


@pytest.mark.parametrize(
    ("nodes", "factor", "span"),
    [
        (("n0", "n0"), 1.0, None),
        (("n0", "n1"), 1.0, "nvlink-domain"),
        (("n0", "n2"), 0.9, "rack"),
        (("n0", "n3"), 0.75, "block"),
        (("n0", "n4"), 0.5, "across"),
    ],
)
def test_speed_by_the_narrowest_domain_holding_the_gang(
    nodes: tuple[str, ...], factor: float, span: str | None
) -> None:
    slowdown = Slowdown(NetworkCost(LEVELS), _cluster())
    assert slowdown.factor(_on(*nodes)) == factor
    assert dict(slowdown.spans) == ({} if span is None else {span: 1})


def test_a_level_without_a_factor_runs_at_the_narrower_ones() -> None:
    slowdown = Slowdown(NetworkCost(LEVELS, {"rack": 0.8, "across": 0.4}), _cluster())
    # nvlink and host default to 1.0 (no factor: the host's), block to the rack's 0.8
    assert [slowdown.factor(_on("n0", n)) for n in ("n1", "n2", "n3", "n4")] == [
        1.0,
        0.8,
        0.8,
        0.4,
    ]
    with pytest.raises(ValueError, match="network factor rack: must be in"):
        NetworkCost(LEVELS, {"rack": 1.5})


def _gang(job_id: str, topology: TopologyRequest | None = None) -> Job:
    request = TaskRequest(1000, 1024, (DeviceRequest.of("gpu", 8),))
    return Job(job_id, request, replicas=2, topology=topology)


def test_a_gang_across_racks_runs_longer_unless_it_asks_for_one() -> None:
    # n0 is taken by a one-node job first: best fit alone then puts the gang on n1 (nvlink
    # v0) and n2 (rack r0): 0.9; the gang that requires an nvlink domain waits for v0
    nodes = _cluster()[:4]
    config = EngineConfig(network=NetworkCost(LEVELS))
    first = Job("first", TaskRequest(1000, 1024, (DeviceRequest.of("gpu", 8),)))
    for topology, end in ((None, 100 / 0.9), (TopologyRequest(required=LEVELS[2]), 150.0)):
        workload = Workload((WorkloadJob(first, 50.0), WorkloadJob(_gang("g", topology), 100.0)))
        result = Simulator(nodes, workload, config=config).run()
        gang = next(j for j in result.jobs if j.job_id == "g")
        assert gang.end == pytest.approx(end)


def test_study_required_never_spans_beyond_its_level() -> None:
    outcomes = {o.way: o for o in study(jobs=40, load=0.8, seed=1, shape=(2, 4, 8))}
    assert set(outcomes) == {"unaware", "required", "preferred"}
    assert all(o.finished == 40 for o in outcomes.values())
    # no gang of the study is larger than a block (32 nodes): required never spans blocks
    assert "across" not in outcomes["required"].spans
    assert outcomes["required"].jct_mean_h < outcomes["unaware"].jct_mean_h


def test_fragmentation_counts_free_gpus_outside_wholly_free_nvlink_domains() -> None:
    nodes = study_cluster(1, 1, 8)  # one rack of 8 nodes: NVLink domains n0-n3, n4-n7
    one = Job("one", TaskRequest(1000, 1024, (DeviceRequest.of("gpu", 8),)))
    sim = NVLinkSampled(
        nodes,
        Workload((WorkloadJob(one, 10.0),)),
        config=EngineConfig(network=NetworkCost(LEVELS_STUDY)),
    )
    sim.run()
    # as it starts on n0: 56 GPUs free, the 32 of the second domain in a whole free one
    assert sim.fragments == [pytest.approx(1 - 32 / 56)]


def test_cli_runs_the_study_and_refuses_a_bad_factor() -> None:
    runner = CliRunner()
    args = ["sim", "topology", "--jobs", "20", "--blocks", "1", "--racks", "2", "-o", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    ways = json.loads(result.stdout)["ways"]
    assert [w["way"] for w in ways] == ["unaware", "required", "preferred"]
    assert all(w["finished"] == 20 for w in ways)
    # the table gives each way whole, with its figures, one row each
    table = runner.invoke(app, args[:-2])
    assert table.exit_code == 0, table.output
    rows = [line.split()[:3] for line in table.stdout.splitlines()[2:]]
    expected = [[w["way"], "20/20", f"{w['jct_mean_h']:.2f}"] for w in ways]
    assert rows == expected, table.stdout
    bad = runner.invoke(app, ["sim", "topology", "--factors", "rack=1.5"])
    assert bad.exit_code == 2
    assert "--factors: 'rack=1.5': expected LEVEL=F with 0 < F <= 1" in bad.output
