from pathlib import Path

import pytest

from hetsched.model.device import Health, TaintEffect
from hetsched.model.specs import SpecError, load_cluster, load_jobs, parse_cluster, parse_jobs


def test_example_cluster_expands_replicas(examples: Path) -> None:
    nodes = load_cluster(examples / "clusters" / "mixed.yaml")
    names = [n.name for n in nodes]
    assert names[:2] == ["a100-0", "a100-1"]
    a100 = nodes[0]
    assert a100.cpu_milli == 64_000 and a100.memory_mib == 512 * 1024
    assert [d.id for d in a100.devices][:2] == ["a100-0/gpu0", "a100-0/gpu1"]
    assert len(a100.devices) == 8
    assert a100.devices[0].attributes["memory_gib"] == 80
    fpga = next(n for n in nodes if n.name == "fpga-0")
    assert fpga.taints[0].effect is TaintEffect.NO_SCHEDULE
    assert {d.device_class for d in fpga.devices} == {"fpga"}


def test_example_jobs(examples: Path) -> None:
    jobs = {j.id: j for j in load_jobs(examples / "jobs" / "mixed.yaml")}
    train = jobs["train-llm"]
    assert (train.replicas, train.gang_min, train.priority) == (2, 2, 10)
    assert train.resources.devices[0].primary.count == 8
    notebook = jobs["notebook"].resources.devices[0].primary
    assert (notebook.count, notebook.share) == (1, 300)
    inference = jobs["inference"].resources.devices[0]
    assert [c.share for c in inference.choices] == [1000, 500]
    assert inference.choices[1].selector == 'device.attributes["model"] in ["V100"]'


def _job(**resources: object) -> dict[str, object]:
    return {"name": "j", "resources": resources}


@pytest.mark.parametrize(
    ("document", "error"),
    [
        (
            {"jobs": [_job(), _job(devices=[{"class": "gpu", "share": 1500}])]},
            "jobs[1].resources.devices[0].share: must be 1..1000, got 1500",
        ),
        (
            {"jobs": [_job(devices=[{"class": "gpu", "count": 2, "share": 500}])]},
            "jobs[0].resources.devices[0]: a share below 1000 needs count 1, got count 2",
        ),
        (
            {"jobs": [_job(cpu="lots")]},
            "jobs[0].resources.cpu: not a quantity: 'lots'",
        ),
        (
            {"jobs": [_job(memory="-1Gi")]},
            "jobs[0].resources.memory: not a quantity",
        ),
        (
            {"jobs": [_job(devices=[{"class": "gpu", "selector": 'device.attributes["m"] in ['}])]},
            "jobs[0].resources.devices[0].selector: invalid selector",
        ),
        ({"jobs": [{"name": "j", "replicas": 0}]}, "jobs[0].replicas: Input should be greater"),
        ({"jobs": [{"name": "j", "replicas": 2, "gang": 3}]}, "gang must be 1..replicas (2)"),
        ({"jobs": [{"name": "j"}, {"name": "j"}]}, "duplicate job id 'j'"),
        ({"jobs": [{"name": "j", "colour": "red"}]}, "jobs[0].colour: Extra inputs"),
        ({"jobs": [{"name": "j", "max_runtime": "soon"}]}, "jobs[0].max_runtime: not a duration"),
        ({"jobs": []}, "jobs: List should have at least 1 item"),
    ],
)
def test_bad_jobs_name_the_field(document: object, error: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_jobs(document, "jobs.yaml")
    assert any(e.startswith(error) or error in e for e in caught.value.errors), caught.value.errors
    assert str(caught.value).startswith("jobs.yaml: ")


def test_every_error_is_reported_at_once() -> None:
    document = {"jobs": [_job(cpu="x"), _job(devices=[{"class": "gpu", "share": 0}])]}
    with pytest.raises(SpecError) as caught:
        parse_jobs(document)
    assert len(caught.value.errors) == 2


@pytest.mark.parametrize(
    ("document", "error"),
    [
        ({"nodes": [{"name": "n", "cpu": "4"}]}, "nodes[0].memory: Field required"),
        (
            {"nodes": [{"name": "n", "cpu": None, "memory": "1Gi"}]},
            "nodes[0].cpu: expected a quantity, got None",
        ),
        ({"nodes": [{"name": "n-{i}", "replicas": 0, "cpu": 1, "memory": "1Gi"}]}, "replicas"),
        ({"nodes": [{"name": "n", "replicas": 2, "cpu": 1, "memory": "1Gi"}]}, "needs '{i}'"),
        (
            {"nodes": [{"name": "n", "cpu": 1, "memory": "1Gi", "devices": [{"count": 1}]}]},
            "nodes[0].devices[0].class: Field required",
        ),
        (
            {
                "nodes": [
                    {"name": "n", "cpu": 1, "memory": "1Gi"},
                    {"name": "n", "cpu": 1, "memory": 1},
                ]
            },
            "duplicate node name 'n'",
        ),
    ],
)
def test_bad_clusters_name_the_field(document: object, error: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_cluster(document)
    assert any(error in e for e in caught.value.errors), caught.value.errors


def test_device_health_and_model_shorthand() -> None:
    nodes = parse_cluster(
        {
            "nodes": [
                {
                    "name": "n",
                    "cpu": 8,
                    "memory": "8Gi",
                    "devices": [
                        {"class": "npu", "model": "910B", "count": 2, "health": "unhealthy"}
                    ],
                }
            ]
        }
    )
    assert [d.health for d in nodes[0].devices] == [Health.UNHEALTHY] * 2
    jobs = parse_jobs({"jobs": [_job(devices=[{"class": "gpu", "model": ["A100", "H100"]}])]})
    selector = jobs[0].resources.devices[0].primary.selector
    assert selector == 'device.attributes["model"] in ["A100", "H100"]'
