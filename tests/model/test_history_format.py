"""The history format: its name and version are checked first, every other problem is
named by its field, and a node written back as a cluster-file entry builds the same node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.model.cluster_spec import node_entry, parse_cluster
from hetsched.model.device import Device, Health, Node, Taint, TaintEffect
from hetsched.model.history import VERSION, job_spec_document, load_history, parse_history
from hetsched.model.specs import JobSpec, SpecError


def _document(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "format": "hetsched-history",
        "version": VERSION,
        "source": "test",
        "origin": 1000.0,
        "taken_s": 10.0,
        "jobs": [
            {
                "id": "a",
                "user": "alice",
                "spec": {"resources": {"cpu": "1"}},
                "submit_s": 0.0,
                "state": "succeeded",
            }
        ],
    }
    document.update(overrides)
    return document


def test_a_document_of_this_version_reads() -> None:
    document = parse_history(_document())
    assert [j.id for j in document.jobs] == ["a"] and document.jobs[0].state == "succeeded"


def test_another_version_is_refused_by_name() -> None:
    with pytest.raises(SpecError) as caught:
        parse_history(_document(version=2), "h.json")
    assert caught.value.errors == [
        "version: this hetsched reads hetsched-history version 1, the file is version 2 "
        "(export it again with this hetsched)"
    ]


def test_another_format_is_refused_by_name() -> None:
    with pytest.raises(SpecError) as caught:
        parse_history({"format": "gavel", "version": 1})
    assert caught.value.errors == ["format: expected 'hetsched-history', got 'gavel'"]


def test_a_bad_field_is_named_with_its_path() -> None:
    bad = _document()
    bad["jobs"][0]["submit_s"] = -1
    bad["jobs"][0]["state"] = "sleeping"
    with pytest.raises(SpecError) as caught:
        parse_history(bad)
    fields = [line.split(":")[0] for line in caught.value.errors]
    assert fields == ["jobs[0].submit_s", "jobs[0].state"]


def test_a_file_that_is_not_json_says_so(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text("{not json")
    with pytest.raises(SpecError, match=r"h.json: not JSON"):
        load_history(path)
    path.write_text(json.dumps(_document()))
    assert load_history(path).source == "test"


_names = st.text("abcxyz019-", min_size=1, max_size=8)
_attrs = st.dictionaries(
    st.sampled_from(["memory_gib", "numa", "nvlink_domain"]),
    st.one_of(st.integers(0, 128), _names),
    max_size=2,
)


@st.composite
def _nodes(draw: st.DrawFn) -> Node:
    """A node whose devices are numbered per class in order, as cluster files number them."""
    name = draw(_names)
    kinds = draw(
        st.lists(
            st.tuples(st.sampled_from(["gpu", "fpga", "npu"]), _names, _attrs, st.booleans()),
            max_size=5,
        )
    )
    seen: dict[str, int] = {}
    devices = []
    for cls, model, attrs, healthy in kinds:
        index = seen.get(cls, 0)
        seen[cls] = index + 1
        health = Health.HEALTHY if healthy else Health.UNHEALTHY
        devices.append(Device(f"{name}/{cls}{index}", cls, "v", model, attrs, health))
    taints = draw(st.lists(st.builds(Taint, _names, _names, st.sampled_from(TaintEffect))))
    labels = draw(st.dictionaries(_names, _names, max_size=2))
    cpu, memory = draw(st.integers(1, 10**6)), draw(st.integers(1, 10**7))
    return Node(name, cpu, memory, tuple(devices), labels, tuple(taints[:2]))


@settings(max_examples=60, deadline=None)
@given(_nodes())
def test_a_node_entry_builds_the_same_node(node: Node) -> None:
    assert parse_cluster({"nodes": [node_entry(node)]}) == [node]


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "cpu-only", "resources": {"cpu": "500m", "memory": "2Gi"}},
        {
            "name": "train",
            "queue": "team-a",
            "priority": 5,
            "replicas": 4,
            "gang": 4,
            "preemptible": False,
            "estimated_runtime": 3600,
            "resources": {
                "cpu": "8",
                "memory": "64Gi",
                "devices": [
                    {
                        "class": "gpu",
                        "count": 2,
                        "model": "A100",
                        "alternatives": [{"class": "gpu", "count": 4, "model": ["V100"]}],
                    },
                    {"class": "fpga", "share": 250},
                ],
                "node_selector": {"zone": "a"},
                "tolerations": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
            },
        },
    ],
)
def test_a_job_written_as_a_spec_builds_the_same_job(spec: dict[str, Any]) -> None:
    common = {"id": "j", "user": "u", "submit_time": 7.0}
    job = JobSpec.model_validate(spec | common).build()
    again = JobSpec.model_validate(job_spec_document(job) | common).build()
    assert again == job
